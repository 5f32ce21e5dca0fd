"""The dummy-loss replay: features, the linear model, localization, determinism, user losses.

The replay is checked against a reference written here, independently, in float64 NumPy: its
own softmax cross-entropy and gradient, the documented init, step and skip rules, and float32's
range (a float64 value beyond float32's largest is what float32 would turn into Inf).
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from conftest import REPO, image_bytes
from PIL import Image

import scrub.checks.replay  # noqa: F401 - registers the replay's check ids (not yet in the catalogue)
from scrub.checks.base import DOC_SECTIONS, REGISTRY
from scrub.manifest import dumps
from scrub.records import Batch, Record, Severity
from scrub.replay import FeatureSpec, ReplayConfig, Replayer, featurize_batch, featurize_records
from scrub.replay.standardize import Standardizer

F32_MAX = float(np.finfo(np.float32).max)
C, D = 5, 768


# -- the reference ---------------------------------------------------------------------------

LN_C = np.log(C)
F32_OVERFLOW = 2.0**128 - 2.0**103


def beyond_float32(values: np.ndarray) -> bool:
    with np.errstate(invalid="ignore"):
        return bool((~np.isfinite(values) | (np.abs(values) > F32_MAX)).any())


def softmax_parts(x: np.ndarray, label: int, W: np.ndarray, b: np.ndarray):
    """float64 logits, loss and delta (softmax minus one-hot) of one record."""
    with np.errstate(all="ignore"):
        z = x @ W + b
        top = z.max()
        lse = top + np.log(np.sum(np.exp(z - top)))
        p = np.exp(z - lse)
        p[label] -= 1.0
    return z, lse - z[label], p


def reference_replay(
    raw32: np.ndarray,
    y: np.ndarray,
    mean=None,
    std=None,
    batch=64,
    lr=0.01,
    seed=0,
    init_std=0.01,
    factor=100.0,
    limit=10.0,
):
    """{index: (check, severity)} and the final weights, by the documented rules, in float64:
    standardize (float32, as a float32 pipeline), judge each record, the L2 probe on the raw row,
    the loss and gradient screens, then plain SGD on the rest unless the step is absurd."""
    with np.errstate(all="ignore"):
        X32 = raw32 if mean is None else ((raw32 - mean) / std).astype(np.float32)
    X, raw = X32.astype(np.float64), raw32.astype(np.float64)
    guarded = mean is not None
    W = np.random.default_rng(seed).standard_normal((X.shape[1], C)) * init_std
    W = W.astype(np.float32).astype(np.float64)  # the documented init: float32 N(0, init_std²)
    b = np.zeros(C)
    found: dict[int, tuple[str, str]] = {}
    for start in range(0, len(y), batch):
        rows = np.arange(start, min(start + batch, len(y)))
        for i in rows[(y[rows] < 0) | (y[rows] >= C)]:
            found[int(i)] = ("label-out-of-range", "error")
        rows = rows[(y[rows] >= 0) & (y[rows] < C)]
        n = len(rows)
        reported: dict[int, tuple[str, str]] = {}
        losses = {}
        for i in rows:
            z, loss, _ = softmax_parts(X[i], y[i], W, b)
            if beyond_float32(z) or beyond_float32(np.array([loss])):
                reported[int(i)] = ("loss-nonfinite", "error")
            losses[int(i)] = loss
        with np.errstate(all="ignore"):
            squares = (raw[rows] ** 2).sum(axis=1)
        for i, square in zip(rows, squares):
            if np.isfinite(raw[i]).all() and (square == 0 or square >= F32_OVERFLOW):
                reported.setdefault(int(i), ("loss-nonfinite", "warning" if square == 0 else "error"))
        rest = [int(i) for i in rows if int(i) not in reported]
        if rest:
            median = np.median([losses[i] for i in rest])
            potentials = {i: np.sqrt((X[i] ** 2).sum() + 1) * np.sqrt(2) / n for i in rest}
            typical = np.median(list(potentials.values()))
            theta = np.sqrt((W**2).sum() + (b**2).sum())
            for i in rest:
                if guarded and lr * potentials[i] / theta > limit:
                    reported[i] = ("grad-outlier", "error")
                elif losses[i] > factor * max(median, LN_C):
                    reported[i] = ("loss-outlier", "warning")
                elif potentials[i] / typical > factor:
                    reported[i] = ("grad-outlier", "warning")
        found.update(reported)
        keep = [int(i) for i in rows if int(i) not in reported]
        if not keep:
            continue
        grad_w, grad_b = np.zeros_like(W), np.zeros_like(b)
        for i in keep:
            _, _, delta = softmax_parts(X[i], y[i], W, b)
            grad_w += np.outer(X[i], delta) / len(keep)
            grad_b += delta / len(keep)
        theta = np.sqrt((W**2).sum() + (b**2).sum())
        after = np.sqrt(((W - lr * grad_w) ** 2).sum() + ((b - lr * grad_b) ** 2).sum())
        if guarded and after / theta > limit:
            found.update({i: ("grad-outlier", "error") for i in keep})  # (the test never plants one)
            continue
        W, b = W - lr * grad_w, b - lr * grad_b
    return found, W


# -- data ------------------------------------------------------------------------------------


def pixels(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Image-like rows (0..255) and labels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, D)).astype(np.float64), rng.integers(0, C, n)


def identities(n: int) -> list[tuple[str, str, int]]:
    return [("train.h5", str(i), i) for i in range(n)]


def pixel_standardizer() -> Standardizer:
    """What the scan's moments give for uniform 0..255 pixels: mean 127.5, std 73.9."""
    return Standardizer(np.full(D, 127.5, np.float32), np.full(D, 73.9, np.float32), "features")


