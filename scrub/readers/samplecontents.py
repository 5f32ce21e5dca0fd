"""What a sample's members hold, by their extensions, and how a sample becomes a record: the
content interpreter (WebDataset's ``decode`` stage) of containers whose samples are members named
``KEY.EXTENSION`` (`scrub.readers.webdataset`'s tar shards, grouped by key), which walk and group
and know nothing of what the members hold. A sample's record is its key, its data (the member
``--data-key`` names, else the first of these) and its label (``.cls`` and the other class-id
extensions, ``.txt`` when every sampled one is an integer, or ``--label-key``):

* an image member: an image record;
* a ``.npy`` member: an array record;
* a ``.json`` or msgpack (``.mp``, ``.msgpack``, ``.msg``) object with a language model's fields
  (``input_ids``, ``messages``, ``prompt``/``completion``, ``text``: read by
  `scrub.readers.tokenfields.fill_record`): a token or text record;
* a ``.ten`` (``.tenbin``, ``.tb``) member (WebDataset's tenbin, `decode_tenbin`): its first
  integer array is the input ids of a token record (an array named ``labels`` is their labels,
  one named ``attn`` or ``mask`` their attention mask); without an integer array its first array
  is an array record;
* a ``.txt`` (``.text``, ``.transcript``) member that is not the label: a text record (UTF-8, as
  WebDataset decodes it);
* a ``.json`` or msgpack value of numbers (an object of numbers, a list of them): an array
  record of those numbers. Another object is metadata (a URL, a source): a sample with nothing
  else is ``malformed-sample``, as one with no member to train on (named by ``--data-key``:
  ``malformed-record``, naming its fields).

A member compressed with gzip (``.txt.gz``, as WebDataset decompresses it) is read as the member
it holds. A sample's other ``.npy``, ``.json``, msgpack and ``.ten`` members are checked to load.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from scrub.checks.base import problem
from scrub.checks.images import EXTENSION_FORMATS
from scrub.errors import UsageError
from scrub.readers.base import DatasetInfo
from scrub.readers.images import parse_label
from scrub.readers.tarwalk import Member
from scrub.readers.tokenfields import KNOWN, fill_record
from scrub.readers.values import decode_value, nonfinite_beside, use_array
from scrub.records import Record
from scrub.wording import counted

IMAGE_SUFFIXES = frozenset(extension.lstrip(".") for extension in EXTENSION_FORMATS)
#: extensions that hold a class id, in the order one is chosen (WebDataset decodes them as int)
LABEL_SUFFIXES = ("cls", "cls2", "class", "label", "target")
JSON_SUFFIXES = frozenset({"json", "jsn"})
MSGPACK_SUFFIXES = frozenset({"mp", "msgpack", "msg"})
TEXT_SUFFIXES = frozenset({"txt", "text", "transcript"})
#: WebDataset's extensions of tenbin members
TENBIN_SUFFIXES = frozenset({"ten", "tenbin", "tb"})
#: a gzip member decompresses to at most this much (a small bomb is not read whole)
GZIP_LIMIT = 1 << 28


def choose_label_suffix(
    given: str | None, suffixes: dict[str, int], texts: list[bytes], info: DatasetInfo, path: Any
) -> str | None:
    """The extension of a sample's label member: ``--label-key``'s (``given``, which some sample
    of the dataset at ``path`` must hold), else the first class-id extension the samples hold
    (``suffixes``: extension -> samples holding it), else ``.txt`` when every sampled text is an
    integer; said in ``info``'s notes."""
    if given is not None:
        if given.lower() not in suffixes:
            known = ", ".join(sorted(suffixes)) or "none"
            raise UsageError(f"--label-key {given}: no sample of {path} has it (extensions: {known})")
        return given.lower()
    chosen = next((suffix for suffix in LABEL_SUFFIXES if suffix in suffixes), None)
    if chosen is not None:
        return chosen
    if texts and all(isinstance(parse_label(text_of(t)), int) for t in texts):
        info.notes.append("labels read from the .txt members (every one sampled is an integer)")
        return "txt"
    if texts:
        info.notes.append(
            "the .txt members are text (captions), not class ids: no labels are checked "
            "(--label-key names a label member)"
        )
    else:
        info.notes.append("no .cls (or other class-id) member: no labels are checked")
    return None


