"""Drift from a baseline: the dataset as a whole moved since the scan ``--baseline`` names.

Found by `scrub.profile.drift.compare` (tonight's profile against the one in the baseline's
scan record) once every record is in; each finding concerns the dataset, not a record: key
``*``, no index, the dataset's path as its source. `scrub fix` neither sets records aside for
them nor refuses because of them (`NOT_RECORDS`): no cleaned copy removes a drift. The method
and the calibration of the thresholds are in docs/drift.md.
"""

from __future__ import annotations

from scrub.checks.base import reader_check
from scrub.records import Carries, Severity

#: dataset-level findings that name no record to set aside: `fix` counts none of their records
#: (nor refuses for them), and the scan's "records to quarantine" leaves them out (the ids
#: `scrub.profile.drift.DRIFT_CHECKS` raises; a test holds the two equal)
NOT_RECORDS = frozenset(
    {
        "record-count-change",
        "label-drift",
        "value-drift",
        "size-drift",
        "length-drift",
        "token-drift",
        "dtype-change",
    }
)

_WHAT_FIX_DOES = """\
        Nothing: the finding concerns the dataset as a whole and names no record (key `*`), so
        `fix` sets no record aside for it and does not refuse because of it; it says so in its
        output. Look at what changed upstream (the export, the sampler, the tokenizer)."""

reader_check(
    "record-count-change",
    Severity.WARNING,
    f"""The number of records changed by more than the threshold since the baseline (default 10%).

    What it finds:
        Tonight's record count against the baseline scan's, as a relative change: a third of the
        rows gone after a failed export, twice as many after a job appended its output twice.
        The threshold is `records` of `--drift-threshold` (details: `previous`, `current`,
        `change`, `threshold`).
    Why it breaks training:
        A shard that did not arrive trains a model on a part of the data without an error; an
        appended duplicate weights it twice. No single record shows either.
    Example:
        `records: 6,667 tonight, 10,000 in the baseline (-33.3%; the threshold is 10%)`.
    What fix does:
{_WHAT_FIX_DOES}
    """,
    needs=Carries.BASELINE,
)

reader_check(
    "label-drift",
    Severity.WARNING,
    f"""Class shares moved since the baseline: a class vanished, appeared, or its share moved.

    What it finds:
        The L-infinity distance (the largest change of one share) between the baseline's and
        tonight's class shares (`labels.classes`), share of labelled records (`labels.labelled`),
        mask pixel shares (`masks.pixels`) and box classes and boxes per image (`boxes.classes`,
        `boxes.per_image`), above the `label` threshold (default 0.05) and above what sampling
        explains at these record counts; or a class that one side holds in so many records that
        the other side lacks it only by chance (a class removed, a new class id). The message names
        the class (details: `category`, `previous_share`, `current_share`, `threshold`,
        `sampling_floor`).
    Why it breaks training:
        A model trained on shifted label shares predicts the new prior; one trained without a
        class never predicts it, and its accuracy on that class falls to zero without a sign in
        the loss.
    Example:
        `labels.classes: class 0's share is 35.0% tonight, 50.0% in the baseline: L-infinity
        distance 0.150 > 0.100 (what sampling explains at these counts; the threshold is 0.05)`.
    What fix does:
{_WHAT_FIX_DOES}
    """,
    needs=Carries.BASELINE,
)

reader_check(
    "value-drift",
    Severity.WARNING,
    f"""The distribution of a feature's values moved since the baseline.

    What it finds:
        The Jensen-Shannon distance between the baseline's and tonight's distributions of an array
        feature (`arrays.16.features.3`: an element position, or `arrays.16.row`: every element),
        of value labels (`labels.values`), or of images' brightness and contrast
        (`images.brightness`), over ten equiprobable bins from the baseline's quantiles, above the
        `value` threshold (default 0.1) and what sampling explains (details: `previous_median`,
        `current_median`, `previous_mean`, `current_mean`, `threshold`, `sampling_floor`; `column`:
        a table column's name, where the feature is one, also said in the message).
    Why it breaks training:
        A feature whose scale or offset changed (a unit changed upstream, a normalization applied
        twice, a sensor that reports zeros) feeds the model inputs it was not fitted to; the
        normalization statistics computed on old data no longer centre it.
    Example:
        `arrays.16.features.3: mean 2.01 tonight, 0.01 in the baseline (...): Jensen-Shannon
        distance 0.712 > 0.100`.
    What fix does:
{_WHAT_FIX_DOES}
    """,
    needs=Carries.BASELINE,
)