def replay(X: np.ndarray, y: np.ndarray, chunks=None, standardize=None, **options) -> tuple[Replayer, list]:
    replayer = Replayer(ReplayConfig(**options), C, X.shape[1], standardize)
    ids, issues = identities(len(y)), []
    bounds = list(chunks) if chunks is not None else [0, len(y)]
    for start, stop in zip(bounds, bounds[1:]):
        issues += replayer.feed(ids[start:stop], X[start:stop], y[start:stop])
    return replayer, issues + replayer.finish()


def planted() -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Float64 rows as stored, with what each planted record is."""
    raw, y = pixels(640)
    raw[5, 17] = np.nan
    raw[70, 3] = np.inf
    raw[140, :10] = 1e39  # finite as stored, Inf in float32
    raw[200] = F32_MAX / 2  # finite in float32 too: its squares overflow (the L2 probe)
    raw[300] = 1e30  # finite all the way: its squares overflow too
    raw[350] = 1e5  # ~1350 once standardized where the rest is within +-1.7: an absurd step
    raw[420] = 0.0  # all zero: only a normalizing model minds (a warning)
    raw[500, :] = 127.5 + 73.9 * 40  # a row 40 standard deviations out: large, not absurd
    y[400], y[401] = C + 2, -1
    return (
        raw,
        y,
        {
            5: "nan",
            70: "inf",
            140: "1e39",
            200: "max/2",
            300: "1e30",
            350: "1e5",
            420: "zero",
            400: "label",
            401: "label",
        },
    )


def as_features(raw: np.ndarray, y: np.ndarray):
    batch = Batch("train.h5", 0, 0, raw, labels=y.astype(np.float64))
    return featurize_batch(batch, FeatureSpec.for_arrays(raw.shape[1]))


# -- the replay against the reference ---------------------------------------------------------


def test_replay_flags_exactly_what_the_reference_flags():
    raw, y, plants = planted()
    assert np.isfinite(raw[[140, 200, 300, 350]]).all()  # no NaN check on the stored rows finds these
    features = as_features(raw, y)
    assert len(features) == len(y)
    standardize = pixel_standardizer()
    replayer, issues = replay(features.X, features.y, standardize=standardize)

    expected, W = reference_replay(features.X, features.y, standardize.mean, standardize.std)
    assert {i.index: (i.check, i.severity.value) for i in issues} == expected
    assert len(issues) == len(expected)  # one issue per record
    assert set(expected) == set(plants)  # the reference sees every plant, and nothing else
    assert expected[140] == expected[5] == ("loss-nonfinite", "error")
    assert expected[200] == expected[300] == ("loss-nonfinite", "error")  # the L2 probe
    assert expected[350] == ("grad-outlier", "error") and expected[420] == ("loss-nonfinite", "warning")
    np.testing.assert_allclose(replayer.model.weight, W, rtol=1e-4, atol=1e-7)  # the same steps

    by_index = {i.index: i for i in issues}
    assert by_index[5].details["batch"] == 0 and by_index[5].details["precision"] == "float32"
    assert by_index[200].details["normalization"] and by_index[200].details["confirms"] == "square-overflow"
    assert by_index[420].details["confirms"] == "zero-norm" and "normalization" not in by_index[5].details
    assert by_index[350].details["factor"] > 10
    assert by_index[400].details == {"label": C + 2, "low": 0, "high": C, "batch": 6, "replay": True}
    assert replayer.stats.batches_applied == 10 and replayer.stats.records_applied == 640 - len(plants)
    for issue in issues:
        json.loads(dumps(issue))  # manifest-ready: no NaN in the details


def test_a_row_of_500_is_large_but_not_absurd():
    raw, y = pixels(640, seed=8)
    raw[100] = 127.5 + 73.9 * 500
    standardize = pixel_standardizer()
    features = as_features(raw, y)
    _, issues = replay(features.X, features.y, standardize=standardize)
    expected, _ = reference_replay(features.X, features.y, standardize.mean, standardize.std)
    assert [(i.index, i.check, i.severity.value) for i in issues] == [(100, "loss-outlier", "warning")]
    assert expected == {100: ("loss-outlier", "warning")}  # large (its loss too), but no absurd step


def test_a_confidently_right_huge_row_is_found_whatever_its_label():
    """The 1-in-C hole: a 1e30 row whose label is the model's argmax has loss 0 and gradient 0."""
    raw, y = pixels(128, seed=9)
    raw[10] = 1e30
    standardize = pixel_standardizer()
    x = standardize(raw[10:11].astype(np.float32))
    W = (np.random.default_rng(0).standard_normal((D, C)) * 0.01).astype(np.float32)
    y[10] = int(np.argmax(x @ W))  # confidently "correct": loss exactly 0
    for label in (y[10], (y[10] + 1) % C):
        y[10] = label
        features = as_features(raw, y)
        for model in ("linear", "batchnorm"):
            _, issues = replay(features.X, features.y, standardize=standardize, model=model)
            assert [(i.index, i.severity.value) for i in issues] == [(10, "error")], (label, model)


