"""What a language-model record holds, from its fields: one interpretation shared by every format
whose records are objects or rows (JSON Lines, WebDataset ``.json`` members, Parquet and Arrow
token columns, MosaicML shards).

A record is, by the first of these it has:

* already tokenized: ``input_ids`` (a list of integers), with ``labels`` and ``attention_mask``
  when present (`Carries.TOKENS`, kind ``tokens``);
* a chat: ``messages`` (or ``conversations``), a list of ``{"role", "content"}`` objects
  (ShareGPT's ``{"from", "value"}`` too); the assistant's messages are what the loss counts;
* ``prompt`` and ``completion``: the completion is what the loss counts;
* ``text`` (or ``content``): all of it counts.

``--data-key`` names the field of the input ids or text when it is another one; ``--label-key``
the field of the labels. A record with none of these is `malformed-record`, named by its key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scrub.checks.base import problem
from scrub.records import Record, TextParts

#: the fields a tokenized record's input ids, labels and attention mask are in (Hugging Face's)
IDS, LABELS, ATTENTION = "input_ids", "labels", "attention_mask"
CHAT_FIELDS = ("messages", "conversations")
TEXT_FIELDS = ("text", "content")
#: roles whose messages the loss counts (OpenAI's and ShareGPT's names)
SUPERVISED_ROLES = frozenset({"assistant", "gpt", "model", "bot"})
#: the fields a record is recognised by, for the message of one that has none
KNOWN = (IDS, *CHAT_FIELDS, "prompt", *TEXT_FIELDS)


def token_array(values: Any) -> np.ndarray | None:
    """A sequence of integers as a 1-D int64 array (an array keeps its dtype); None when it is not
    one (a string, floats, nested lists)."""
    if isinstance(values, np.ndarray):
        return values.ravel() if values.dtype.kind in "iu" else None
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        return None
    # the types' set is made in C (a parsed JSON list holds exact ints): the isinstance loop,
    # for int subclasses only, cost 4x the parse of a tokenized JSON line
    exact = set(map(type, values)) <= {int}
    if not exact and not all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return None
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:  # beyond int64: out of any vocabulary, and not an id a loader can hold
        return None


def fill_record(
    record: Record, fields: Mapping[str, Any], data_key: str | None = None, label_key: str | None = None
) -> None:
    """Set ``record``'s payload and facts from its fields, or a `malformed-record` problem saying
    why they are not a language-model record."""
    ids_field = data_key if data_key is not None and data_key in fields else IDS
    if ids_field in fields and (data_key is None or not isinstance(fields[ids_field], str)):
        _tokens(record, fields, ids_field, label_key or LABELS)
        return
    for name in CHAT_FIELDS:
        if name in fields:
            _chat(record, fields[name], name)
            return
    if "prompt" in fields and "completion" in fields:
        parts = (("prompt", fields["prompt"], False), ("completion", fields["completion"], True))
        for role, text, _ in parts:
            if not isinstance(text, str):
                _malformed(record, f"{role} is {_kind(text)}, not a text")
                return
        record.payload, record.meta["kind"] = parts, "text"
        return
    for name in (data_key,) if data_key is not None else TEXT_FIELDS:
        if name in fields:
            text = fields[name]
            if not isinstance(text, str):
                _malformed(record, f"{name} is {_kind(text)}, not a text")
                return
            record.payload, record.meta["kind"] = (("text", text, True),), "text"
            return
    wanted = f"{data_key!r} (--data-key)" if data_key is not None else ", ".join(KNOWN)
    present = ", ".join(list(fields)[:6]) or "no field"
    _malformed(record, f"none of the fields a record is read by ({wanted}): it has {present}")


def _tokens(record: Record, fields: Mapping[str, Any], ids_field: str, labels_field: str) -> None:
    ids = token_array(fields[ids_field])
    if ids is None:
        _malformed(record, f"{ids_field} is {_kind(fields[ids_field])}, not a list of token ids")
        return
    record.payload, record.meta["kind"] = ids, "tokens"
    for name, fact in ((labels_field, "token_labels"), (ATTENTION, "attention_mask")):
        value = fields.get(name)
        if value is None:
            continue
        array = token_array(value)
        if array is None:
            _malformed(record, f"{name} is {_kind(value)}, not a list of integers")
            record.payload = None
            return
        record.meta[fact] = array  # type: ignore[literal-required]


def _chat(record: Record, messages: Any, name: str) -> None:
    if not isinstance(messages, list):
        _malformed(record, f"{name} is {_kind(messages)}, not a list of messages")
        return
    parts: list[tuple[str, str, bool]] = []
    for number, message in enumerate(messages, 1):
        role = message.get("role", message.get("from")) if isinstance(message, Mapping) else None
        content = message.get("content", message.get("value")) if isinstance(message, Mapping) else None
        if not isinstance(role, str) or not isinstance(content, str):
            _malformed(record, f"{name}[{number - 1}] is not a message with a role and a text content")
            return
        parts.append((role, content, role.lower() in SUPERVISED_ROLES))
    text: TextParts = tuple(parts)
    record.payload, record.meta["kind"] = text, "text"


def _malformed(record: Record, why: str) -> None:
    record.payload = None
    record.problems.append(problem(record, "malformed-record", why))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "a list of other values"
    return type(value).__name__
