"""Drift between two profiles (`scrub.profile.drift.compare`), on hand-made profiles of the form
the scan record holds: each planted shift is found with its feature named, the same data raises
nothing, and what cannot be compared is said."""

from __future__ import annotations

import copy
from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrub.checks.drift import NOT_RECORDS
from scrub.errors import UsageError
from scrub.options.model import ScanOptions
from scrub.profile.drift import (
    DRIFT_CHECKS,
    DriftThresholds,
    bin_masses,
    cdf,
    compare,
    js_distance,
    js_floor,
)


def numeric(quantiles: list[float], count: int = 10_000) -> dict:
    return {
        "count": count,
        "nan": 0,
        "inf": 0,
        "zero": sum(1 for q in quantiles if q == 0),
        "min": quantiles[0],
        "max": quantiles[-1],
        "mean": sum(quantiles) / len(quantiles),
        "quantiles": quantiles,
    }


def normal(mean: float = 0.0, sd: float = 1.0, count: int = 10_000) -> dict:
    """A Numeric of a normal distribution (its ends at ranks 0.001 and 0.999)."""
    distribution = NormalDist(mean, sd)
    ranks = [min(max(i / 100, 0.001), 0.999) for i in range(101)]
    return numeric([distribution.inv_cdf(rank) for rank in ranks], count)


def constant(value: float, count: int = 10_000) -> dict:
    return numeric([float(value)] * 101, count)