def test_a_huge_row_beside_a_nan_row_is_still_screened():
    raw, y = pixels(64, seed=10)
    raw[3, 0] = np.nan
    raw[40] = 1e5
    features = as_features(raw, y)
    _, issues = replay(features.X, features.y, standardize=pixel_standardizer())
    assert [(i.index, i.check) for i in issues] == [(3, "loss-nonfinite"), (40, "grad-outlier")]


def test_one_bad_record_does_not_poison_the_rest():
    raw, y = pixels(640, seed=2)
    raw[70, :] = np.nan
    features = as_features(raw, y)
    replayer, issues = replay(features.X, features.y, standardize=pixel_standardizer())
    assert [(i.index, i.check) for i in issues] == [(70, "loss-nonfinite")]
    stats = replayer.stats
    assert (stats.batches, stats.batches_applied, stats.records_applied) == (10, 10, 639)
    assert np.isfinite(replayer.model.weight).all() and np.isfinite(stats.final_loss)
    assert stats.final_loss < 2 * np.log(C)


def test_clean_standardized_data_trains_with_plain_sgd():
    """The loss falls on learnable data: the replay trains, it does not only judge."""
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(C, D)) * 2
    y = rng.integers(0, C, 3200)
    X = (centres[y] + rng.normal(size=(3200, D))).astype(np.float32)
    replayer, issues = replay(
        X, y, standardize=Standardizer(np.zeros(D, np.float32), np.full(D, 2.2, np.float32), "x"), lr=0.1
    )
    assert issues == [] and replayer.stats.final_loss < 0.5 * replayer.stats.first_loss


