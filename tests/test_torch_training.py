"""Real training is the judge: PyTorch trains the planted dataset and scrub's cleaned copy.

Skipped without PyTorch (`.ci/run` installs it). The training loop, the networks and the
planted dataset are `examples/torch_crosscheck.py`'s, whose table the README shows.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import REPO, timeless_replay  # noqa: E402

import scrub  # noqa: E402
import scrub.api  # noqa: E402

#: trains real PyTorch models: `-m "not slow"` (the quick subset) leaves it out
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crosscheck():
    import sys

    sys.path.insert(0, str(REPO / "examples"))
    try:
        import torch_crosscheck
    finally:
        sys.path.remove(str(REPO / "examples"))
    return torch_crosscheck


@pytest.fixture(scope="module")
def planted(crosscheck, tmp_path_factory):
    return crosscheck.make_planted(tmp_path_factory.mktemp("torch") / "planted.h5")


@pytest.mark.parametrize("precision", ["float32", "float16"])
@pytest.mark.parametrize("net", ["linear", "conv+bn", "l2-head"])
def test_the_cleaned_copy_trains_and_every_broken_batch_holds_an_error(
    crosscheck, planted, tmp_path, net, precision
):
    data, labels, _ = crosscheck.load(planted)
    options = crosscheck.scrub_options(net, precision)
    errors = {i.index for i in scrub.scan(planted, **options).issues() if i.severity.value == "error"}
    broken = crosscheck.train(data, labels, net, precision)
    assert 0 in broken and 2 in broken  # the NaN (row 37) and the +Inf (row 150): not vacuous
    batch = crosscheck.BATCH
    for number in broken:  # (a): scrub names a culprit in every batch that goes non-finite
        assert errors & set(range(number * batch, (number + 1) * batch)), (net, precision, number)
    fixed = scrub.fix(planted, out=tmp_path / "clean.h5", **options)
    clean_data, clean_labels, _ = crosscheck.load(fixed.clean)
    assert crosscheck.train(clean_data, clean_labels, net, precision) == []  # (b): it trains
    assert len(clean_data) == crosscheck.ROWS - fixed.report["quarantined"] >= crosscheck.ROWS - 8


def test_the_source_breaks_where_the_checks_say(crosscheck, planted):
    data, labels, _ = crosscheck.load(planted)
    # a linear layer in float32: the 1e30 row (batch 5) leaves weights near 1e26, finite; the
    # 1e20 row (batch 7) then overflows; in float16 the 7e4 and 1e6 rows break it too
    assert crosscheck.train(data, labels, "linear", "float32") == [0, 2, 4, 7]
    assert crosscheck.train(data, labels, "linear", "float16") == [0, 2, 4, 5, 7, 9, 14]
    assert 12 in crosscheck.train(data, labels, "l2-head", "float32")  # the zero row: 0/0


def small_planted(path, rows: int = 256, big: int = 200):
    """``rows`` rows of N(0, 1): 1e6 everywhere at ``big``; of 256 rows, a NaN at 5 and 1e39
    (float64) at 70 too."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(5)
    data = rng.normal(size=(rows, 3, 16, 16))
    data[big] = 1e6
    if rows == 256:
        data[5, 0, 0, 0], data[70, 1, 1, 1] = np.nan, 1e39
    with h5py.File(path, "w") as file:
        file["data"], file["label"] = data, rng.integers(0, 10, rows)
    return path


def test_a_pytorch_model_in_the_replay(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    path = small_planted(tmp_path / "small.h5")
    options = scrub.api.ReplayOptions(model="convnet:make")
    result = scrub.scan(path, num_classes=10, dummy_loss=options, scheduler="sync")
    found = {(i.index, i.check) for i in result.issues() if i.details.get("model") == "convnet:make"}
    assert {(5, "loss-nonfinite"), (70, "loss-nonfinite")} <= found
    replay = result.summary.replay
    assert replay["options"]["model"] == "convnet:make" and replay["standardization"]["source"] == "features"
    assert replay["records_applied"] >= 250 and replay["final_loss"] < 3
    assert (200, "loss-nonfinite") not in found
    # a backward pass in float16 autocast takes ~0.6 s on the CPU, and localizing a culprit takes
    # a pass per halving: a short file whose one culprit is the 1e6 row
    short = small_planted(tmp_path / "short.h5", rows=16, big=9)
    half = scrub.scan(short, num_classes=10, dummy_loss=options, precision="float16", scheduler="sync")
    found16 = {(i.index, i.check) for i in half.issues() if i.details.get("model") == "convnet:make"}
    assert found16 == {(9, "loss-nonfinite")}  # 1e6: ~1e6 once standardized, Inf in float16 autocast


def test_the_replay_is_deterministic_with_a_pytorch_model(crosscheck, planted, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    options = scrub.api.ReplayOptions(model="convnet:make", seed=3)
    one = scrub.scan(planted, num_classes=10, dummy_loss=options, scheduler="sync")
    two = scrub.scan(
        planted, num_classes=10, dummy_loss=options, scheduler="processes", workers=2, partition_size=300
    )
    assert timeless_replay(one) == timeless_replay(two)
    assert sorted(i.to_dict()["key"] for i in one.issues()) == sorted(
        i.to_dict()["key"] for i in two.issues()
    )


def test_a_factory_that_does_not_build_a_module_is_a_usage_error(tmp_path, monkeypatch, planted):
    (tmp_path / "bad_factory.py").write_text("def make(num_classes):\n    return 'not a module'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(scrub.UsageError, match="returned str, not a torch.nn.Module"):
        scrub.scan(planted, num_classes=10, dummy_loss=scrub.api.ReplayOptions(model="bad_factory:make"))