class SampleContents:
    """How a sample's members become a record, given which extension is the data (``data_key``;
    None: the first member of a known kind) and which the label (``label_suffix``; None:
    unlabelled). Small and picklable: it travels with its reader to the workers."""

    def __init__(self, data_key: str | None, label_suffix: str | None) -> None:
        self.data_key, self.label_suffix = data_key, label_suffix

    def fill(self, record: Record, members: Sequence[tuple[str, Member]], seen: set[str]) -> None:
        """Read a sample's members (extension, member) into ``record``: its data member's payload,
        its label, and whether its other members load; what goes wrong, as the record's problems.
        ``seen``: the extensions the sample holds. Members cut short are left out."""
        data_suffix = self.data_key.lower() if self.data_key else None
        if data_suffix is None:
            data_suffix = self._data_suffix(members, seen)
        data = _get(members, data_suffix) if data_suffix is not None else None
        if data is None:
            wanted = f".{data_suffix}" if self.data_key else "image, .npy, text, .json, .mp or .ten"
            record.problems.append(
                problem(
                    record,
                    "malformed-sample",
                    f"no {wanted} member (has {', '.join('.' + s for s in sorted(seen)) or 'none'})",
                    extensions=sorted(seen),
                )
            )
        elif not data.cut:
            assert data.data is not None and data_suffix is not None
            record.meta["name"] = data.name
            self._read_data(record, data_suffix, data)
        for suffix, member in members:
            if member is not data and not member.cut:
                self._check_member(record, suffix, member)
        record.meta["label_known"] = self.label_suffix is not None
        label = _get(members, self.label_suffix) if self.label_suffix else None
        if label is not None and not label.cut:
            assert label.data is not None
            record.label = parse_label(text_of(label.data))

    def _data_suffix(self, members: Sequence[tuple[str, Member]], seen: set[str]) -> str | None:
        """The extension of the member that is a sample's data (see the module's docstring)."""
        lasts = [(suffix, _inner(suffix)) for suffix, _ in members if suffix != self.label_suffix]
        for suffix, last in lasts:
            if last.rsplit(".", 1)[-1] in IMAGE_SUFFIXES:
                return suffix
        if "npy" in seen:
            return "npy"
        values: dict[str, Any] = {}
        for suffix, last in lasts:
            member = _get(members, suffix)
            if (last in JSON_SUFFIXES or last in MSGPACK_SUFFIXES) and member is not None and member.data:
                try:
                    value = values[suffix] = _decoded(last, member.data)
                except ValueError:
                    continue  # said where it is checked
                if isinstance(value, dict) and any(name in value for name in KNOWN):
                    return suffix
        for wanted in (TENBIN_SUFFIXES, TEXT_SUFFIXES):
            found = next((suffix for suffix, last in lasts if last in wanted), None)
            if found is not None:
                return found
        # numbers are data (WebDataset's mpdata.tar); another object is metadata (a URL, a source)
        return next((suffix for suffix, value in values.items() if _numbers(value) is not None), None)

    def _read_data(self, record: Record, suffix: str, member: Member) -> None:
        """Set the record's payload from its data member (see the module's docstring)."""
        assert member.data is not None
        data = member.data
        last = _inner(suffix)
        if last != suffix:  # a gzip member: the member it holds
            try:
                data = _gunzip(data)
            except ValueError as error:
                record.problems.append(problem(record, "malformed-sample", f"{member.name}: {error}"))
                return
        if last.rsplit(".", 1)[-1] in IMAGE_SUFFIXES:
            record.payload, record.meta["kind"] = data, "image"
        elif last == "npy":
            decode_value(record, data, "npy", False)
        elif last in TEXT_SUFFIXES:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as error:
                record.problems.append(
                    problem(record, "malformed-record", f"{member.name} is not UTF-8 text: {error.reason}")
                )
                return
            record.payload, record.meta["kind"] = (("text", text, True),), "text"
        elif last in TENBIN_SUFFIXES:
            try:
                arrays = decode_tenbin(data)
            except ValueError as error:
                record.problems.append(problem(record, "malformed-sample", f"{member.name}: {error}"))
                return
            _use_tensors(record, arrays, member.name)
        elif last in JSON_SUFFIXES or last in MSGPACK_SUFFIXES:
            try:
                value = _decoded(last, data)
            except ValueError as error:
                record.problems.append(problem(record, "malformed-sample", f"{member.name}: {error}"))
                return
            numbers = _numbers(value)
            if numbers is not None:
                use_array(record, numbers)
            elif isinstance(value, dict):
                fill_record(record, value)
            else:
                record.problems.append(
                    problem(
                        record,
                        "malformed-record",
                        f"{member.name} holds {type(value).__name__}, not an object",
                    )
                )
        else:  # a member --data-key names, of no known kind: its bytes (as images are read)
            record.payload, record.meta["kind"] = data, "image"

    def _check_member(self, record: Record, suffix: str, member: Member) -> None:
        """A sample's ``.json``, msgpack, ``.ten`` and other ``.npy`` members must load."""
        assert member.data is not None
        last = suffix.rsplit(".", 1)[-1]
        if last in JSON_SUFFIXES or last in MSGPACK_SUFFIXES or last in TENBIN_SUFFIXES:
            try:
                decode_tenbin(member.data) if last in TENBIN_SUFFIXES else _decoded(last, member.data)
            except ValueError as error:
                record.problems.append(
                    problem(
                        record,
                        "malformed-sample",
                        f"{member.name} does not load: {error}",
                        member=member.name,
                    )
                )
        elif last == "npy":
            side = Record(record.source, record.key, record.index, None)
            decode_value(side, member.data, "npy", False)
            for found in side.problems:
                found.check = "malformed-sample"
                found.message = f"{member.name}: {found.message}"
                record.problems.append(found)
            values = side.payload
            if isinstance(values, np.ndarray) and values.dtype.kind in "fc":
                nonfinite_beside(record, member.name, values, member=member.name)