def profile(records: int = 10_000) -> dict:
    """A profile of every section, as the scan builds them."""
    return {
        "version": 1,
        "records": records,
        "reused": 0,
        "labels": {
            "kind": "class",
            "labelled": records,
            "missing": 0,
            "classes": {"0": records // 2, "1": records * 3 // 10, "2": records // 5},
        },
        "arrays": {
            "16": {
                "records": records,
                "dtypes": {"float32": records},
                "row": normal(count=records * 16),
                "features": {str(i): normal(i, 1 + i / 4, records) for i in range(16)},
                "positions": 16,
            }
        },
        "images": {
            "records": records,
            "width": constant(640, records),
            "height": constant(480, records),
            "modes": {"RGB": records},
            "formats": {"JPEG": records},
            "brightness": normal(120, 40, records),
            "contrast": normal(50, 10, records),
        },
        "tokens": {
            "records": records,
            "length": numeric([float(100 + 2 * i) for i in range(101)], records),
            "supervised": numeric([i / 100 for i in range(101)], records),
            "top_ids": [[i, 80_000 // (i + 1)] for i in range(64)],  # id 0: 4% of 2M tokens
            "max_id": 50_000,
        },
        "masks": {"pixels": {"0": 900_000, "1": 100_000}},
        "boxes": {"per_image": {"0": 100, "1": 9_000, "2": 900}, "classes": {"0": 5_000, "3": 5_000}},
    }


def found(previous: dict, current: dict, thresholds: DriftThresholds | None = None) -> dict[str, list]:
    """Findings by feature."""
    notes: list[str] = []
    by_feature: dict[str, list] = {}
    for finding in compare(previous, current, thresholds, notes):
        by_feature.setdefault(finding.feature, []).append(finding)
    return by_feature


def test_the_same_profile_raises_nothing_and_says_nothing():
    notes: list[str] = []
    assert compare(profile(), profile(), DriftThresholds(), notes) == []
    assert notes == []


def test_a_class_removed_is_label_drift_naming_the_class():
    tonight = profile()
    del tonight["labels"]["classes"]["2"]
    tonight["labels"]["labelled"] = 8_000
    findings = found(profile(), tonight)
    (finding,) = findings["labels.classes"]
    assert finding.check == "label-drift"
    assert finding.details["category"] == "2" and finding.details["current_share"] == 0
    assert finding.distance == pytest.approx(0.2, abs=0.03)  # 20% -> 0%, the others' shares rose
    assert "class 2" in finding.message and str(round(finding.threshold, 3)) in finding.message


def test_a_class_share_moved_30_percent_is_found_at_a_thousand_records():
    before, tonight = profile(1_000), profile(1_000)
    tonight["labels"]["classes"] = {"0": 350, "1": 400, "2": 250}  # class 0: 50% -> 35%
    (finding,) = found(before, tonight)["labels.classes"]
    assert finding.details["category"] == "0"
    assert finding.distance == pytest.approx(0.15)
    assert finding.threshold < 0.15


def test_a_small_class_gone_is_found_where_sampling_cannot_explain_it():
    """1% of 10,000 records (100) gone cannot be chance; 1% of 1,000 (10) can (e^-10 is not one
    in a million), and raises nothing."""
    for records, expected in ((10_000, True), (1_000, False)):
        before, tonight = profile(records), profile(records)
        hundredth = records // 100
        before["labels"]["classes"] = {"0": 59 * hundredth, "1": 40 * hundredth, "2": hundredth}
        tonight["labels"]["classes"] = {"0": 60 * hundredth, "1": 40 * hundredth}
        findings = found(before, tonight).get("labels.classes", [])
        assert bool(findings) is expected, records
        if expected:
            assert findings[0].details["rule"] == "gone" and "class 2 is gone tonight" in findings[0].message


def test_a_new_class_id_is_found():
    tonight = profile()
    tonight["labels"]["classes"]["7"] = 300
    (finding,) = found(profile(), tonight)["labels.classes"]
    assert finding.details["category"] == "7" and finding.details["rule"] == "new"


def test_a_mean_moved_by_two_standard_deviations_is_value_drift_naming_the_feature():
    tonight = profile()
    feature = tonight["arrays"]["16"]["features"]["3"]
    sd = 1 + 3 / 4
    tonight["arrays"]["16"]["features"]["3"] = normal(3 + 2 * sd, sd)
    findings = found(profile(), tonight)
    assert set(findings) == {"arrays.16.features.3"}
    (finding,) = findings["arrays.16.features.3"]
    assert finding.check == "value-drift" and finding.details["metric"] == "jensen-shannon"
    assert 0.5 < finding.distance <= 1
    # what it passed: the family's threshold, or what sampling and the sketch explain where higher
    assert finding.threshold == max(0.1, finding.details["sampling_floor"] or 0) < 0.2
    assert finding.details["current_median"] > feature["quantiles"][50]


def test_a_feature_that_became_all_zeros_is_value_drift():
    tonight = profile()
    tonight["arrays"]["16"]["features"]["5"] = constant(0.0)
    (finding,) = found(profile(), tonight)["arrays.16.features.5"]
    assert finding.distance > 0.8


def test_images_resized_to_half_are_size_drift_of_width_and_height():
    tonight = profile()
    tonight["images"]["width"], tonight["images"]["height"] = constant(320), constant(240)
    findings = found(profile(), tonight)
    assert {"images.width", "images.height"} <= set(findings)
    assert findings["images.width"][0].check == "size-drift"
    # all of tonight's mass lies below the baseline's only width: disjoint
    assert findings["images.width"][0].distance == pytest.approx(1.0)
    assert "mean 320 tonight, 640 in the baseline" in findings["images.width"][0].message


def test_a_change_of_image_mode_is_size_drift_of_modes():
    tonight = profile()
    tonight["images"]["modes"] = {"RGB": 7_000, "L": 3_000}
    (finding,) = found(profile(), tonight)["images.modes"]
    assert finding.check == "size-drift" and finding.distance == pytest.approx(0.3)


def test_token_lengths_doubled_are_length_drift():
    tonight = profile()
    tonight["tokens"]["length"] = numeric([float(200 + 4 * i) for i in range(101)])
    (finding,) = found(profile(), tonight)["tokens.length"]
    assert finding.check == "length-drift" and finding.distance > 0.5


def test_other_token_ids_are_token_drift_and_a_cut_list_is_not():
    tonight = profile()
    tonight["tokens"]["top_ids"] = [[1000 + i, count] for i, count in tonight["tokens"]["top_ids"]]
    (finding,) = found(profile(), tonight)["tokens.top_ids"]
    assert finding.check == "token-drift" and finding.details["category"] in ("0", "1000")
    # the last ids of the list swapped for others just below the cut: nothing surely moved
    tonight = profile()
    tonight["tokens"]["top_ids"][-1] = [999, tonight["tokens"]["top_ids"][-1][1]]
    assert "tokens.top_ids" not in found(profile(), tonight)


def test_a_dtype_or_shape_change_is_dtype_change():
    tonight = profile()
    tonight["arrays"]["16"]["dtypes"] = {"float64": 10_000}
    (finding,) = found(profile(), tonight)["arrays.16.dtypes"]
    assert finding.check == "dtype-change" and "float64 tonight, float32 in the baseline" in finding.message
    tonight = profile()
    tonight["arrays"] = {"32": tonight["arrays"]["16"]}
    (finding,) = found(profile(), tonight)["arrays"]
    assert finding.check == "dtype-change"
    assert (finding.details["new"], finding.details["gone"]) == (["32"], ["16"])
    assert finding.message == "arrays: rows of shape 32 tonight, 16 in the baseline; 32 new; 16 gone"


def test_a_few_rows_of_another_dtype_or_shape_are_not_the_datasets_change():
    """Five float64 rows among 10,000 (a resample may hold none of them) are records' findings
    (shape-mismatch), not a dtype change of the dataset; a group of many rows is."""
    tonight = profile()
    tonight["arrays"]["16"]["dtypes"] = {"float32": 9_995, "float64": 5}
    tonight["arrays"]["32"] = copy.deepcopy(tonight["arrays"]["16"]) | {
        "records": 5,
        "dtypes": {"float32": 5},
    }
    assert found(profile(), tonight) == {}
    tonight["arrays"]["16"]["dtypes"] = {"float32": 9_000, "float64": 1_000}
    (finding,) = found(profile(), tonight)["arrays.16.dtypes"]
    assert finding.details["new"] == ["float64"] and finding.distance == pytest.approx(0.1)


def test_rows_of_many_shapes_are_said_not_compared():
    many, other = profile(), profile()
    many["arrays"] = {str(n): many["arrays"]["16"] | {"records": 10} for n in range(1, 65)}
    other["arrays"] = {str(n): other["arrays"]["16"] | {"records": 10} for n in range(30, 94)}
    notes: list[str] = []
    assert not [f for f in compare(many, other, DriftThresholds(), notes) if f.check == "dtype-change"]
    assert any("64 row shapes or more" in note for note in notes)


def test_a_third_of_the_records_gone_is_a_record_count_change():
    tonight = copy.deepcopy(profile())
    tonight["records"] = 6_667
    (finding,) = found(profile(), tonight)["records"]
    assert finding.check == "record-count-change"
    assert finding.distance == pytest.approx(0.3333, abs=1e-3) and finding.threshold == 0.1
    assert "6,667 tonight, 10,000 in the baseline (-33.3%" in finding.message


def test_thresholds_decide():
    tonight = profile()
    tonight["labels"]["classes"] = {"0": 4_000, "1": 3_500, "2": 2_500}  # 10 points moved
    assert "labels.classes" in found(profile(), tonight)
    assert "labels.classes" not in found(profile(), tonight, DriftThresholds(label=0.2))
    tonight["records"] = 11_500
    assert "records" in found(profile(), tonight)
    assert "records" not in found(profile(), tonight, DriftThresholds(records=0.2))


def test_sampling_floor_keeps_small_samples_quiet():
    """A 0.3 sd shift is drift over a million values, not over 100 (sampling moves 100 values'
    deciles that far), and the finding says which limit it passed."""
    shifted = normal(0.3, 1)
    assert js_floor(11, 100, 100) > js_distance(*bin_masses(normal()["quantiles"], shifted["quantiles"]))
    small_before, small_now = profile(100), profile(100)
    small_now["arrays"]["16"]["features"]["0"] = normal(0.3, 1, 100)
    small_before["arrays"]["16"]["features"]["0"] = normal(0, 1, 100)
    assert "arrays.16.features.0" not in found(small_before, small_now)
    big_now = profile()
    big_now["arrays"]["16"]["features"]["0"] = normal(0.3, 1, 1_000_000)
    big_before = profile()
    big_before["arrays"]["16"]["features"]["0"] = normal(0, 1, 1_000_000)
    distance = js_distance(*bin_masses(normal()["quantiles"], shifted["quantiles"]))
    assert "arrays.16.features.0" in found(big_before, big_now, DriftThresholds(value=distance / 2))


def test_what_one_side_lacks_is_a_note_not_silence():
    tonight = profile()
    del tonight["images"]
    tonight["arrays"]["16"]["features"]["3"]["quantiles"] = []
    tonight["arrays"]["16"]["features"]["3"]["count"] = 0
    notes: list[str] = []
    findings = compare(profile(), tonight, DriftThresholds(), notes)
    assert findings == []
    assert any("images is in the baseline's profile only" in note for note in notes)
    assert any("arrays.16.features.3 has no finite values in tonight" in note for note in notes)
    notes = []
    assert compare({"version": 1, "records": 10}, profile(), DriftThresholds(), notes)  # count tripled
    assert any("labels is in tonight's profile only" in note for note in notes)


def test_cdf_and_bins_of_data_with_ties():
    """A run of equal quantiles is a point mass: widths all 640 are one bin, and tonight's all-320
    lies wholly below it."""
    assert cdf([640.0] * 101, 640) == 1 and cdf([640.0] * 101, 640, strict=True) == 0
    before, now = bin_masses([640.0] * 101, [320.0] * 101)
    assert before == [0.0, 1.0, 0.0] and now == [1.0, 0.0, 0.0]
    uniform = [float(i) for i in range(101)]
    before, now = bin_masses(uniform, uniform)
    assert sum(before) == pytest.approx(1) and before == pytest.approx(now)
    assert max(before) == pytest.approx(0.1)  # ten equiprobable bins between the deciles
    assert js_distance([1, 0], [0, 1]) == 1 and js_distance([0.5, 0.5], [0.5, 0.5]) == 0


def test_every_id_compare_raises_is_one_fix_sets_nothing_aside_for():
    assert set(DRIFT_CHECKS) == NOT_RECORDS


def test_drift_threshold_option():
    options = ScanOptions.build(baseline="old.jsonl", drift_threshold=["label=0.2", "records=1.5"])
    assert options.drift_thresholds == DriftThresholds(label=0.2, records=1.5)
    assert ScanOptions.build(baseline="old.jsonl", drift_threshold={"size": 0.3}).drift_thresholds.size == 0.3
    for bad, said in (
        (["colour=0.1"], "not a drift family"),
        (["label=high"], "expected a number"),
        (["value=2"], "from 0 to 1"),
        (["label"], "FAMILY=VALUE"),
    ):
        with pytest.raises(UsageError, match=said):
            ScanOptions.build(baseline="old.jsonl", drift_threshold=bad)
    with pytest.raises(UsageError, match="give --baseline"):
        ScanOptions.build(drift_threshold=["label=0.2"])


def test_drift_thresholds_from_a_config_table(tmp_path):
    from scrub.options.config import resolve

    (tmp_path / "scrub.toml").write_text(
        'baseline = "old.jsonl"\n\n[drift-threshold]\nlabel = 0.2\nrecords = 0.5\n'
    )
    options = resolve("scan", tmp_path / "data.h5", {}).options
    assert options.drift_thresholds == DriftThresholds(label=0.2, records=0.5)
    (tmp_path / "scrub.toml").write_text("[drift-threshold]\nlabel = 0.2\ncolour = 0.1\n")
    with pytest.raises(UsageError, match=r"scrub.toml:3: drift-threshold: 'colour' is not a drift family"):
        resolve("scan", tmp_path / "data.h5", {})
    # in a file without a baseline it waits for a scan that has one
    (tmp_path / "scrub.toml").write_text("[drift-threshold]\nlabel = 0.2\n")
    assert resolve("scan", tmp_path / "data.h5", {}).options.drift_thresholds.label == 0.2


def test_the_baselines_profile_is_found_by_dataset():
    from scrub.scanning.drift import drift_issues

    every = set(DRIFT_CHECKS)
    tonight = profile()
    tonight["records"] = 5_000
    one = {
        "path": "nights/monday/train.h5",
        "absolute_path": "/d/nights/monday/train.h5",
        "profile": profile(),
    }
    # a run of one dataset against a run of one: the same dataset, whatever its dated path
    issues, notes = drift_issues(one, tonight, "nights/tuesday/train.h5", "/d/x", DriftThresholds(), every)
    assert [(i.check, i.key, i.index, i.source) for i in issues] == [
        ("record-count-change", "*", None, "nights/tuesday/train.h5")
    ]
    assert issues[0].details["feature"] == "records" and issues[0].details["threshold"] == 0.1
    # tonight's run of several: only the dataset of the baseline's path is compared
    issues, notes = drift_issues(
        one, tonight, "other.h5", "/d/other.h5", DriftThresholds(), every, several=True
    )
    assert issues is None and notes == [
        "drift: the baseline's run did not scan other.h5: drift from it is not measured"
    ]
    several = {
        "parts": [{"path": "a.h5", "profile": profile()}, {"path": "b.h5", "absolute_path": "/d/b.h5"}]
    }
    issues, _ = drift_issues(several, tonight, "a.h5", "/d/a.h5", DriftThresholds(), every, several=True)
    assert issues and issues[0].check == "record-count-change"
    issues, notes = drift_issues(
        several, tonight, "x/b.h5", "/d/b.h5", DriftThresholds(), every, several=True
    )
    assert issues is None and "holds no profile" in notes[0]
    # a check not selected (--ignore) raises nothing; no profile tonight is a note
    issues, _ = drift_issues(
        one, tonight, "t.h5", "/t.h5", DriftThresholds(), every - {"record-count-change"}
    )
    assert issues == []
    issues, notes = drift_issues(one, None, "t.h5", "/t.h5", DriftThresholds(), every)
    assert issues is None and "built no profile" in notes[0]


quantile_lists = st.lists(
    st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=101, max_size=101
).map(sorted)


@settings(max_examples=60, deadline=None)
@given(quantile_lists, quantile_lists)
def test_bins_hold_all_the_mass_and_the_distance_is_bounded(previous, current):
    """Whatever the quantiles (ties, one value, far apart): each side's bins sum to 1, the
    distance lies in [0, 1], and a profile against itself is 0."""
    before, now = bin_masses(previous, current)
    assert sum(before) == pytest.approx(1) and sum(now) == pytest.approx(1)
    assert min(before) >= 0 and min(now) >= 0
    assert 0 <= js_distance(before, now) <= 1 + 1e-12
    assert js_distance(*bin_masses(previous, previous)) == pytest.approx(0, abs=1e-7)


@settings(max_examples=30, deadline=None)
@given(quantile_lists, st.dictionaries(st.sampled_from("0123456789"), st.integers(1, 10_000), min_size=1))
def test_a_profile_never_drifts_from_itself(quantiles, classes):
    one = {
        "records": sum(classes.values()),
        "labels": {"kind": "class", "labelled": sum(classes.values()), "missing": 0, "classes": classes},
        "arrays": {
            "4": {"dtypes": {"float32": 1}, "row": numeric(quantiles), "features": {"0": numeric(quantiles)}}
        },
    }
    notes: list[str] = []
    assert compare(one, copy.deepcopy(one), DriftThresholds(), notes) == [] and notes == []


def test_profiles_of_another_version_are_said():
    notes: list[str] = []
    older = profile()
    older["version"] = 0
    assert compare(older, profile(), DriftThresholds(), notes) == []
    assert notes == [
        "drift: the baseline's profile is of version 0, tonight's of 1: compared where their fields agree"
    ]


def test_records_reused_from_the_cache_leave_only_exact_counts_compared():
    """A record reused from --cache is counted but sketched in nothing: tonight's numbers then
    describe the records read again only, and are not compared; classes and counts are."""
    tonight = profile()
    tonight["reused"] = 9_990
    tonight["arrays"]["16"]["features"]["3"] = normal(30, 1, 10)  # the ten records read again
    tonight["arrays"]["16"]["dtypes"] = {"float64": 10}
    tonight["tokens"]["length"] = numeric([float(400 + i) for i in range(101)], 10)
    notes: list[str] = []
    assert compare(profile(), tonight, DriftThresholds(), notes) == []
    assert notes == [
        "drift: 9,990 of tonight's records were reused from --cache, and a profile sketches nothing of "
        "them: only the record count, classes, image modes and mask pixels were compared"
    ]
    del tonight["labels"]["classes"]["2"]
    assert set(found(profile(), tonight)) == {"labels.classes"}