def test_float16_finds_what_overflows_only_there():
    raw, y = pixels(256, seed=3)
    raw[100, 7] = 1e7  # ~1.4e5 once standardized: fine in float32, Inf in float16
    features = as_features(raw, y)
    _, issues32 = replay(features.X, features.y, standardize=pixel_standardizer())
    _, issues16 = replay(features.X, features.y, standardize=pixel_standardizer(), precision="float16")
    _, issues_bf16 = replay(features.X, features.y, standardize=pixel_standardizer(), precision="bfloat16")
    assert [(i.index, i.check) for i in issues32] == [(100, "grad-outlier")]  # 1.4e5 among +-1.7
    assert [(i.index, i.check) for i in issues16] == [(100, "loss-nonfinite")]
    assert issues16[0].details["precision"] == "float16"
    assert [(i.index, i.check) for i in issues_bf16] == [(100, "grad-outlier")]  # float32's range


def test_raw_values_are_only_screened_relatively():
    """--no-normalize: on raw pixels the first steps are large for every record, so no absolute
    limit applies; a row far above its batch still is a warning."""
    raw, y = pixels(640, seed=12)
    raw[77] = 2e6
    features = as_features(raw, y)
    replayer, issues = replay(features.X, features.y, normalize=False)
    expected, W = reference_replay(features.X, features.y)
    assert (
        {i.index: (i.check, i.severity.value) for i in issues}
        == expected
        == {77: ("loss-outlier", "warning")}
    )
    np.testing.assert_allclose(replayer.model.weight, W, rtol=1e-4, atol=1e-6)


def test_out_of_range_labels_are_reported_not_raised():
    raw, y = pixels(100, seed=4)
    y[[3, 50]] = [10**12, -7]
    replayer, issues = replay(raw.astype(np.float32), y, batch_size=16, standardize=pixel_standardizer())
    assert [(i.index, i.check, i.details["label"]) for i in issues] == [
        (3, "label-out-of-range", 10**12),
        (50, "label-out-of-range", -7),
    ]
    assert replayer.stats.records_replayed == 98 and replayer.stats.batches_skipped == 0


@pytest.mark.parametrize("chunks", [[1] * 300, [7] * 43, [64] * 5, [300], [5, 200, 1, 33, 61]])
@pytest.mark.parametrize("model", ["linear", "batchnorm", "l2"])
def test_same_result_whatever_the_chunking(chunks, model):
    raw, y, _ = planted()
    features = as_features(raw[:300], y[:300])
    whole, expected = replay(features.X, features.y, standardize=pixel_standardizer(), model=model)
    bounds = np.concatenate([[0], np.cumsum(chunks)]).clip(max=300).tolist()
    pieces, issues = replay(
        features.X, features.y, chunks=bounds, standardize=pixel_standardizer(), model=model
    )
    assert [i.to_dict() for i in issues] == [i.to_dict() for i in expected]
    assert np.array_equal(pieces.model.weight, whole.model.weight)
    assert pieces.stats == whole.stats


def test_the_seed_decides_the_weights():
    raw, y = pixels(128, seed=5)
    a, _ = replay(raw.astype(np.float32), y, seed=1, standardize=pixel_standardizer())
    b, _ = replay(raw.astype(np.float32), y, seed=1, standardize=pixel_standardizer())
    c, _ = replay(raw.astype(np.float32), y, seed=2, standardize=pixel_standardizer())
    assert np.array_equal(a.model.weight, b.model.weight)
    assert not np.array_equal(a.model.weight, c.model.weight)


# -- the normalizing models ------------------------------------------------------------------


