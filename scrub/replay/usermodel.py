"""``--model module:function``: a user loss, or a factory of a PyTorch model.

What the function's parameters are called decides what it is used as: a callable whose required
parameters are all among ``input_shape`` (a record's shape, e.g. ``(3, 16, 16)`` for images),
``num_features`` (D) and ``num_classes`` (C) is a model factory, called with those of them it
declares, and must return a ``torch.nn.Module`` (`scrub.replay.torchmodel` trains it; a
``torch.nn.Module`` class with such an ``__init__`` works too). Anything else is a loss, called
as ``f(X, y)``. A loss function takes ``(X, y)``: X an (n, D) array (float32, or float16 under
``precision="float16"``, as mixed precision would feed it; a copy it may change), y an (n,)
int64 array of labels in [0, C). It returns the per-record losses, shape (n,), or the batch's
scalar loss, as a NumPy array or a PyTorch tensor. It may return ``(losses, gradient)``
instead, ``gradient`` being any array, tensor or sequence of them (its gradients, with respect to
whatever it likes): then scrub checks those too and reports `grad-nonfinite`. PyTorch is never
imported here: a tensor is recognised by its ``detach`` and ``cpu`` methods.

On token data (`load_token_model`) only a factory is accepted, its required parameters among
``vocab_size``, ``max_length`` and ``num_classes``; `scrub.replay.torchlm` trains the language
model it returns.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from scrub.errors import UsageError, first_line
from scrub.wording import counted

LossFunction = Callable[[np.ndarray, np.ndarray], Any]


def load_model(spec: str, input_shape: tuple[int, ...], num_classes: int, config: Any) -> Any:
    """The loss function ``spec`` names, or the `TorchModel` its factory builds."""
    function = load_loss(spec)
    offered = {
        "input_shape": tuple(input_shape),
        "num_features": int(np.prod(input_shape)),
        "num_classes": num_classes,
    }
    keywords = _factory_keywords(function, offered)
    if keywords is None:
        return function  # f(X, y): a loss
    from scrub.replay.torchmodel import TorchModel

    return TorchModel(_build(function, keywords, spec, config), spec, input_shape, num_classes, config)


def load_token_model(spec: str, vocab_size: int, max_length: int, config: Any) -> Any:
    """The `TorchLanguageModel` the factory ``spec`` builds, for token data: a factory whose
    required parameters are among ``vocab_size`` (V), ``max_length`` (the longest sequence the
    replay feeds: its position embeddings must reach it) and ``num_classes`` (V too)."""
    function = load_loss(spec)
    offered = {"vocab_size": vocab_size, "max_length": max_length, "num_classes": vocab_size}
    keywords = _factory_keywords(function, offered)
    if keywords is None:
        raise UsageError(
            f"--model {spec}: on token data --model names a factory of a language model (parameters "
            "among vocab_size, max_length), not a loss f(X, y)"
        )
    from scrub.replay.torchlm import TorchLanguageModel

    return TorchLanguageModel(_build(function, keywords, spec, config), spec, vocab_size, config)


def _factory_keywords(function: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any] | None:
    """The keywords to call ``function`` with if it is a model factory (its required parameters
    all among ``offered``), else None (a loss)."""
    import inspect

    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: call it as a loss
        return None
    required = [
        p.name for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    named = {p.name for p in parameters} & set(offered)
    if any(name not in offered for name in required) or not (named or not required and parameters == []):
        return None
    return {k: v for k, v in offered.items() if k in named}


def _build(function: Callable[..., Any], keywords: dict[str, Any], spec: str, config: Any) -> Any:
    """The module the factory returns, PyTorch seeded with ``--seed`` first."""
    try:
        import torch
    except ImportError:
        raise UsageError(
            f"--model {spec} is a model factory, which needs PyTorch: pip install 'scrub[torch]'"
        ) from None

    torch.manual_seed(config.seed)  # the factory's initial weights, like the built-in models'
    try:
        module = function(**keywords)
    except Exception as error:
        raise UsageError(f"--model {spec}({', '.join(keywords)}) failed: {first_line(error)}") from None
    if not (hasattr(module, "parameters") and hasattr(module, "forward")):
        raise UsageError(
            f"--model {spec} returned {type(module).__name__}, not a torch.nn.Module (a loss takes (X, y))"
        )
    return module


def load_loss(spec: str) -> Callable[..., Any]:
    """The callable ``module:function`` names (``module`` importable from ``sys.path``): a loss
    (`LossFunction`) or a model factory, which `load_model` tells apart."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise UsageError(f"--model must be module:function, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise UsageError(f"--model {spec}: cannot import {module_name}: {first_line(error)}") from None
    function: Any = module
    for part in name.split("."):
        function = getattr(function, part, None)
    if not callable(function):
        raise UsageError(f"--model {spec}: {module_name} has no callable {name}")
    return function


def call_loss(
    function: LossFunction, X: np.ndarray, y: np.ndarray, spec: str
) -> tuple[np.ndarray, bool | None]:
    """(losses as float64, shape (n,) or (); whether the gradient is finite, None if none given)."""
    answer = function(X, y)
    gradient_finite = None
    if isinstance(answer, tuple) and len(answer) == 2:
        answer, gradient = answer
        parts = gradient if isinstance(gradient, (list, tuple)) else [gradient]
        gradient_finite = all(bool(np.isfinite(_numpy(part, spec)).all()) for part in parts)
    losses = _numpy(answer, spec)
    if losses.ndim and losses.size != len(y):
        raise UsageError(
            f"--model {spec} returned {counted(losses.size, 'loss')} for a batch of "
            f"{counted(len(y), 'record')}"
        )
    return (losses.reshape(len(y)) if losses.ndim else losses), gradient_finite


def _numpy(value: Any, spec: str) -> np.ndarray:
    """float64 holds every float16/float32/bfloat16 value exactly, Inf and NaN included."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()  # NumPy has no bfloat16; float32 holds each value exactly
        value = value.numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        what = type(value).__name__
        raise UsageError(f"--model {spec} returned {what}, not numbers: {first_line(error)}") from None


def token_model(config: Any, vocab_size: int, dim: int, max_length: int) -> Any:
    """The replay's model on token data: the built-in `EmbeddingLM` (the default ``--model``), or
    the PyTorch language model a ``module:factory`` builds."""
    if ":" in config.model:
        return load_token_model(config.model, vocab_size, max_length, config)
    from scrub.replay.tokens import EmbeddingLM

    if config.model != "linear":
        raise UsageError(
            f"--model {config.model} is a model of vectors (arrays, images); on token data the replay "
            "trains its embedding language model (the default --model) or a module:factory"
        )
    return EmbeddingLM(vocab_size, dim, config.seed, config.init_std, config.precision)
