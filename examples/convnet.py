"""A small PyTorch conv net with BatchNorm, for the replay: ``--model convnet:make``.

scrub calls ``make`` with the keywords it declares among ``input_shape`` (a record's shape:
``(3, 16, 16)`` for images, the row's shape for arrays), ``num_features`` and ``num_classes``,
then trains the module it returns as a training loop would: train mode, ``F.cross_entropy``, a
real ``torch.optim.SGD`` step at ``--lr``, in float16 or bfloat16 autocast under
``--precision``. Needs PyTorch (``pip install 'scrub[torch]'``)::

    PYTHONPATH=examples scrub scan train.h5 --dummy-loss --model convnet:make

Records that are not images (a flat row of D values) are seen as one channel of 1 x D.
"""

from __future__ import annotations

import torch
from torch import nn


def make(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """conv 3x3 (16) -> BatchNorm -> ReLU -> conv 3x3 (32) -> BatchNorm -> ReLU -> global
    average pool -> linear: the usual shape of a small image classifier."""
    channels = input_shape[0] if len(input_shape) == 3 else 1
    layers: list[nn.Module] = [] if len(input_shape) == 3 else [Unflatten(input_shape)]
    layers += [
        nn.Conv2d(channels, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    ]
    return nn.Sequential(*layers)


class Unflatten(nn.Module):
    """A row of D values as an image of one channel, 1 x D."""

    def __init__(self, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.width = int(torch.tensor(input_shape).prod())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(len(x), 1, 1, self.width)
