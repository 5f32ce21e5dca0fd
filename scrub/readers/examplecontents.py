"""What a ``tf.Example``'s features hold, and how an Example becomes a record: the content
interpreter of the TFRecord container (`scrub.readers.tfrecord`, which frames records and checks
their CRCs; `scrub.readers.tfexample` decodes the message). An Example's features make the
record:

* the bytes feature ``--data-key`` names, else ``image/encoded`` (or ``image``, TFDS's name): an
  image record (its bytes are the encoded image: the image checks run);
* the int64 list ``--data-key`` names, else ``input_ids`` (with ``labels`` and
  ``attention_mask``), or a bytes ``text``: a token or text record
  (`scrub.readers.tokenfields.fill_record`);
* the float list ``--data-key`` names, else the first float list by name: an array record (the
  numeric checks);

and its class label is the int64 (or float, or UTF-8 number) feature ``--label-key``, else
``image/class/label``, else ``label``. Float lists other than the data are checked for NaN and
Inf (`nonfinite-data`, naming the feature). An Example with none of these is
`malformed-record`.
"""

from __future__ import annotations

from typing import Any

from scrub.checks.base import problem
from scrub.readers.images import parse_label
from scrub.readers.tfexample import Feature
from scrub.readers.tokenfields import IDS, TEXT_FIELDS, fill_record
from scrub.readers.values import nonfinite_beside, use_array
from scrub.records import Record

#: bytes features that hold an encoded image, in the order one is chosen
IMAGE_FEATURES = ("image/encoded", "image")
#: features that hold the class label, in the order one is chosen
LABEL_FEATURES = ("image/class/label", "label")


class ExampleContents:
    """How an Example becomes a record, given the feature ``--data-key`` names (``data_key``;
    None: the first of a known kind), the token labels' (``label_key``) and the class label's
    feature (``label_feature``; None: unlabelled). Small and picklable: it travels with its
    reader to the workers."""

    def __init__(self, data_key: str | None, label_key: str | None, label_feature: str | None) -> None:
        self.data_key, self.label_key, self.label_feature = data_key, label_key, label_feature

    def fill(self, record: Record, example: dict[str, Feature]) -> None:
        """The record's payload, label and side checks from its Example's features."""
        data = self._data_feature(example)
        if data is None:
            wanted = (
                f"{self.data_key!r} (--data-key)"
                if self.data_key
                else "image/encoded, image, input_ids, text or a float list"
            )
            present = ", ".join(list(example)[:6]) or "no feature"
            record.problems.append(
                problem(
                    record,
                    "malformed-record",
                    f"none of the features a record is read by ({wanted}): it has {present}",
                )
            )
        else:
            kind, values = example[data]
            if kind == "bytes" and data not in TEXT_FIELDS:
                if len(values) != 1:
                    record.problems.append(
                        problem(
                            record, "malformed-record", f"{data} holds {len(values)} byte strings, not one"
                        )
                    )
                else:
                    record.payload, record.meta["kind"] = values[0], "image"
            elif kind == "float":
                use_array(record, values)
            else:
                fill_record(record, example_fields(example), data_key=data, label_key=self.label_key)
        for name, (kind, values) in example.items():
            if kind == "float" and name != data and name != self.label_feature and values.size:
                nonfinite_beside(record, name, values, feature=name)
        if self.label_feature is not None:
            record.label = example_label(example.get(self.label_feature))

    def _data_feature(self, example: dict[str, Feature]) -> str | None:
        """The feature that is the record's data (see the module's docstring)."""
        if self.data_key is not None:
            return self.data_key if self.data_key in example else None
        for name in IMAGE_FEATURES:
            if example.get(name, ("",))[0] == "bytes":
                return name
        if example.get(IDS, ("",))[0] == "int64":
            return IDS
        for name in TEXT_FIELDS:
            if example.get(name, ("",))[0] == "bytes":
                return name
        floats = sorted(
            name for name, (kind, _) in example.items() if kind == "float" and name != self.label_feature
        )
        return floats[0] if floats else None


def example_fields(example: dict[str, Feature]) -> dict[str, Any]:
    """An Example's features as a record's fields, for `fill_record`: integer and float lists as
    arrays, a single UTF-8 byte string as text."""
    fields: dict[str, Any] = {}
    for name, (kind, values) in example.items():
        if kind == "bytes":
            if len(values) == 1:
                try:
                    fields[name] = values[0].decode("utf-8")
                except UnicodeDecodeError:
                    fields[name] = values[0]
            else:
                fields[name] = list(values)
        elif kind != "none":
            fields[name] = values
    return fields


def example_label(feature: Feature | None) -> int | float | str | None:
    """A label feature's value: one integer or float (a UTF-8 number parsed), None when the
    feature is absent or empty, the values as text when there are several (not a class id)."""
    if feature is None:
        return None
    kind, values = feature
    if kind == "none" or len(values) == 0:
        return None
    if len(values) > 1:  # not one class id: said by non-integer-label
        return " ".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values[:8])
    value = values[0]
    if kind == "bytes":
        return parse_label(value.decode("utf-8", "replace").strip())
    return int(value) if kind == "int64" else float(value)
