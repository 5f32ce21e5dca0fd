"""Drift from a baseline: tonight's profile against last night's (pure functions, no I/O).

Two profiles (the JSON form of `scrub.profile`, as a scan record holds it) are compared
feature by feature; each comparison that moved more than its family's threshold is a
`DriftFinding`, naming the feature (``arrays.16.features.3``, ``labels.classes``,
``images.width``), the distance and the threshold it passed. docs/drift.md gives the method,
the formulas and the calibration behind the defaults; in short:

* categories (class shares, image modes, the most frequent token ids) by the L-infinity distance
  of their shares, as TensorFlow Data Validation does;
* numbers (array features and rows, value labels, image width, height, brightness and contrast,
  token lengths, supervised share) by the Jensen-Shannon distance (base 2, in [0, 1]) over the
  baseline's deciles: ten equiprobable bins taken from the baseline's 101 quantiles, plus a point
  bin at each edge (data with ties: image sizes, lengths) and a bin below and above the baseline's
  range; each side's mass per bin comes from its own 101 quantiles (an interpolated CDF).
  Jensen-Shannon rather than PSI: it is bounded and defined when a bin is empty on one side (the
  baseline's own tails are empty by construction, so PSI's value there depends on an arbitrary
  epsilon), and measured as quiet and as sensitive (benchmarks/calibrate_drift.py);
* the record count by its relative change; an array group's dtypes and the row shapes by a dtype
  or shape that one side lacks and the other holds in too many records to miss by chance.

A threshold is an effect size; sampling alone also moves a distance, more for few records than for
many. So a comparison drifts only when its distance exceeds both the family's threshold and the
distance sampling makes likely at these record counts (`js_floor`, `share_floor`, at a
one-in-a-million chance for each comparison): quiet on resamples of a small dataset, and at a large one the
threshold alone decides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from statistics import NormalDist
from typing import Any

from scrub.profile import GROUPS

#: the families a threshold is set for (``--drift-threshold FAMILY=VALUE``, a config table)
FAMILIES = ("records", "label", "value", "size", "length", "token")

#: the check id of each family's findings (`scrub.checks.drift`)
FAMILY_CHECKS = {
    "records": "record-count-change",
    "label": "label-drift",
    "value": "value-drift",
    "size": "size-drift",
    "length": "length-drift",
    "token": "token-drift",
}

#: every id a comparison may raise
DRIFT_CHECKS = (*FAMILY_CHECKS.values(), "dtype-change")

#: the chance, for one comparison of two samples of the same data, that sampling alone moves its
#: distance past the sampling floor (`js_floor`, `share_floor`)
FALSE_ALARM = 1e-6

#: a category held on one side only is a finding, whatever its share, when the other side's records
#: would have held this many of it: sampling misses it then with a chance of e^-14, ~1e-6
ABSENCE = -math.log(FALSE_ALARM)

#: the array groups (row shapes) a profile lists at most
ARRAY_GROUPS = GROUPS

#: the baseline's quantiles that bound the bins of a numeric comparison: every tenth of the 101
#: (deciles), measured against every one (100 bins) in docs/drift.md
BIN_EDGES = tuple(range(0, 101, 10))

#: records beyond which a quantile sketch's own error, not sampling, bounds how well its deciles
#: are known: two KLL sketches (k=200) of the same values differ over the deciles as two samples
#: of ~1,550 to 1,950 values each do (benchmarks/calibrate_drift.py, five runs: 1,561 to 1,924; KLL
#: draws random bits of its own); below the lowest
SKETCH_RECORDS = 1_500


@dataclass(frozen=True)
class DriftThresholds:
    """The distance each family may move before it is a finding (docs/drift.md: calibrated so
    that bootstrap resamples of the same data raise nothing)."""

    records: float = 0.1  # relative change of the record count
    label: float = 0.05  # L-infinity distance of class shares (and mask pixel, box class shares)
    value: float = 0.1  # Jensen-Shannon distance of array values, value labels, image brightness
    size: float = 0.1  # Jensen-Shannon distance of image width/height; L-infinity of image modes
    length: float = 0.1  # Jensen-Shannon distance of token lengths and supervised shares
    token: float = 0.01  # L-infinity distance of the most frequent token ids' shares of all tokens

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, float]]) -> "DriftThresholds":
        """The defaults with the given ``(family, value)`` pairs laid over them (validated by
        `scrub.options.values`)."""
        return cls(**dict(pairs))

    def of(self, family: str) -> float:
        return float(getattr(self, family))


assert tuple(f.name for f in fields(DriftThresholds)) == FAMILIES


@dataclass(frozen=True)
class DriftFinding:
    """One feature that moved more than its threshold."""

    check: str  # the check id (`DRIFT_CHECKS`)
    feature: str  # where in the profile: "arrays.16.features.3", "labels.classes", "images.width"
    #: the distance measured (a relative change for the record count; the share of the new or gone
    #: dtype or shape for a dtype-change)
    distance: float
    threshold: float  # what it passed: the family's threshold, or the sampling floor where higher
    message: str
    details: dict[str, Any] = field(default_factory=dict)


def compared_checks(previous: Mapping[str, Any], current: Mapping[str, Any]) -> frozenset[str]:
    """The drift checks two profiles give something to compare: `record-count-change` always,
    each other where either profile holds its features (rows of an HDF5 file have no image
    sizes or token lengths to drift). The scan lists only these in its check table."""
    found = {FAMILY_CHECKS["records"]}
    for profile in (previous, current):
        labels = profile.get("labels") or {}
        if labels or profile.get("masks") or profile.get("boxes"):
            found.add(FAMILY_CHECKS["label"])
        if labels.get("kind") == "value" or profile.get("arrays") or profile.get("images"):
            found.add(FAMILY_CHECKS["value"])
        if profile.get("images"):
            found.add(FAMILY_CHECKS["size"])
        if profile.get("tokens"):
            found |= {FAMILY_CHECKS["length"], FAMILY_CHECKS["token"]}
        if profile.get("arrays"):
            found.add("dtype-change")
    return frozenset(found)


def compare(
    previous: Mapping[str, Any],
    current: Mapping[str, Any],
    thresholds: DriftThresholds | None = None,
    notes: list[str] | None = None,
) -> list[DriftFinding]:
    """Tonight's profile ``current`` against the baseline's ``previous``: the features that moved
    more than their family's threshold (and than sampling explains). A feature that one profile
    holds and the other does not is said in ``notes`` (when given), never skipped silently."""
    thresholds = thresholds or DriftThresholds()
    said: list[str] = notes if notes is not None else []
    comparison = _Comparison(thresholds, said)
    if previous.get("version") != current.get("version"):
        said.append(
            f"drift: the baseline's profile is of version {previous.get('version')}, tonight's of "
            f"{current.get('version')}: compared where their fields agree"
        )
    reused = {
        "the baseline's": int(previous.get("reused") or 0),
        "tonight's": int(current.get("reused") or 0),
    }
    if any(reused.values()):
        # a record reused from --cache is not read: the profile counts it (records, classes,
        # image modes, mask pixels) but sketches nothing of it, so the rest describes only the
        # records read again (docs/profile.md): comparing that with a whole profile is not drift
        which = " and ".join(f"{count:,} of {side} records" for side, count in reused.items() if count)
        said.append(
            f"drift: {which} were reused from --cache, and a profile sketches nothing of them: only "
            "the record count, classes, image modes and mask pixels were compared"
        )
        comparison.exact_only = True
    comparison.record_count(previous, current)
    comparison.labels(previous.get("labels"), current.get("labels"), previous, current)
    comparison.images(previous.get("images"), current.get("images"))
    comparison.shares_of(previous, current, "masks", "pixels", "masks.pixels", "label")
    if not comparison.exact_only:
        comparison.arrays(previous.get("arrays"), current.get("arrays"))
        comparison.tokens(previous.get("tokens"), current.get("tokens"))
        comparison.shares_of(previous, current, "boxes", "classes", "boxes.classes", "label")
        comparison.shares_of(previous, current, "boxes", "per_image", "boxes.per_image", "label")
    return comparison.found


class _Comparison:
    """The findings and notes of one `compare`, feature by feature."""

    def __init__(self, thresholds: DriftThresholds, notes: list[str]) -> None:
        self.thresholds = thresholds
        self.notes = notes
        self.found: list[DriftFinding] = []
        #: compare only what a profile counts exactly for records reused from the cache
        self.exact_only = False

    def one_sided(self, feature: str, previous: Any, current: Any) -> bool:
        """Whether only one side holds ``feature`` (said in a note); False when both or neither do."""
        if (previous is None) == (current is None):
            return False
        side = "the baseline's profile" if previous is not None else "tonight's profile"
        other = "tonight's" if previous is not None else "the baseline's"
        self.notes.append(f"drift: {feature} is in {side} only, not in {other}: not compared")
        return True

    def _moved(
        self, family: str, feature: str, distance: float, limit: float, said: str, details: dict[str, Any]
    ) -> None:
        """A feature of ``family`` moved past its limit: the family's drift check finds it."""
        self.found.append(DriftFinding(FAMILY_CHECKS[family], feature, distance, limit, said, details))

    def record_count(self, previous: Mapping[str, Any], current: Mapping[str, Any]) -> None:
        before, now = int(previous.get("records", 0)), int(current.get("records", 0))
        threshold = self.thresholds.records
        if before == 0:
            if now:
                self.notes.append(
                    "drift: the baseline's profile saw no record: the record count is not compared"
                )
            return
        change = (now - before) / before
        if abs(change) > threshold:
            self.found.append(
                DriftFinding(
                    "record-count-change",
                    "records",
                    abs(change),
                    threshold,
                    f"records: {now:,} tonight, {before:,} in the baseline ({change:+.1%}; the "
                    f"threshold is {threshold:.0%})",
                    {"previous": before, "current": now, "change": change},
                )
            )

    def labels(
        self,
        previous: Mapping[str, Any] | None,
        current: Mapping[str, Any] | None,
        previous_profile: Mapping[str, Any],
        current_profile: Mapping[str, Any],
    ) -> None:
        if previous is None or current is None:
            self.one_sided("labels", previous, current)
            return
        if previous.get("kind") != current.get("kind"):
            self.found.append(
                DriftFinding(
                    "label-drift",
                    "labels.kind",
                    1.0,
                    self.thresholds.label,
                    f"labels.kind: {current.get('kind')} labels tonight, {previous.get('kind')} labels in "
                    "the baseline",
                    {"previous": previous.get("kind"), "current": current.get("kind")},
                )
            )
            return
        if self.exact_only and previous.get("kind") != "class":
            return  # value labels are sketched, and counted, from the records read only
        presence_before = {"labelled": previous.get("labelled", 0), "missing": previous.get("missing", 0)}
        presence_now = {"labelled": current.get("labelled", 0), "missing": current.get("missing", 0)}
        self.categories("labels.labelled", presence_before, presence_now, "label", what="records")
        if previous.get("kind") == "class":
            self.categories(
                "labels.classes",
                previous.get("classes") or {},
                current.get("classes") or {},
                "label",
                "class",
            )
        else:
            self.numbers("labels.values", previous.get("values"), current.get("values"), "value")

    def arrays(self, previous: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> None:
        if previous is None or current is None:
            self.one_sided("arrays", previous, current)
            return
        records_before = {group: int(previous[group].get("records", 0)) for group in previous}
        records_now = {group: int(current[group].get("records", 0)) for group in current}
        if max(len(previous), len(current)) >= ARRAY_GROUPS:
            # the profile keeps the first shapes a run meets: past its cap, which ones depends on
            # the partitions' order, and the rest are not listed
            self.notes.append(
                f"drift: {ARRAY_GROUPS} row shapes or more in a profile (rows of many sizes): the shapes "
                "are not compared, only the groups both profiles hold"
            )
        else:
            self.changed("arrays", "rows of shape", records_before, records_now)
        for group in sorted(set(previous) & set(current), key=_natural):
            before, now = previous[group], current[group]
            self.changed(f"arrays.{group}.dtypes", "", before.get("dtypes") or {}, now.get("dtypes") or {})
            features_before, features_now = before.get("features") or {}, now.get("features") or {}
            # a row's elements come in records: resampling the records moves them together, so
            # the rows sketched (each gives its first positions to `features`) are its sample size
            rows = (_rows_sketched(before, features_before), _rows_sketched(now, features_now))
            self.numbers(f"arrays.{group}.row", before.get("row"), now.get("row"), "value", rows)
            names = {**(before.get("names") or {}), **(now.get("names") or {})}
            for position in sorted(set(features_before) | set(features_now), key=_natural):
                feature = f"arrays.{group}.features.{position}"
                one, other = features_before.get(position), features_now.get(position)
                if not self.one_sided(feature, one, other):
                    self.numbers(feature, one, other, "value", named=names.get(position))

    def changed(
        self, feature: str, what: str, previous: Mapping[str, int], current: Mapping[str, int]
    ) -> None:
        """A `dtype-change`: a dtype or row shape that one side holds in so many records that the
        other lacks it only by chance (`ABSENCE`: the whole dataset from float32 to float64, or
        from rows of 16 to rows of 32). A few rows of another shape or dtype among many are
        records' findings (`shape-mismatch`), not the dataset's; and a shape that sampling can
        miss must not raise a drift on a resample of the same data."""
        total_before, total_now = sum(previous.values()), sum(current.values())
        if not total_before or not total_now:
            return
        appeared = sorted(
            name
            for name in set(current) - set(previous)
            if current[name] / total_now * total_before >= ABSENCE
        )
        gone = sorted(
            name
            for name in set(previous) - set(current)
            if previous[name] / total_before * total_now >= ABSENCE
        )
        if not appeared and not gone:
            return
        moved = max(
            [current[name] / total_now for name in appeared]
            + [previous[name] / total_before for name in gone]
        )
        self.found.append(
            DriftFinding(
                "dtype-change",
                feature,
                moved,
                0.0,
                f"{feature}: {what + ' ' if what else ''}{_listed(current)} tonight, {_listed(previous)} in "
                "the baseline"
                + "".join(
                    f"; {_listed(names)} {said}"
                    for names, said in ((appeared, "new"), (gone, "gone"))
                    if names
                ),
                {
                    "previous": {name: previous[name] for name in sorted(previous, key=_natural)},
                    "current": {name: current[name] for name in sorted(current, key=_natural)},
                    "new": appeared,
                    "gone": gone,
                },
            )
        )

    def images(self, previous: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> None:
        if previous is None or current is None:
            self.one_sided("images", previous, current)
            return
        for name in ("width", "height"):
            self.numbers(f"images.{name}", previous.get(name), current.get(name), "size")
        self.categories(
            "images.modes", previous.get("modes") or {}, current.get("modes") or {}, "size", "mode"
        )
        for name in ("brightness", "contrast"):
            self.numbers(f"images.{name}", previous.get(name), current.get(name), "value")

    def tokens(self, previous: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> None:
        if previous is None or current is None:
            self.one_sided("tokens", previous, current)
            return
        self.numbers("tokens.length", previous.get("length"), current.get("length"), "length")
        self.numbers("tokens.supervised", previous.get("supervised"), current.get("supervised"), "length")
        self.top_ids(previous, current)

    def shares_of(
        self,
        previous: Mapping[str, Any],
        current: Mapping[str, Any],
        section: str,
        part: str,
        feature: str,
        family: str,
    ) -> None:
        before = (previous.get(section) or {}).get(part)
        now = (current.get(section) or {}).get(part)
        if before is None or now is None:
            self.one_sided(feature, before, now)
            return
        # pixels and boxes come in records: sampling moves their shares as it moves the records'
        self.categories(
            feature,
            before,
            now,
            family,
            "class",
            records=(previous.get("records", 0), current.get("records", 0)),
        )

    def categories(
        self,
        feature: str,
        previous: Mapping[str, Any],
        current: Mapping[str, Any],
        family: str,
        what: str,
        records: tuple[int, int] | None = None,
    ) -> None:
        """The L-infinity distance of two histograms' shares; the category that moved most names it."""
        total_before, total_now = sum(previous.values()), sum(current.values())
        if not total_before or not total_now:
            if total_before or total_now:
                self.notes.append(f"drift: {feature} is empty on one side: not compared")
            return
        sizes = records if records is not None and all(records) else (total_before, total_now)
        threshold = self.thresholds.of(family)
        # (distance, limit, name, before, now, rule): the category that moved most past its limit
        worst: tuple[float, float, str, float, float, str] | None = None
        gone: list[tuple[float, str, float, float]] = []  # categories on one side only: (expected, ...)
        distance = 0.0
        for name in sorted(set(previous) | set(current), key=_natural):
            share_before = previous.get(name, 0) / total_before
            share_now = current.get(name, 0) / total_now
            moved = abs(share_now - share_before)
            distance = max(distance, moved)
            limit = max(threshold, share_floor(share_before, share_now, sizes[0], sizes[1]))
            if moved > limit and (worst is None or moved - limit > worst[0] - worst[1]):
                worst = (moved, limit, name, share_before, share_now, "share")
            elif worst is None and (share_before == 0) != (share_now == 0):
                # a category gone (or new) moves its share little when it was small, but a sampling
                # loses one that the other side holds in `ABSENCE` records' worth only by chance
                expected = (share_before * sizes[1]) if share_now == 0 else (share_now * sizes[0])
                if expected >= ABSENCE:
                    gone.append((expected, name, share_before, share_now))
        if worst is None and gone:
            expected, name, share_before, share_now = max(gone)
            rule = "gone" if share_now == 0 else "new"
            worst = (abs(share_now - share_before), threshold, name, share_before, share_now, rule)
        if worst is None:
            return
        moved, limit, name, share_before, share_now, rule = worst
        if rule == "share":
            said = (
                f"{feature}: {what} {name}'s share is {share_now:.1%} tonight, {share_before:.1%} in the "
                f"baseline: L-infinity distance {distance:.3f} > {limit:.3f}" + _floor_said(limit, threshold)
            )
        else:  # a category on one side only (`ABSENCE`)
            said = (
                f"{feature}: {what} {name} is "
                + (
                    f"gone tonight ({share_before:.1%} in the baseline)"
                    if share_now == 0
                    else f"new tonight ({share_now:.1%})"
                )
                + f": sampling misses it so only by chance (L-infinity distance {distance:.3f})"
            )
        details = {
            "metric": "l-infinity",
            "rule": rule,
            "category": name,
            "previous_share": share_before,
            "current_share": share_now,
            "family_threshold": threshold,
            "sampling_floor": limit if limit > threshold else None,
        }
        self._moved(family, feature, distance, limit, said, details)

    def top_ids(self, previous: Mapping[str, Any], current: Mapping[str, Any]) -> None:
        """The most frequent ids' shares of all tokens. An id listed on one side only is below the
        other side's list: its share there lies between 0 and that list's smallest, and only the
        distance it surely moved counts (a list cut at 64 ids raises nothing by itself)."""
        before, now = _top_shares(previous), _top_shares(current)
        if before is None or now is None:
            if (before is None) != (now is None):
                self.notes.append("drift: tokens.top_ids is empty on one side: not compared")
            return
        (shares_before, floor_before, tokens_before) = before
        (shares_now, floor_now, tokens_now) = now
        threshold = self.thresholds.token
        distance, worst = 0.0, None
        for token in set(shares_before) | set(shares_now):
            share_before = shares_before.get(token)
            share_now = shares_now.get(token)
            if share_before is None:
                moved = max(0.0, share_now - floor_before) if share_now is not None else 0.0
            elif share_now is None:
                moved = max(0.0, share_before - floor_now)
            else:
                moved = abs(share_now - share_before)
            distance = max(distance, moved)
            known_before = share_before if share_before is not None else floor_before
            known_now = share_now if share_now is not None else floor_now
            # tokens come in sequences: sampling moves their shares as it moves the sequences'
            limit = max(threshold, share_floor(known_before, known_now, tokens_before, tokens_now))
            if moved > limit and (worst is None or (moved - limit, token) > (worst[0] - worst[1], worst[2])):
                worst = (moved, limit, token, share_before, share_now)
        if worst is None:
            return
        moved, limit, token, share_before, share_now = worst

        def shown(share: float | None, floor: float) -> str:
            return f"{share:.2%}" if share is not None else f"under {floor:.2%} (not among the most frequent)"

        self.found.append(
            DriftFinding(
                "token-drift",
                "tokens.top_ids",
                distance,
                limit,
                f"tokens.top_ids: id {token}'s share is {shown(share_now, floor_now)} tonight, "
                f"{shown(share_before, floor_before)} in the baseline: L-infinity distance {distance:.3f} > "
                f"{limit:.3f}" + _floor_said(limit, threshold),
                {
                    "metric": "l-infinity",
                    "category": token,
                    "previous_share": share_before,
                    "current_share": share_now,
                    "family_threshold": threshold,
                    "sampling_floor": limit if limit > threshold else None,
                },
            )
        )

    def numbers(
        self,
        feature: str,
        previous: Mapping[str, Any] | None,
        current: Mapping[str, Any] | None,
        family: str,
        records: tuple[int, int] | None = None,
        named: str | None = None,
    ) -> None:
        """The Jensen-Shannon distance of two Numerics over the baseline's deciles; ``records``:
        the sample sizes when fewer than the values counted (values that come several a record);
        ``named``: the feature's name in the data (a table's column), said beside its place."""
        if self.exact_only:
            return
        if previous is None or current is None:
            self.one_sided(feature, previous, current)
            return
        quantiles_before, quantiles_now = previous.get("quantiles") or [], current.get("quantiles") or []
        if len(quantiles_before) != 101 or len(quantiles_now) != 101:
            empty = "the baseline" if len(quantiles_before) != 101 else "tonight"
            if quantiles_before or quantiles_now:  # both empty: nothing finite on either side, nothing moved
                self.notes.append(f"drift: {feature} has no finite values in {empty}'s profile: not compared")
            return
        before_mass, now_mass = bin_masses(quantiles_before, quantiles_now)
        distance = js_distance(before_mass, now_mass)
        threshold = self.thresholds.of(family)
        bins = sum(1 for a, b in zip(before_mass, now_mass) if a > 0 or b > 0)
        counts = (int(previous.get("count", 0)), int(current.get("count", 0)))
        if records is not None:
            counts = (min(counts[0], records[0]), min(counts[1], records[1]))
        floor = js_floor(bins, *counts)
        limit = max(threshold, floor)
        if distance <= limit:
            return
        median_before, median_now = quantiles_before[50], quantiles_now[50]
        said = (
            f"{feature}{f' (column {named})' if named else ''}: "
            f"{_centres(previous, current, median_before, median_now)} "
            f"(range {_range(current, quantiles_now)}, baseline "
            f"{_range(previous, quantiles_before)}): Jensen-Shannon distance "
            f"{distance:.3f} > {limit:.3f}" + _floor_said(limit, threshold)
        )
        details = {
            "metric": "jensen-shannon",
            "previous_median": median_before,
            "current_median": median_now,
            "previous_mean": previous.get("mean"),
            "current_mean": current.get("mean"),
            "family_threshold": threshold,
            "sampling_floor": floor if floor > threshold else None,
            **({"column": named} if named else {}),
        }
        self._moved(family, feature, distance, limit, said, details)


def _rows_sketched(group: Mapping[str, Any], features: Mapping[str, Any]) -> int:
    """How many rows of an array group gave values to the profile: its first position's count
    (every row sketched gives it one, but for a NaN), else the group's records."""
    sketched = max(
        (
            int(one.get("count", 0)) + int(one.get("nan", 0)) + int(one.get("inf", 0))
            for one in features.values()
        ),
        default=0,
    )
    return sketched or int(group.get("records", 0))


def _top_shares(tokens: Mapping[str, Any]) -> tuple[dict[str, float], float, int] | None:
    """(id -> share of all tokens, the smallest share listed, sequences) of a tokens section; the
    total is the lengths' sum where the profile holds it, else the listed ids' counts."""
    top = tokens.get("top_ids") or []
    if not top:
        return None
    length = tokens.get("length") or {}
    listed = sum(int(count) for _, count in top)
    total = round(float(length.get("mean") or 0) * int(length.get("count") or 0))
    total = max(total, listed)
    shares = {str(token): int(count) / total for token, count in top}
    sequences = int(tokens.get("records") or length.get("count") or total)
    return shares, min(shares.values()), sequences


def cdf(quantiles: list[float], x: float, strict: bool = False) -> float:
    """P(X <= x) (``strict``: P(X < x)) of the distribution whose quantiles at ranks 0, 0.01,
    ..., 1 are ``quantiles``, linear between them; a run of equal quantiles is a point mass."""
    last = len(quantiles) - 1
    step = 1.0 / last
    if strict:
        at = _bisect(quantiles, x, right=False)  # the first quantile >= x
        if at == 0:
            return 0.0
        if at > last:
            return 1.0
        low, high = quantiles[at - 1], quantiles[at]
        return (at - 1 + (x - low) / (high - low)) * step
    at = _bisect(quantiles, x, right=True) - 1  # the last quantile <= x
    if at < 0:
        return 0.0
    if at >= last:
        return 1.0
    low, high = quantiles[at], quantiles[at + 1]
    return (at + (x - low) / (high - low)) * step


def _bisect(values: list[float], x: float, right: bool) -> int:
    low, high = 0, len(values)
    while low < high:
        middle = (low + high) // 2
        if values[middle] < x or (right and values[middle] == x):
            low = middle + 1
        else:
            high = middle
    return low


def bin_masses(
    previous: list[float], current: list[float], edges: tuple[int, ...] = BIN_EDGES
) -> tuple[list[float], list[float]]:
    """Each side's mass in the bins the baseline's quantiles at ranks ``edges`` (percent) bound:
    below the lowest edge, at each edge (a point mass, where the data has ties), between each two
    edges, above the highest. The baseline's own mass is ~equal between its edges and nil below
    and above them."""
    bounds = sorted({float(previous[rank]) for rank in edges})

    def masses(quantiles: list[float]) -> list[float]:
        found = []
        below = 0.0
        for edge in bounds:
            under = cdf(quantiles, edge, strict=True)
            found.append(max(0.0, under - below))  # between the previous edge and this one (or below all)
            at_or_under = cdf(quantiles, edge)
            found.append(max(0.0, at_or_under - under))  # at this edge
            below = at_or_under
        found.append(max(0.0, 1.0 - below))  # above every edge
        return found

    return masses(previous), masses(current)


def js_distance(p: list[float], q: list[float]) -> float:
    """The Jensen-Shannon distance (the square root of the divergence, base 2): 0 for equal
    distributions, 1 for disjoint ones."""
    total_p, total_q = sum(p) or 1.0, sum(q) or 1.0
    divergence = 0.0
    for a, b in zip(p, q):
        a, b = a / total_p, b / total_q
        m = (a + b) / 2
        if a > 0:
            divergence += a * math.log2(a / m) / 2
        if b > 0:
            divergence += b * math.log2(b / m) / 2
    return math.sqrt(max(0.0, divergence))


def psi(p: list[float], q: list[float], epsilon: float = 1e-4) -> float:
    """The population stability index, Σ (q - p) ln(q / p), with empty bins at ``epsilon`` (what
    PSI needs, and why it is not used: see docs/drift.md); kept for the calibration's comparison."""
    return sum(
        (max(b, epsilon) - max(a, epsilon)) * math.log(max(b, epsilon) / max(a, epsilon))
        for a, b in zip(p, q)
    )


def effective_records(count: int) -> float:
    """How many records a quantile sketch of ``count`` values knows its CDF as well as: the count,
    until the sketch's own rank error (`SKETCH_RECORDS`) dominates."""
    if count <= 0:
        return 0.0
    return 1.0 / (1.0 / count + 1.0 / SKETCH_RECORDS)


def js_floor(bins: int, count_before: int, count_now: int, chance: float = FALSE_ALARM) -> float:
    """The Jensen-Shannon distance two samples of the same distribution exceed with probability
    ``chance``, over ``bins`` bins: for close distributions the divergence (in nats) is about
    Σ (p - q)² / 8m, and over samples of n and m values that sum is (1/n + 1/m) times a chi-squared
    variable of bins - 1 degrees of freedom (Wilson-Hilferty's approximation of its quantile)."""
    n, m = effective_records(count_before), effective_records(count_now)
    if n <= 0 or m <= 0:
        return 1.0
    freedom = max(1, bins - 1)
    z = NormalDist().inv_cdf(1 - chance)
    spread = 2 / (9 * freedom)
    chi2 = freedom * (1 - spread + z * math.sqrt(spread)) ** 3
    divergence_nats = chi2 * (1 / n + 1 / m) / 8
    return min(1.0, math.sqrt(divergence_nats / math.log(2)))


def share_floor(share_before: float, share_now: float, n: int, m: int, chance: float = FALSE_ALARM) -> float:
    """How far one category's share moves, between samples of ``n`` and ``m`` records of the same
    data, with probability ``chance`` (two-sided; the pooled share's binomial error)."""
    if n <= 0 or m <= 0:
        return 1.0
    pooled = (share_before * n + share_now * m) / (n + m)
    z = NormalDist().inv_cdf(1 - chance / 2)
    return z * math.sqrt(max(pooled * (1 - pooled), 1.0 / (n + m)) * (1 / n + 1 / m))


def _floor_said(limit: float, threshold: float) -> str:
    return (
        f" (what sampling explains at these counts; the threshold is {threshold:g})"
        if limit > threshold
        else ""
    )


def _centres(previous: Mapping[str, Any], current: Mapping[str, Any], before: float, now: float) -> str:
    """Where the two distributions lie: their exact means (a sketch's median is approximate, and
    differs from run to run), else their medians."""
    if previous.get("mean") is not None and current.get("mean") is not None:
        return f"mean {_number(current['mean'])} tonight, {_number(previous['mean'])} in the baseline"
    return f"median {_number(now)} tonight, {_number(before)} in the baseline"


def _range(numeric: Mapping[str, Any], quantiles: list[float]) -> str:
    """A Numeric's exact min..max (its sketch's end quantiles are approximate), else those."""
    low, high = numeric.get("min"), numeric.get("max")
    if low is None or high is None:
        low, high = quantiles[0], quantiles[-1]
    return f"{_number(low)}..{_number(high)}"


def _number(value: float) -> str:
    value = float(value)
    return f"{value:,.0f}" if value == int(value) and abs(value) < 1e15 else f"{value:.4g}"


def _listed(names: Iterable[str]) -> str:
    names = sorted(names, key=_natural)
    return ", ".join(names) if names else "none"


def _natural(name: Any) -> tuple:
    """Class ids and positions in numeric order ("2" before "10"), other names after them."""
    text = str(name)
    return (0, int(text), "") if text.lstrip("-").isdigit() else (1, 0, text)
