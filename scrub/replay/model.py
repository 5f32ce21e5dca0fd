"""The dummy model: one linear layer and softmax cross-entropy, in NumPy.

Logistic regression is the smallest model whose forward and backward pass see every input value
with its full magnitude: a value that overflows here overflows the first layer of any network.
The log-softmax is the stable one (the row maximum is subtracted before ``exp``), so the model
itself never overflows: a non-finite loss or gradient comes from the data (or from weights that
data already blew up), never from ``exp(1000)``.

``precision="float16"`` emulates mixed precision (AMP) on the forward and backward matmuls:
inputs, weights and the incoming gradient are rounded to float16, multiplied with float32
accumulation, and the result rounded to float16, as a float16 GEMM on a GPU does; softmax and
cross-entropy run in float32, as autocast runs them. The master weights and the update stay in
float32. There is no loss scaling, so gradients are checked at their true size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PRECISIONS = ("float32", "float16", "bfloat16")
_SMALLEST_NORMAL = np.uint32(0x38800000)  # 2**-14: below it float16 is subnormal
_OVERFLOW = np.uint32(0x477FF000)  # 65520: from here float16 rounds to Inf (NaN and Inf above)


def round_to_float16(values: np.ndarray) -> np.ndarray:
    """``values.astype(float16).astype(float32)``, bit for bit, ~5x faster on large arrays.

    NumPy's conversion takes a slow path whenever a value overflows (40 ms per million values,
    twice per batch for a D x C weight matrix). Rounding the float32 mantissa to float16's 10 bits
    is integer arithmetic (round half to even; a carry moves into the exponent as it should).
    Below float16's smallest normal value its spacing is a constant 2**-24, so rounding is
    ``rint(x * 2**24) * 2**-24`` (exact: scaling by a power of two). Values that overflow, Inf
    and NaN, which are few, go through NumPy's conversion.
    """
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = (bits >> np.uint32(13)) & np.uint32(1)
    rounded += bits
    rounded += np.uint32(0x0FFF)
    rounded &= np.uint32(0xFFFFE000)
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


def round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (8 significant bits, float32's exponent), kept in a
    float32 array: round half to even on the upper 16 bits, as PyTorch's conversion does. A
    carry moves into the exponent, so values beyond bfloat16's largest (~3.39e38) become Inf;
    NaN stays NaN."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = (bits >> np.uint32(16)) & np.uint32(1)
    rounded += bits
    rounded += np.uint32(0x7FFF)
    rounded &= np.uint32(0xFFFF0000)
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

    def nonfinite(self) -> list[str]:
        """Which quantities hold a NaN or an Inf, in the order they are computed."""
        named = (("logits", self.logits), ("loss", self.losses), ("gradient", self.grad_w),
                 ("gradient", self.grad_b))
        found: list[str] = []
        for name, values in named:
            if name not in found and not np.isfinite(values).all():
                found.append(name)
        return found


class LinearSoftmax:
    """``logits = x @ W + b``; loss ``-log softmax(logits)[y]``; plain SGD on the mean loss.

    Weights are drawn from N(0, init_std²) by ``numpy.random.default_rng(seed)``, biases are zero:
    the same seed gives the same model on every machine.
    """

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

    @property
    def num_classes(self) -> int:
        return self.bias.shape[0]

    def run(self, X: np.ndarray, y: np.ndarray) -> Pass:
        """Forward and backward over ``X`` (n x D float32) with labels ``y`` in [0, C)."""
        with np.errstate(all="ignore"):  # overflow and NaN are findings, not warnings
            x = self._cast(np.asarray(X, np.float32))
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
        return Pass(logits, losses.astype(np.float32, copy=False), grad_w, grad_b)

    def step(self, result: Pass, lr: float) -> None:
        """One SGD update of the float32 master weights."""
        self.weight -= np.float32(lr) * result.grad_w
        self.bias -= np.float32(lr) * result.grad_b

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
