"""A classic NaN: an information-gain loss fed values that are not probabilities.

Caffe's InfogainLoss (before it learned to apply the softmax itself) took *probabilities* and
computed ``loss = -sum_j H[y, j] * log(p_j)``; Caffe clamped ``p`` at 1e-20 before the log.
Ports that drop the clamp, or datasets that feed it raw scores, break three ways:

* a 0 anywhere in the row: ``log(0) = -inf``, and ``H[y, j] * -inf`` is ``-inf``, or NaN where
  ``H[y, j] == 0`` (``0 * -inf``): even the identity H goes NaN on a zero;
* a negative value: ``log(-0.3) = NaN``;
* a tiny positive one (a float32 subnormal, 1e-40): the loss is a finite ~92, but the gradient
  ``-H[y, j] / p_j`` overflows float32 to -Inf: the loss curve looks fine and the weights go NaN.

Use it with ``scrub scan DATA --dummy-loss --model infogain_loss:infogain_loss`` (this folder
on PYTHONPATH), on data whose rows are per-class probabilities (D = C columns), or in Python
with ``ReplayConfig(model="infogain_loss:infogain_loss")``. It returns ``(losses, gradient)``,
so scrub checks the gradient as well as the loss.
"""

from __future__ import annotations

import numpy as np

#: The information-gain matrix H (C x C). The identity makes the loss multinomial logistic;
#: Caffe reads H from a file. Used as a matrix product, as Caffe does, for every class.
H: np.ndarray | None = None


def infogain_loss(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-record ``-sum_j H[y, j] log X[:, j]`` and its gradient w.r.t. X (of the mean loss)."""
    C = X.shape[1]
    weights = (np.eye(C, dtype=X.dtype) if H is None else H.astype(X.dtype))[y]  # H[y], (n, C)
    losses = -(weights * np.log(X)).sum(axis=1)
    gradient = -weights / X / len(y)
    return losses, gradient