def _get(members: Sequence[tuple[str, Member]], extension: str) -> Member | None:
    """A sample's first member of ``extension``."""
    return next((member for suffix, member in members if suffix == extension), None)


#: tenbin's dtype codes (webdataset.tenbin's ``long_to_short``; its ``u4`` is NumPy's uint32)
TENBIN_DTYPES = frozenset({"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"})
TENBIN_MAGIC = b"~TenBin~"


def decode_tenbin(data: bytes) -> list[tuple[str, np.ndarray]]:
    """The (name, array) pairs of a ``.ten`` member, by WebDataset's tenbin layout: chunks of
    ``~TenBin~``, an int64 length and that many bytes padded to a multiple of 64, in pairs of a
    header chunk (int64s: the dtype code as 8 ASCII bytes, the name as 8 ASCII bytes, the rank,
    the dimensions) and a data chunk. Little-endian, as every machine WebDataset runs on writes
    it. ValueError saying what is wrong."""
    chunks: list[bytes] = []
    offset = 0
    while offset < len(data):
        if data[offset : offset + 8] != TENBIN_MAGIC:
            raise ValueError(f"no tenbin chunk at byte {offset} (magic {data[offset : offset + 8]!r})")
        if offset + 16 > len(data):
            raise ValueError(f"tenbin chunk at byte {offset} is cut short")
        size = int.from_bytes(data[offset + 8 : offset + 16], "little", signed=True)
        if size < 0 or offset + 16 + size > len(data):
            raise ValueError(
                f"tenbin chunk at byte {offset} claims {size} bytes, {len(data) - offset - 16} follow"
            )
        chunks.append(data[offset + 16 : offset + 16 + size])
        offset += 16 + -(-size // 64) * 64
    if len(chunks) % 2:
        raise ValueError(f"{counted(len(chunks), 'tenbin chunk')}: a header without its data")
    arrays = []
    for header, values in zip(chunks[::2], chunks[1::2]):
        if len(header) < 24 or len(header) % 8:
            raise ValueError(f"a tenbin header of {len(header)} bytes")
        code = header[:8].rstrip(b"\0").decode("ascii", errors="replace")
        name = header[8:16].rstrip(b"\0").decode("ascii", errors="replace")
        numbers = np.frombuffer(header, dtype="<i8")
        rank = int(numbers[2])
        if code not in TENBIN_DTYPES:
            raise ValueError(f"tenbin dtype {code!r} is not one tenbin writes")
        if not 0 <= rank < 10 or len(numbers) < 3 + rank or (numbers[3 : 3 + rank] < 0).any():
            raise ValueError(f"a tenbin header of rank {rank} with dimensions {numbers[3:].tolist()}")
        shape = tuple(int(n) for n in numbers[3 : 3 + rank])
        dtype = np.dtype("<" + code)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize > len(values):
            raise ValueError(
                f"tenbin array {name!r} of shape {shape} needs {count * dtype.itemsize} bytes, "
                f"has {len(values)}"
            )
        arrays.append((name, np.frombuffer(values, dtype=dtype, count=count).reshape(shape)))
    return arrays


def _use_tensors(record: Record, arrays: list[tuple[str, np.ndarray]], name: str) -> None:
    """A ``.ten`` member's arrays as a record: the first integer array not named as labels or a
    mask is the input ids (see the module's docstring), else the first array is an array record."""
    labels = next((a for n, a in arrays if n == "labels" and a.dtype.kind in "iu"), None)
    mask = next(
        (a for n, a in arrays if n.startswith(("attn", "attentio", "mask")) and a.dtype.kind in "iu"), None
    )
    ids = next((a for n, a in arrays if a.dtype.kind in "iu" and a is not labels and a is not mask), None)
    if ids is not None:
        record.payload, record.meta["kind"] = ids.ravel(), "tokens"
        if labels is not None:
            record.meta["token_labels"] = labels.ravel()
        if mask is not None:
            record.meta["attention_mask"] = mask.ravel()
    elif arrays:
        use_array(record, arrays[0][1])
    else:
        record.problems.append(problem(record, "malformed-sample", f"{name} holds no array"))


def _inner(suffix: str) -> str:
    """The extension of the member a gzip member holds (``txt.gz`` -> ``txt``), else ``suffix``."""
    return suffix[:-3] if suffix.endswith(".gz") else suffix


def _gunzip(data: bytes) -> bytes:
    """A gzip member's content, at most `GZIP_LIMIT` bytes; ValueError saying why not."""
    inflater = zlib.decompressobj(wbits=47)  # gzip or zlib headers
    try:
        out = inflater.decompress(data, GZIP_LIMIT)
    except zlib.error as error:
        raise ValueError(f"does not decompress: {error}") from None
    if inflater.unconsumed_tail:
        raise ValueError(f"decompresses to more than {GZIP_LIMIT} bytes")
    return out


def _decoded(suffix: str, data: bytes) -> Any:
    """A ``.json`` or msgpack member's value; ValueError saying why it does not load."""
    if suffix in JSON_SUFFIXES:
        try:
            return json.loads(data)
        except ValueError as error:
            raise ValueError(f"not JSON: {error}") from None
    try:
        import msgpack
    except ImportError:
        raise ValueError("msgpack is not installed: pip install msgpack") from None
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise ValueError(f"not msgpack: {error}") from None


def _numbers(value: Any) -> np.ndarray | None:
    """An object of numbers or a list of them as a float64 row (WebDataset's numeric ``.mp``
    samples), else None."""
    items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else None
    if not items or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return None
    if isinstance(value, list) and all(isinstance(v, int) for v in items):
        return None  # a bare list of integers: read as a record's fields cannot name it
    try:
        return np.asarray(items, dtype=np.float64)
    except OverflowError:
        return None


def text_of(data: bytes) -> str:
    """A member's bytes as text (UTF-8, bad bytes replaced), stripped: a label's or a caption's."""
    return data.decode("utf-8", errors="replace").strip()
