"""The checks the dummy-loss replay finds (`scrub.replay`): a model's loss, not a record's bytes.

They are produced by the replay stage on the driver, not by record functions, so they are
registered like reader checks: the catalogue documents them, the replay attaches them.
"""

from __future__ import annotations

from scrub.checks.base import reader_check
from scrub.records import Carries, Severity

LOSS_NONFINITE = reader_check(
    "loss-nonfinite",
    Severity.ERROR,
    """A record that makes the replayed model's logits or loss NaN or Inf.

    What it finds:
        Records whose loss (or logits) is NaN or Inf when replayed on their own through the
        replay's model (a seeded linear softmax by default; `--model l2`, `batchnorm`, a PyTorch
        model or a user loss) at the weights training had reached; details give the batch,
        which quantities went non-finite, the precision and the model. Finite values count too:
        a float64 value above 3.4e38 (Inf once cast to float32), a value above 65504 under
        `--precision float16`. When a batch goes non-finite only with its records together, each
        of them is reported as a warning with `batch_level: true`. With the default model, the L2
        probe also reports rows that an L2 normalization of the input turns into NaN
        (`normalization: true` in the details, and `confirms`: an error for squares that
        overflow, `square-overflow`'s severity; a warning for an all-zero row, `zero-norm`'s,
        unless `--model l2` says the model normalizes its input). On token data, a sequence
        whose loss counts no token (a mean over nothing: `confirms` names
        `no-supervised-tokens` or `empty-sequence`), and with a PyTorch language model, one on
        which the model raises (its `error` in the details).
    Why it breaks training:
        The batch's mean loss is NaN, so is every gradient, and one SGD step later every weight:
        the run is lost, and the batch that did it is long gone from the logs.
    Example:
        Row 4711 of `features.h5` (float64) holds 1e39: finite, so `nonfinite-data` is silent, but
        Inf in float32, and its loss is NaN.
    What fix does:
        Moves the record to the quarantine (batch-level warnings: nothing by default).
    """,
    needs=Carries.REPLAY,
)

GRAD_NONFINITE = reader_check(
    "grad-nonfinite",
    Severity.ERROR,
    """A record whose loss is finite but whose gradient is NaN or Inf.

    What it finds:
        Records whose replayed loss and logits stay finite while the weight or bias gradient does
        not (details: batch, precision). With the built-in linear model this is rare by
        construction: a stable softmax's gradient is bounded by the input, so a record that breaks
        the gradient breaks the logits first and is reported as `loss-nonfinite` (its details list
        `gradient` too). It is kept for gradients that go non-finite on their own.
    Why it breaks training:
        The loss curve looks healthy, but the update writes NaN into the weights, and the
        next batch's loss is NaN for a reason the logged loss never showed.
    Example:
        A model whose backward pass divides by a record's norm: an all-zero row has loss 0 and
        gradient 0/0 = NaN.
    What fix does:
        Moves the record to the quarantine.
    """,
    needs=Carries.REPLAY,
)

LOSS_OUTLIER = reader_check(
    "loss-outlier",
    Severity.WARNING,
    """A record whose replayed loss is over 100 times its batch's median.

    What it finds:
        Records whose finite loss exceeds 100 x max(median finite loss of its batch, ln C) in the
        replay (the factor is `outlier_factor`; ln C, the loss of a uniform guess, keeps a
        well-fit batch with a median near 0 from flagging everything). Details give the loss, the
        median and the ratio. A linear model's loss grows with its input's magnitude, so this is
        a record ~100x larger than its neighbours: a unit error, a missing scale, a sentinel.
    Why it breaks training:
        Its gradient is ~100x a normal one: one step throws the weights far away, later losses
        explode, and in float16 or with a second-order optimizer they become Inf and NaN.
    Example:
        A 1e30 sentinel value in a dataset of 0..255 pixels: loss ~1e29 against a median of 15.
    What fix does:
        Nothing by default (a warning); with `--severity warning` it is quarantined.
    """,
    needs=Carries.REPLAY,
)

GRAD_OUTLIER = reader_check(
    "grad-outlier",
    Severity.ERROR,
    """A record whose gradient can throw the weights far away: an absurd SGD step.

    What it finds:
        Records whose share of the gradient can reach, whatever their label, more than 10 times
        the parameters' norm once multiplied by the learning rate (the bound is
        ||(h, 1)|| x sqrt(2) / n for the built-in models, h being the linear layer's input; a
        confidently "correct" row has loss 0 and gradient 0, so the bound is what must be judged),
        and, when a batch's actual step would change the parameters' norm more than 10 times, the
        records whose shares make up half of it; details give the `factor`. A **warning** when
        the bound is only over 100 times the batch's median (`ratio`): large, not yet absurd.
    Why it breaks training:
        Plain SGD moves the weights by the learning rate times the gradient: one step on a row
        1e6 times larger than the rest multiplies a linear layer's weights by thousands, every
        later loss explodes, and under float16 it becomes Inf. In float32 the run may survive,
        having learnt nothing but that record.
    Example:
        One row of values near 1e6 in a dataset standardized to unit variance.
    What fix does:
        Moves the record to the quarantine (warnings: nothing by default).
    """,
    needs=Carries.REPLAY,
)
