"""The checks the NaN guard finds in a user's own training run (`scrub.guard`).

They are found by the guard at a training step whose loss or gradient went non-finite, not by a
scan, so they are registered like reader checks: the catalogue documents them, the guard writes
them to its manifest (which `scrub fix --manifest` takes).
"""

from __future__ import annotations

from scrub.checks.base import reader_check
from scrub.records import Carries, Severity

TRAINING_NONFINITE = reader_check(
    "training-nonfinite",
    Severity.ERROR,
    """A record that makes the loss or a gradient of a real training step NaN or Inf on its own.

    What it finds:
        At a step of the user's own training run (`scrub.guard.NanGuard`, its Lightning callback or
        its Hugging Face `Trainer`) whose loss or gradient went non-finite, the records of that
        batch whose loss alone is non-finite (per-sample losses, one pass), or that a bisection
        of the batch leaves as the cause: the half without them is finite, they alone are not.
        Details give the step, the batch, the dataset index, how it was found (`found_by`:
        `per-sample-loss`, `loss-order` (its own row's values each finite, their reduction not) or
        `bisection`) and how many forward/backward passes the search took.
    Why it breaks training:
        One such record in a batch makes the batch's mean loss, and so every gradient and, one
        optimizer step later, every weight NaN: the run is lost at step 41,000, and the batch
        that did it is gone from the logs.
    Example:
        `cat/0042.jpg` is a constant gray image; the loader's per-image standardization divides
        by its standard deviation, 0, and the batch's loss is NaN. The file itself is a fine JPEG:
        a scan only warns of it (`constant-image`) unless told the pipeline standardizes each
        image (`--normalization per-record`).
    What fix does:
        `scrub fix DATASET --manifest guard.scrub.jsonl` moves the record to the quarantine.
    """,
    needs=Carries.TRAINING_RUN,
)

TRAINING_JOINT_NONFINITE = reader_check(
    "training-joint-nonfinite",
    Severity.WARNING,
    """Records whose training step goes non-finite only together, never one alone.

    What it finds:
        A batch (or part of one) whose loss or gradient is non-finite while each half of it is
        finite, or whose per-sample losses are all finite while their reduction is not: a
        BatchNorm over the batch, a float16 sum that overflows, a class-weighted mean over a
        batch of zero-weight classes (0/0 even for one record). The group is narrowed to one none
        of whose records can be left out (two rows that overflow a mean together: that pair, not
        their batch); where it cannot be, `unnarrowed` says why. Each of its records gets one
        line; details give the group's size, how it was found and the step.
    Why it breaks training:
        The step is as lost as with one bad record, but no record is the cause: removing one at
        random would invent a culprit. The group says where to look (the batch size, the
        precision, the reduction).
    Example:
        Two rows of 40,000 in one float16 batch: each is finite, their sum (80,000) is Inf.
    What fix does:
        Nothing by default (a warning); with `--severity warning` the records are quarantined.
    """,
    needs=Carries.TRAINING_RUN,
)

TRAINING_TRANSIENT = reader_check(
    "training-transient",
    Severity.WARNING,
    """A step that went non-finite once, and is finite when the same batch is run again.

    What it finds:
        The guard runs the failing batch again with the same weights, the same buffers and the
        same random state: when that is finite, the failure is not the data's (a hardware fault,
        a non-deterministic kernel, a race). Each record of the batch gets one line, so that a
        record that keeps coming back can be told; details give the step.
    Why it breaks training:
        It does not, reliably: but a run that keeps hitting it has a machine or kernel problem
        that no data cleaning fixes.
    Example:
        A bit flip in GPU memory makes one step's gradient Inf; the same batch re-run is finite.
    What fix does:
        Nothing by default (a warning).
    """,
    needs=Carries.TRAINING_RUN,
)

TRAINING_SUSPECT = reader_check(
    "training-suspect",
    Severity.WARNING,
    """A record of the batches trained on just before the weights were found non-finite.

    What it finds:
        When a step fails with weights that are already NaN or Inf, the cause is an earlier step
        whose update was finite but absurd (a record of magnitude 1e30 moves the weights to
        1e26, and a later batch overflows). The records of the last `suspects` batches the guard
        let through (a ring buffer) are named; details give the step each was trained at.
    Why it breaks training:
        Every step after is lost: the weights cannot come back from NaN.
    Example:
        Row 4711 of `features.h5` holds 1e30: its step is finite, the next batch's is not.
    What fix does:
        Nothing by default (a warning): scan the suspects (`scrub scan`) to find the cause.
    """,
    needs=Carries.TRAINING_RUN,
)

TRAINING_SPIKE = reader_check(
    "training-spike",
    Severity.ERROR,
    """A record that makes a finite training step's gradient spike far above the steps before it.

    What it finds:
        With the guard's spike rule (on by default: `NanGuard(spike=Spike(factor=100))`), a step
        whose loss and gradients are finite but whose gradient norm is over `factor` times the
        median of the last `window` steps applied is skipped and its batch triaged as a
        non-finite one is: a record whose share of the batch's gradient is over that limit on
        its own (found by bisection) is named. Details give the step, `grad_norm` (null when it
        is past float32's range), `median_grad_norm`, `spike_limit`, `found_by` and `passes`.
    Why it breaks training:
        A record of magnitude 1e19 gives a loss of 1e36, still a float32: nothing is non-finite,
        the optimizer takes the step, the weights jump to 1e34 and every later step overflows,
        by which time the record is long gone from the batch.
    Example:
        Row 777 of a regression set holds 1.4e19 in every feature; in a shuffled run its step's
        gradient norm overflows float32 while the running median is 0.9.
    What fix does:
        `scrub fix DATASET --manifest guard.scrub.jsonl` moves the record to the quarantine.
    """,
    needs=Carries.TRAINING_RUN,
)

TRAINING_JOINT_SPIKE = reader_check(
    "training-joint-spike",
    Severity.WARNING,
    """Records whose training step spiked only together, never one alone.

    What it finds:
        A step the spike rule skipped whose batch, bisected, has no record whose share of the
        gradient is over the limit alone: each half is under it while together they are over.
        Each record of the group gets one line; details give the group's size and the step's
        numbers (`grad_norm`, `median_grad_norm`, `spike_limit`).
    Why it breaks training:
        A step far above the run's usual gradient is the kind that breaks weights, but no
        record is its cause: a learning rate too high, a batch of hard examples together.
    Example:
        A learning-rate schedule that jumps a hundredfold: every record's gradient grows.
    What fix does:
        Nothing by default (a warning); with `--severity warning` the records are quarantined.
    """,
    needs=Carries.TRAINING_RUN,
)