def test_the_l2_model_finds_zero_rows_as_errors_and_overflowing_squares():
    raw, y = pixels(128, seed=13)
    raw[7] = 0
    raw[60] = 3e19
    features = as_features(raw, y)
    _, issues = replay(features.X, features.y, standardize=pixel_standardizer(), model="l2")
    assert [(i.index, i.check, i.severity.value) for i in issues] == [
        (7, "loss-nonfinite", "error"),
        (60, "loss-nonfinite", "error"),
    ]
    assert all("normalization" not in i.details and i.details["model"] == "l2" for i in issues)


def test_the_batchnorm_model_goes_nan_on_a_row_whose_squares_overflow():
    raw, y = pixels(128, seed=14)
    raw[90] = 2e21  # ~2.7e19 once standardized: its deviation squared is Inf in float32
    features = as_features(raw, y)
    replayer, issues = replay(features.X, features.y, standardize=pixel_standardizer(), model="batchnorm")
    assert [(i.index, i.check) for i in issues] == [(90, "loss-nonfinite")]
    assert issues[0].details["model"] == "batchnorm" and replayer.stats.batches_applied == 2
    linear, found = replay(features.X, features.y, standardize=pixel_standardizer())
    assert [(i.index, i.check, i.details.get("normalization")) for i in found] == [
        (90, "loss-nonfinite", True)
    ]


# -- user losses -----------------------------------------------------------------------------


def class_balanced_loss(X: np.ndarray, y: np.ndarray) -> float:
    """Mean over classes of each class's mean loss: NaN (0/0) when a class is absent."""
    losses = (X.astype(np.float64) ** 2).sum(axis=1)
    with np.errstate(invalid="ignore"):
        return float(np.mean([losses[y == c].sum() / (y == c).sum() for c in range(3)]))


def test_infogain_example_flags_non_positive_values(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    rng = np.random.default_rng(6)
    X = rng.dirichlet(np.ones(4), 200).astype(np.float32)  # rows of class probabilities
    y = rng.integers(0, 4, 200)
    X[10, (y[10] + 1) % 4] = 0.0  # off the label: 0 * log(0) is NaN
    X[77, y[77]] = 0.0
    X[150, 2] = -0.25
    X[120, y[120]] = 1e-42  # loss -log(1e-42) = 96.7, gradient -1/1e-42 = -Inf in float32
    replayer = Replayer(ReplayConfig(model="infogain_loss:infogain_loss"), 4, 4)
    issues = replayer.feed(identities(200), X, y) + replayer.finish()
    non_positive = set(np.flatnonzero((X <= 0).any(axis=1)).tolist())
    assert non_positive == {10, 77, 150}
    assert {i.index for i in issues if i.check == "loss-nonfinite"} == non_positive
    gradient_only = [(i.index, i.details["nonfinite"]) for i in issues if i.check == "grad-nonfinite"]
    assert gradient_only == [(120, ["gradient"])]
    assert len(issues) == 4 and all(i.severity is Severity.ERROR for i in issues)
    assert replayer.model is None and replayer.stats.batches_skipped == 0  # the rest of each batch counts
    assert replayer.stats.records_applied == 200 - 4


def test_a_batch_that_fails_only_together_is_reported_as_such():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(32, 3)).astype(np.float32)
    y = np.tile([0, 1, 2, 0, 1, 2, 0, 1], 4)
    y[8:16] = [0, 1, 0, 1, 0, 1, 0, 1]  # batch 1 has no class 2: 0/0
    X[20, 1] = np.nan  # batch 2: one record's fault
    replayer = Replayer(ReplayConfig(model="test_replay:class_balanced_loss", batch_size=8), 3, 3)
    issues = replayer.feed(identities(32), X, y) + replayer.finish()
    batch_level = [i for i in issues if i.details.get("batch_level")]
    assert [i.index for i in batch_level] == list(range(8, 16))
    assert all(i.check == "loss-nonfinite" and i.severity is Severity.WARNING for i in batch_level)
    others = [(i.index, i.severity) for i in issues if not i.details.get("batch_level")]
    assert others == [(20, Severity.ERROR)]
    assert (
        replayer.stats.batch_level == 8 and replayer.stats.batches_applied == 3
    )  # batch 2 without record 20