reader_check(
    "size-drift",
    Severity.WARNING,
    f"""Image sizes or modes moved since the baseline: images resized, grayscale where RGB was.

    What it finds:
        The Jensen-Shannon distance of image widths and heights (`images.width`,
        `images.height`), and the L-infinity distance of image modes' shares (`images.modes`),
        above the `size` threshold (default 0.1) and what sampling explains.
    Why it breaks training:
        Images at half the size are upsampled by the loader into blur; a mode that changed (L for
        RGB) either fails a collate or is silently broadcast into three equal channels.
    Example:
        `images.width: mean 320 tonight, 640 in the baseline (...): Jensen-Shannon distance
        1.000 > 0.100`.
    What fix does:
{_WHAT_FIX_DOES}
    """,
    needs=Carries.BASELINE,
)

reader_check(
    "length-drift",
    Severity.WARNING,
    f"""Token sequence lengths, or the share of their tokens that is supervised, moved since the baseline.

    What it finds:
        The Jensen-Shannon distance of tokens per sequence (`tokens.length`) and of each
        sequence's share of labels not ignored (`tokens.supervised`), above the `length` threshold
        (default 0.1) and what sampling explains.
    Why it breaks training:
        Doubled lengths (a changed chat template, documents concatenated twice) are truncated or
        run out of memory; a fall in the supervised share (a masking bug) trains on few tokens and
        the loss looks better than the model is.
    Example:
        `tokens.length: mean 296 tonight, 148 in the baseline (...): Jensen-Shannon distance
        0.870 > 0.100`.
    What fix does:
{_WHAT_FIX_DOES}
    """,
    needs=Carries.BASELINE,
)

reader_check(
    "token-drift",
    Severity.WARNING,
    f"""The most frequent token ids' shares moved since the baseline (another tokenizer, a changed template).

    What it finds:
        The L-infinity distance between the shares of all tokens that the most frequent ids hold
        (`tokens.top_ids`), above the `token` threshold (default 0.05) and what sampling explains.
        An id listed on one side only counts for the share it surely moved (the other side's list
        stops at its 64th id).
    Why it breaks training:
        Data tokenized with another tokenizer than the model's is a different language to it: the
        loss jumps, or the model learns nonsense, with every id in range.
    Example:
        `tokens.top_ids: id 1001's share is 4.10% tonight, under 0.30% (not among the most frequent)
        in the baseline: L-infinity distance 0.038 > 0.030`.
    What fix does:
{_WHAT_FIX_DOES}
    """,
    needs=Carries.BASELINE,
)

reader_check(
    "dtype-change",
    Severity.ERROR,
    f"""An array's dtype or row shape differs from the baseline's.

    What it finds:
        A dtype of an array group (`arrays.16.dtypes`: float64 tonight, float32 in the
        baseline), or a row shape (`arrays`: rows of 32 values where the baseline had 16), that
        one scan's profile holds in so many records that the other lacks it only by chance (one
        in a million): no threshold. A few rows of another shape or dtype among many are
        `shape-mismatch`'s, record by record; past 64 row shapes (rows of many sizes) the shapes
        are not compared, and a note says so (details: `previous`, `current`: records by dtype
        or shape; `new`, `gone`).
    Why it breaks training:
        A model built for rows of 16 fails on rows of 32 at its first batch, hours into a job;
        float64 where float32 was doubles memory, and integers where floats were change the
        arithmetic of every normalization.
    Example:
        `arrays.16.dtypes: float64 tonight, float32 in the baseline; float64 new; float32 gone`.
    What fix does:
{_WHAT_FIX_DOES}
    """,
    needs=Carries.BASELINE,
)
