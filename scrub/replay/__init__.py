"""Dummy-loss replay: train a seeded toy model on the data, in record order, and name every
record that makes its loss or gradients go NaN/Inf. The text below is the README section.

### Dummy-loss replay (`--dummy-loss`)

The record checks find bad values; the replay finds bad *losses*: it trains a small seeded
model for one epoch, in record order, as training would, and names every record whose loss,
logits or gradients go NaN or Inf (`loss-nonfinite`, `grad-nonfinite`) or whose loss dwarfs its
batch's (`loss-outlier`). It catches what no per-value check sees: a float64 value of 1e39
(finite, but Inf once a float32 loader casts it), a value that is fine in float32 but above
65504 in float16, finite values that overflow a logit, a user loss that takes `log(0)`.

**Preprocessing** (on the workers, in parallel; `scrub/replay/features.py`). Nothing is cleaned:
no clipping, no NaN replacement, no normalization. Images are decoded with Pillow,
`convert("RGB")` (torchvision's default loader), resized to 16x16 (bilinear; `image_size`),
flattened HWC, values 0..255: D = 768. Arrays (HDF5 rows, `.npy` values, Datums) are flattened
and cast to float32 as a float32 loader would: a value beyond 3.4e38 becomes Inf, deliberately.
`--scale` only multiplies (after the cast). Records are skipped and counted, not replayed, when
they cannot be fed to a model; other checks report them: no payload, an image Pillow cannot
decode or above `--max-pixels`, an array whose size is not D (no loader can stack it), a label
that is not an integer. A record without a label trains as class 0 (Caffe's behaviour).

**Model** (`scrub/replay/model.py`): logistic regression, `logits = x @ W + b`, softmax
cross-entropy with the stable log-softmax (the row maximum is subtracted first, so the model
itself never overflows: a non-finite value comes from the data). W ~ N(0, 0.01²) from
`numpy.random.default_rng(seed)`, b = 0. One epoch of mini-batch SGD on the batch's mean loss;
the learning rate is divided by the batch's median `|x|² + 1` (normalized LMS), so that a clean
dataset trains stably in any units while the data keep their magnitude. (Plain SGD with a fixed
rate does not: at lr 0.01 on raw pixels the median loss climbs to ~5000 and float16 overflows on
clean data.) `--precision float16` runs both matmuls as mixed precision does: inputs, weights and
incoming gradients rounded to float16, float32 accumulation, float16 results; softmax and loss in
float32; float32 master weights; no loss scaling.

| option | default | meaning |
|---|---|---|
| `--batch-size` | `64` | records per SGD step, cut from the stream in record order |
| `--lr` | `0.1` | step size, per unit of the batch's median `|x|² + 1` |
| `--seed` | `0` | initial weights |
| `--precision` | `float32` | or `float16` (mixed precision) |
| `--scale` | none | multiplies every input value |
| `--num-classes` | the data's | C; labels outside `[0, C)` are `label-out-of-range` |
| `--model` | the linear model | `module:function`, a user loss |
| image size | 16x16 RGB | D = 768 |
| loss-outlier factor | 100 | see below |

**Per batch.** Labels outside `[0, C)` are reported (`label-out-of-range`) and left out of the
batch: they would index past the logits. Logits, losses and gradients are checked for NaN/Inf.
A non-finite batch is *localized*: each record is replayed on its own at the same weights (for
a user loss, together with the last clean batch, so that a loss that needs its batch is judged
in a healthy one); those that go non-finite are reported, `loss-nonfinite` when the logits or
loss do, `grad-nonfinite` when only the gradient does (details: `batch`, `nonfinite`, `loss`,
`precision`, `model`). If no record fails on its own, or the others still fail together, the
batch has a *batch-level* pathology (a loss normalized by the label counts of the batch goes
0/0 when a class is absent): each of those records gets `loss-nonfinite` as a **warning** with
`batch_level: true`; no one record is at fault, so none is quarantined by default. A finite batch
is screened for `loss-outlier`: loss > 100 x max(median loss of the batch, ln C) (ln C is a
uniform guess's loss; it keeps a well-fit batch with a median near 0 from flagging everything).
A linear model's loss grows with the input's magnitude, so that is a record ~100x larger than
its neighbours; over a clean epoch of real photos the largest ratio measured was 16.

**A reported record never moves the weights**: a batch with a non-finite value or an outlier is
not applied (counted in `batches_skipped`), so one bad record cannot poison the rest of the
replay. (A 1e30 record has a finite loss of ~1e29; applied, its step would leave weights ~1e26
and every later loss enormous.)

**Determinism.** Workers only featurize; the driver feeds the vectors to the replay strictly in
record order, and batches are cut from that stream, so batches, weights and issues depend on the
data, the seed and the options only: never on partitions, chunk sizes, workers or scheduler.

**Your own loss** (`--model module:function`): a callable `f(X, y)`, X an (n, D) array (float16
under `--precision float16`), y (n,) int64 labels in `[0, C)`, returning per-record losses
(or the batch's scalar) as a NumPy array or a PyTorch tensor (PyTorch is never imported by scrub),
or `(losses, gradient)` to have a gradient checked too. scrub batches, checks and localizes; it
holds no weights for it, so there is no update. `examples/infogain_loss.py` is Caffe's
InfogainLoss without its clamp: a 0 or negative input makes the loss NaN (`log`), a 1e-42 one
leaves the loss finite and the gradient -Inf (`grad-nonfinite`).

Measured (one core, 10 classes): the replay does ~180,000 records/s of 768 features in float32,
~80,000 in float16, ~23,000 when 1% of records are NaN (73% of batches localized); featurizing
runs ~2,900 256x256 JPEGs/s and ~360,000 HDF5 rows/s per worker.
"""

import importlib
from typing import Any

_EXPORTS = {
    "FeatureSpec": "scrub.replay.features",
    "Features": "scrub.replay.features",
    "featurize_batch": "scrub.replay.features",
    "featurize_records": "scrub.replay.features",
    "record_vector": "scrub.replay.features",
    "LinearSoftmax": "scrub.replay.model",
    "Replayer": "scrub.replay.replayer",
    "ReplayConfig": "scrub.replay.replayer",
    "ReplayStats": "scrub.replay.replayer",
    "Standardizer": "scrub.replay.standardize",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # imported on first use: the scan's workers need only `standardize`
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'scrub.replay' has no attribute {name!r}")