# -- features --------------------------------------------------------------------------------


def solid(color: tuple[int, int, int], fmt: str, size=(40, 30), mode="RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).convert(mode).save(buffer, fmt)
    return buffer.getvalue()


def test_images_become_unnormalized_chw_rgb_vectors():
    records = [
        Record("a", "solid.png", 0, solid((200, 10, 30), "PNG"), 1, {"kind": "image"}),
        Record("a", "photo.jpg", 1, image_bytes(seed=3, size=48), 2, {"kind": "image"}),
        Record("a", "gray.png", 2, solid((90, 90, 90), "PNG", mode="L"), None, {"kind": "image"}),
        Record("a", "broken.jpg", 3, image_bytes(seed=4)[:200], 0, {"kind": "image"}),
        Record("a", "missing.jpg", 4, None, 0, {"kind": "image"}),
        Record("a", "text-label.png", 5, solid((1, 2, 3), "PNG"), "cat", {"kind": "image"}),
    ]
    features = featurize_records(records, FeatureSpec.for_images())
    assert features.X.shape == (3, 768) and features.X.dtype == np.float32
    assert [key for _, key, _ in features.identities] == ["solid.png", "photo.jpg", "gray.png"]
    assert features.rows.tolist() == [0, 1, 2] and features.y.tolist() == [1, 2, 0]  # no label: class 0
    assert np.array_equal(features.X[0], np.repeat(np.float32([200, 10, 30]), 256))  # CHW, 0..255
    assert np.array_equal(features.X[2], np.full(768, 90, np.float32))
    assert features.X[1].min() >= 0 and features.X[1].max() > 150  # 0..255, not 0..1
    assert dict(features.skipped) == {"image": 1, "payload": 1, "label": 1}
    scaled = featurize_records(records[:1], FeatureSpec.for_images(scale=0.5))
    assert np.array_equal(scaled.X[0], features.X[0] * 0.5)
    tiny = featurize_records(records[:1], FeatureSpec.for_images(max_pixels=100))
    assert len(tiny) == 0 and tiny.skipped == {"image": 1}  # a bomb is never decoded


def test_arrays_keep_their_magnitude_and_batches_are_copied():
    huge = np.full((2, 3), 1e39)  # float64, finite
    records = [
        Record("v", "big", 0, huge, 0, {"kind": "array"}),
        Record("v", "short", 1, np.zeros(5), 0, {"kind": "array"}),
        Record("v", "nan", 2, np.array([[np.nan, -1.0, 3.0], [0, 0, 1]], np.float16), 4, {"kind": "array"}),
    ]
    features = featurize_records(records, FeatureSpec.for_arrays((2, 3)))
    assert np.isposinf(features.X[0]).all()  # what float32 training sees
    assert np.array_equal(features.X[1], np.float32([np.nan, -1, 3, 0, 0, 1]), equal_nan=True)
    assert features.skipped == {"size": 1}

    buffer = np.arange(12, dtype=np.float64).reshape(4, 3)
    labels = np.array([0.0, np.nan, 2.5, 1.0])
    batch = Batch("f.h5", 10, 0, buffer, labels=labels)
    rows = featurize_batch(batch, FeatureSpec.for_arrays(3))
    buffer[:] = -1  # the reader reuses its buffer
    assert rows.identities == [("f.h5", "10", 10), ("f.h5", "13", 13)]
    assert rows.X.tolist() == [[0, 1, 2], [9, 10, 11]] and rows.y.tolist() == [0, 1]
    assert rows.skipped == {"label": 2}


def test_replay_checks_are_documented():
    expected = [("loss-nonfinite", "error"), ("grad-nonfinite", "error"), ("loss-outlier", "warning")]
    for check_id, severity in expected:
        check = REGISTRY[check_id]
        assert check.severity.value == severity and check.kind == "reader"
        assert list(check.sections) == list(DOC_SECTIONS)
