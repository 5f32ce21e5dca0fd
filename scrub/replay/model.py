"""The built-in dummy models, in NumPy: a softmax classifier on top of one of three inputs.

* ``linear`` (the default): ``logits = x @ W + b`` on the standardized input. Logistic
  regression is the smallest model whose forward and backward pass see every input value with
  its full magnitude: a value that overflows here overflows the first layer of any network.
* ``l2``: the same on ``x / ||x||`` (the raw input, L2-normalized, as embedding and cosine
  heads do): an all-zero row gives 0/0 = NaN; a row whose squares overflow has an Inf norm, and
  becomes all zeros (measured the same in PyTorch 2.13: ``x / x.norm()`` and ``F.normalize``
  silently erase it).
* ``batchnorm``: the same on a batch normalization of the standardized input (batch mean and
  variance per feature, computed in float32 as float32 kernels compute them, no affine): a
  value whose square overflows float32 makes its feature's variance Inf, and that feature zero
  for the whole batch. (PyTorch's CPU kernel accumulates in float64 and does not overflow
  there; measured, 2.13.)

An Inf norm or variance leaves the output finite, so the normalization's statistic is checked
itself (`Pass.statistic`): a record that makes it Inf is reported like one whose loss is.

The log-softmax is the stable one (the row maximum is subtracted before ``exp``), so a model
never overflows by itself: a non-finite loss or gradient comes from the data (or from weights
that data already blew up), never from ``exp(1000)``. The normalizations run in float32 under
every precision, as autocast runs them.

``precision="float16"`` emulates mixed precision (AMP) on the forward and backward matmuls:
inputs, weights and the incoming gradient are rounded to float16, multiplied with float32
accumulation, and the result rounded to float16, as a float16 GEMM on a GPU does; softmax and
cross-entropy run in float32, as autocast runs them. ``bfloat16`` does the same with bfloat16's
rounding (float32's range). The master weights and the update stay in float32. There is no loss
scaling, so gradients are checked at their true size.

Training is plain SGD on each batch's mean loss, ``W -= lr * grad``, as users train.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PRECISIONS = ("float32", "float16", "bfloat16")
MODELS = ("linear", "l2", "batchnorm")
BATCHNORM_EPS = 1e-5  # PyTorch's default
EXACT_EVERY = 64  # steps between exact computations of the parameters' norm
_SMALLEST_NORMAL = np.uint32(0x38800000)  # 2**-14: below it float16 is subnormal
_OVERFLOW = np.uint32(0x477FF000)  # 65520: from here float16 rounds to Inf (NaN and Inf above)


def round_to_float16(values: np.ndarray) -> np.ndarray:
    """``values.astype(float16).astype(float32)``, bit for bit, several times faster on large
    arrays (see docs/benchmarks.md, "Design measurements").

    NumPy's conversion takes a slow path whenever a value overflows, and it runs twice per batch
    for a D x C weight matrix. Rounding the float32 mantissa to float16's 10 bits is integer
    arithmetic (round half to even; a carry moves into the exponent as it should).
    Below float16's smallest normal value its spacing is a constant 2**-24, so rounding is
    ``rint(x * 2**24) * 2**-24`` (exact: scaling by a power of two). Values that overflow, Inf
    and NaN, which are few, go through NumPy's conversion.
    """
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = _round_half_to_even(bits, 13)  # float16 keeps 10 of float32's 23 mantissa bits
    magnitude = bits & np.uint32(0x7FFFFFFF)
    result = rounded.view(np.float32)
    small = magnitude < _SMALLEST_NORMAL
    with np.errstate(all="ignore"):  # large values overflow in x * 2**24: np.where drops them
        if small.any():
            result = np.where(small, np.rint(x * np.float32(2.0**24)) * np.float32(2.0**-24), result)
        large = magnitude >= _OVERFLOW
        if large.any():
            result[large] = x[large].astype(np.float16).astype(np.float32)
    return result


def _round_half_to_even(bits: np.ndarray, dropped: int) -> np.ndarray:
    """float32 bit patterns with their low ``dropped`` bits rounded off, half to even (a carry
    moves into the exponent): the rounding of a float32 to a type with fewer mantissa bits."""
    rounded = (bits >> np.uint32(dropped)) & np.uint32(1)
    rounded += bits
    rounded += np.uint32((1 << (dropped - 1)) - 1)
    rounded &= np.uint32((0xFFFFFFFF << dropped) & 0xFFFFFFFF)
    return rounded


def round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (8 significant bits, float32's exponent), kept in a
    float32 array: round half to even on the upper 16 bits, as PyTorch's conversion does. A
    carry moves into the exponent, so values beyond bfloat16's largest (~3.39e38) become Inf;
    NaN stays NaN."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = _round_half_to_even(bits, 16)
    result = rounded.view(np.float32)
    nan = np.isnan(x)
    if nan.any():
        result[nan] = np.nan
    return result


ROUNDING = {"float16": round_to_float16, "bfloat16": round_to_bfloat16}


@dataclass(frozen=True, slots=True)
class Pass:
    """One forward and backward pass over a batch of n records (n x C logits)."""

    logits: np.ndarray  # (n, C), float32 (values of the precision's dtype)
    losses: np.ndarray  # (n,), float32
    grad_w: np.ndarray  # (D, C), float32: the gradient of the batch's mean loss
    grad_b: np.ndarray  # (C,), float32
    #: per record, the norm of its share of the gradient: ||(h_i, 1)|| * ||delta_i|| / n, h_i
    #: being the linear layer's input (exact: the gradient is the sum of these outer products)
    contributions: np.ndarray
    #: per record, the largest norm its share of the gradient can have whatever its label:
    #: ||(h_i, 1)|| * sqrt(2) / n (a softmax's delta has norm at most sqrt(2))
    potentials: np.ndarray
    #: the normalization's own statistic, when the model has one: per record (``norm``, the L2
    #: norm) or per feature (``variance``, over the batch). An Inf there does not make the
    #: output NaN (x / Inf is 0: the row, or the batch's feature, is silently zeroed), so it is
    #: judged itself, as an anomaly detector would.
    statistic: tuple[str, np.ndarray] | None = None
    #: ||(grad_w, grad_b)||², a float32 BLAS dot: finite means every entry is finite (an Inf or a
    #: NaN makes it non-finite; a huge finite entry may overflow it, then the entries are checked)
    grad_norm2: float = 0.0

    def nonfinite(self) -> list[str]:
        """Which quantities hold a NaN or an Inf, in the order they are computed."""
        named = [("logits", self.logits), ("loss", self.losses)]
        if self.statistic is not None:
            named.insert(0, self.statistic)
        if not math.isfinite(self.grad_norm2):
            named += [("gradient", self.grad_w), ("gradient", self.grad_b)]
        found: list[str] = []
        for name, values in named:
            if name not in found and not np.isfinite(values).all():
                found.append(name)
        return found

    def rows_finite(self) -> np.ndarray:
        """Per record: its logits and its loss (and its norm) are finite, whatever the others."""
        finite = np.isfinite(self.logits).all(axis=1) & np.isfinite(self.losses)
        if self.statistic is not None and self.statistic[0] == "norm":
            finite &= np.isfinite(self.statistic[1])
        return finite


class LinearSoftmax:
    """``logits = h @ W + b``, ``h`` the model's input (see `features`); loss ``-log
    softmax(logits)[y]``; plain SGD on the mean loss.

    Weights are drawn from N(0, init_std²) by ``numpy.random.default_rng(seed)``, biases are zero:
    the same seed gives the same model on every machine.
    """

    name = "linear"
    #: each record's logits and loss depend on that record alone (a batch norm's do not)
    per_record = True
    #: whether it takes the standardized input (else the raw one)
    standardized = True

    def __init__(
        self, dim: int, num_classes: int, seed: int = 0, init_std: float = 0.01, precision: str = "float32"
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        if num_classes < 1 or dim < 1:
            raise ValueError("the model needs dim >= 1 and num_classes >= 1")
        rng = np.random.default_rng(seed)
        self.weight = (rng.standard_normal((dim, num_classes)) * init_std).astype(np.float32)
        self.bias = np.zeros(num_classes, np.float32)
        self.precision = precision
        self._norm2: float | None = None  # ||(W, b)||², see `norm`
        self._after: tuple[Pass, float] | None = None  # the last step_norm's pass and result
        self._steps = 0

    @property
    def num_classes(self) -> int:
        return self.bias.shape[0]

    def features(self, X: np.ndarray) -> tuple[np.ndarray, tuple[str, np.ndarray] | None]:
        """The linear layer's input (float32), and the normalization's statistic: the input
        itself, no statistic."""
        return X, None

    def run(self, X: np.ndarray, y: np.ndarray) -> Pass:
        """Forward and backward over ``X`` (n x D float32) with labels ``y`` in [0, C)."""
        with np.errstate(all="ignore"):  # overflow and NaN are findings, not warnings
            h, statistic = self.features(np.asarray(X, np.float32))
            x = self._cast(h)
            logits = self._gemm(x, self._cast(self.weight)) + self._cast(self.bias)
            logits = self._cast(logits)
            shifted = logits - logits.max(axis=1, keepdims=True)
            log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            rows = np.arange(len(y))
            losses = -log_probs[rows, y]
            delta = np.exp(log_probs)
            delta[rows, y] -= 1.0
            delta = self._cast(delta / max(len(y), 1))  # d(mean loss)/d(logits)
            grad_w = self._cast(self._gemm(x.T, delta))
            grad_b = delta.sum(axis=0, dtype=np.float32)
            inputs = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64) + 1.0)
            contributions = inputs * np.sqrt(np.einsum("ij,ij->i", delta, delta, dtype=np.float64))
            potentials = inputs * (np.sqrt(2.0) / max(len(y), 1))
            grad_norm2 = self._dot(grad_w, grad_w, grad_b, grad_b)
        return Pass(
            logits,
            losses.astype(np.float32, copy=False),
            grad_w,
            grad_b,
            contributions,
            potentials,
            statistic,
            grad_norm2,
        )

    def norm(self) -> float:
        """The parameters' norm, ||(W, b)||. BLAS dot products in float32: relative error ~1e-5
        where the limits it is compared with are factors of 10 (float64 sums took half the
        replay's time: see docs/benchmarks.md, "Design measurements"). Kept between steps: a
        step sets it from `step_norm`'s formula, and every `EXACT_EVERY` steps it is computed
        afresh."""
        if self._norm2 is None:
            self._norm2 = self._dot(self.weight, self.weight, self.bias, self.bias)
        return _norm(self._norm2)

    def step_norm(self, result: Pass, lr: float) -> float:
        """||(W, b) - lr * gradient||: the parameters' norm after the step, as
        sqrt(||θ||² - 2 lr <θ, g> + lr² ||g||²)."""
        with np.errstate(all="ignore"):
            cross = self._dot(self.weight, result.grad_w, self.bias, result.grad_b)
            after = self.norm() ** 2 - 2 * lr * cross + lr * lr * result.grad_norm2
        self._after = (result, after)
        return _norm(after)

    @staticmethod
    def _dot(w1: np.ndarray, w2: np.ndarray, b1: np.ndarray, b2: np.ndarray) -> float:
        return float(np.dot(w1.reshape(-1), w2.reshape(-1))) + float(np.dot(b1, b2))

    def step(self, result: Pass, lr: float) -> None:
        """One SGD update of the float32 master weights."""
        self.weight -= np.float32(lr) * result.grad_w
        self.bias -= np.float32(lr) * result.grad_b
        self._steps += 1
        known = self._after[1] if self._after is not None and self._after[0] is result else None
        self._norm2 = None if known is None or self._steps % EXACT_EVERY == 0 else max(known, 0.0)
        self._after = None

    def _cast(self, values: np.ndarray) -> np.ndarray:
        """Round to the precision (float16 values are kept in float32 arrays for the BLAS)."""
        if self.precision == "float32":
            return values.astype(np.float32, copy=False)
        return ROUNDING[self.precision](values)

    @staticmethod
    def _gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # float16 operands multiplied in float32 are exact (11 + 11 significant bits fit in 24),
        # so this is a float16 GEMM with float32 accumulation, as tensor cores do it.
        return a @ b


def _norm(square: float) -> float:
    if math.isnan(square):
        return square
    return math.sqrt(square) if square > 0 else 0.0  # a tiny negative: rounding of the formula


class L2Softmax(LinearSoftmax):
    """The linear softmax on the raw input divided by its L2 norm (computed in float32)."""

    name = "l2"
    standardized = False
    normalizes_input = True

    def features(self, X: np.ndarray) -> tuple[np.ndarray, tuple[str, np.ndarray]]:
        with np.errstate(all="ignore"):
            norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float32))
            return X / norms[:, None], ("norm", norms)


class BatchNormSoftmax(LinearSoftmax):
    """The linear softmax on a batch normalization of the input: per feature, the batch's mean
    and (biased) variance in float32, ``(x - mean) / sqrt(var + eps)``, no affine parameters."""

    name = "batchnorm"
    per_record = False
    normalizes_input = True

    def features(self, X: np.ndarray) -> tuple[np.ndarray, tuple[str, np.ndarray]]:
        with np.errstate(all="ignore"):
            centred = X - X.mean(axis=0, dtype=np.float32)
            variance = np.square(centred).mean(axis=0, dtype=np.float32)
            return centred / np.sqrt(variance + np.float32(BATCHNORM_EPS)), ("variance", variance)


BUILT_IN = {model.name: model for model in (LinearSoftmax, L2Softmax, BatchNormSoftmax)}
