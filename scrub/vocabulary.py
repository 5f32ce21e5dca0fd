"""A model's vocabulary and positions, from its local files (``--tokenizer PATH``; nothing is
downloaded): a Hugging Face ``tokenizer.json``, a model's ``config.json``, or a folder holding
either or both.

``config.json``'s ``vocab_size`` is the model's embedding size, the bound an id must stay under;
it wins over the tokenizer's count (which may be smaller: embeddings are padded to a multiple of
64). A tokenizer that knows more tokens than the model embeds is the "added tokens without
resizing" mistake, said in `Vocabulary.notes`. With a ``tokenizer.json`` and the ``tokenizers``
library (``pip install 'scrub[text]'``), texts are tokenized so that their lengths and their
supervised tokens are judged as the trainer will see them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from scrub.errors import UsageError
from scrub.records import TextParts

#: config.json keys of the model's number of positions, by model family
POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")


@dataclass
class Vocabulary:
    size: int | None  # ids must be below this
    max_positions: int | None
    tokenizer: Any = None  # a `tokenizers.Tokenizer`, or None: texts are not tokenized
    notes: list[str] = field(default_factory=list)

    def tokenize(self, parts: TextParts, ignore: int) -> tuple[np.ndarray, np.ndarray]:
        """(input ids, labels) of a text's parts concatenated: labels are the ids of the supervised
        parts and ``ignore`` elsewhere. One part alone is encoded with the tokenizer's special
        tokens (as a plain-text dataset is); several without, one after another (a chat template
        is not applied: lengths are then a lower bound)."""
        assert self.tokenizer is not None
        special = len(parts) == 1
        ids: list[int] = []
        labels: list[int] = []
        for _, text, supervised in parts:
            encoded = self.tokenizer.encode(text, add_special_tokens=special).ids
            ids += encoded
            labels += encoded if supervised else [ignore] * len(encoded)
        return np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)


def _read_json(path: Path, what: str) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageError(f"--tokenizer {path}: cannot read {what}: {error}") from None
    if not isinstance(document, dict):
        raise UsageError(f"--tokenizer {path}: {what} is not a JSON object")
    return document


@lru_cache(maxsize=4)
def load_vocabulary(path: str) -> Vocabulary:
    """The vocabulary ``path`` gives (read once per process); one-line errors for what is not one."""
    location = Path(path)
    if location.is_dir():
        tokenizer_file, config_file = location / "tokenizer.json", location / "config.json"
        if not tokenizer_file.is_file() and not config_file.is_file():
            raise UsageError(f"--tokenizer {path}: the folder holds neither tokenizer.json nor config.json")
    elif location.is_file():
        document = _read_json(location, "the file")
        tokenizer_file = location if "model" in document else location.with_name("-")
        config_file = location if "vocab_size" in document else location.with_name("-")
        if "model" not in document and "vocab_size" not in document:
            raise UsageError(
                f"--tokenizer {path}: neither a tokenizer.json (no 'model') nor a config.json "
                "(no 'vocab_size')"
            )
    else:
        raise UsageError(f"--tokenizer {path}: no such file or folder")
    size = positions = None
    notes: list[str] = []
    if config_file.is_file():
        config = _read_json(config_file, config_file.name)
        size = config.get("vocab_size") if isinstance(config.get("vocab_size"), int) else None
        positions = next((config[k] for k in POSITION_KEYS if isinstance(config.get(k), int)), None)
    tokenizer = None
    if tokenizer_file.is_file():
        document = _read_json(tokenizer_file, tokenizer_file.name)
        counted = _tokenizer_size(document)
        if size is None:
            size = counted
        elif counted is not None and counted > size:
            notes.append(
                f"the tokenizer knows {counted:,} tokens, the model embeds {size:,} (config.json): "
                "ids from the tokenizer's last tokens are out of range (tokens added without resizing?)"
            )
        tokenizer = _tokenizer(tokenizer_file)
    return Vocabulary(size, positions, tokenizer, notes)


def _tokenizer_size(document: dict) -> int | None:
    """The ids a tokenizer.json can produce: its model's vocabulary and its added tokens."""
    model = document.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids: list[int] = []
    if isinstance(vocab, dict):
        ids += [value for value in vocab.values() if isinstance(value, int)]
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        ids.append(len(vocab) - 1)
    for added in document.get("added_tokens") or []:
        if isinstance(added, dict) and isinstance(added.get("id"), int):
            ids.append(added["id"])
    return max(ids) + 1 if ids else None


def _tokenizer(path: Path) -> Any:
    """The `tokenizers.Tokenizer` of ``path``, or None when the library is not installed (texts
    are then judged untokenized, and the scan says so)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # the library's own error types vary by version
        raise UsageError(f"--tokenizer {path}: tokenizers cannot load it: {error}") from None
