"""TFRecord files: written by the ``tfrecord`` package (not scrub's code), scanned and fixed; that
package reads back what fix wrote (exactly the kept records); the cleaned files hold the kept
frames byte for byte. Planted faults found by id: a flipped byte in a payload or in a length, a
file cut short, a corrupt JPEG, a label out of range, a NaN; GZIP files, folders of shards,
patterns, restore, exit codes; the Example decoder against protobuf, the CRC fallback against
the C libraries."""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES, image_bytes, one_line_error

import scrub
from scrub.fixing.restoring import restore
from scrub.readers.tfexample import ExampleError, example_class, parse_example, serialize_example
from scrub.readers.tfframes import crc32c_python, frame, masked_crc

tfrecord = pytest.importorskip("tfrecord")
from tfrecord.reader import tfrecord_loader  # noqa: E402
from tfrecord.writer import TFRecordWriter  # noqa: E402

#: what each planted record of `write_file` should be found as (by its position)
BAD = {"1": "corrupt-image", "3": "label-out-of-range", "4": "nonfinite-data"}


def write_file(path: Path, count: int = 8, seed: int = 0, compress: bool = False) -> list[dict]:
    """A TFRecord file of image Examples written by the ``tfrecord`` package, with a truncated JPEG
    (record 1), a label out of range with --num-classes 3 (3) and a NaN box (4); returns what was
    written, record by record. ``compress``: gzip the file as TensorFlow's GZIP option does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = path.with_name(path.name + ".plain") if compress else path
    writer = TFRecordWriter(str(plain))
    written = []
    for n in range(count):
        image = image_bytes(seed * 100 + n, size=24)
        record = {
            "image/encoded": image[:60] if n == 1 else image,
            "image/class/label": 8000 if n == 3 else n % 3,
            "bbox": np.array([0.1, np.nan if n == 4 else 0.2, 0.5, 0.6], np.float32),
        }
        writer.write(
            {
                "image/encoded": (record["image/encoded"], "byte"),
                "image/class/label": (record["image/class/label"], "int"),
                "bbox": (record["bbox"], "float"),
            }
        )
        written.append(record)
    writer.close()
    if compress:
        path.write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    return written


def frames_of(data: bytes) -> list[bytes]:
    """The frames of an intact TFRecord byte string, split by their lengths (not scrub's code)."""
    frames, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        frames.append(data[offset : offset + 16 + length])
        offset += 16 + length
    return frames


def read_back(path: Path, compressed: bool = False) -> list[tuple[bytes, int]]:
    """(image bytes, label) of every record, as the ``tfrecord`` package reads them."""
    loaded = tfrecord_loader(str(path), None, compression_type="gzip" if compressed else None)
    return [(bytes(r["image/encoded"]), int(r["image/class/label"][0])) for r in loaded]


def errors(result) -> set[tuple[str, str]]:
    return {(issue.key, issue.check) for issue in result.issues() if issue.severity.value == "error"}


def test_scan_and_fix_a_file_written_by_the_tfrecord_package(tmp_path):
    source = tmp_path / "train.tfrecord"
    written = write_file(source)
    result = scrub.scan(source, num_classes=3, scheduler="processes", workers=2, partition_size=3)
    assert errors(result) == set(BAD.items())
    assert result.summary.records == 8 and result.summary.dataset.format == "tfrecord"
    assert result.summary.dataset.labelled
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.report["kept"] == 5 and fixed.report["quarantined"] == 3
    assert fixed.clean.name == "train.clean.tfrecord"
    kept = [n for n in range(8) if str(n) not in BAD]
    assert read_back(fixed.clean) == [
        (written[n]["image/encoded"], written[n]["image/class/label"]) for n in kept
    ]
    frames = frames_of(source.read_bytes())
    assert fixed.clean.read_bytes() == b"".join(frames[n] for n in kept)  # byte-identical frames
    quarantined = fixed.quarantine / "train.tfrecord"
    assert quarantined.read_bytes() == b"".join(frames[int(key)] for key in sorted(BAD))
    assert source.read_bytes() == b"".join(frames)  # the source is untouched


def test_a_flipped_byte_in_a_payload_fails_its_crc_and_the_scan_goes_on(tmp_path):
    source = tmp_path / "train.tfrecord"
    write_file(source)
    frames = frames_of(source.read_bytes())
    damaged = bytearray(frames[2])
    damaged[12 + 30] ^= 0x01  # a byte of record 2's data
    frames[2] = bytes(damaged)
    source.write_bytes(b"".join(frames))
    result = scrub.scan(source, num_classes=3, scheduler="sync")
    assert errors(result) == set(BAD.items()) | {("2", "record-crc-mismatch")}
    [issue] = [i for i in result.issues() if i.check == "record-crc-mismatch"]
    assert issue.details["part"] == "data" and issue.details["offset"] == len(frames[0]) + len(frames[1])
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.report["kept"] == 4
    assert len(read_back(fixed.clean)) == 4  # the package reads it (it does not check CRCs)


def test_a_flipped_byte_in_a_length_ends_the_framing_there(tmp_path):
    source = tmp_path / "train.tfrecord"
    write_file(source)
    data = bytearray(source.read_bytes())
    frames = frames_of(bytes(data))
    at = sum(len(f) for f in frames[:6])
    data[at + 1] ^= 0x40  # record 6's length (its CRC no longer matches)
    source.write_bytes(bytes(data))
    result = scrub.scan(source, num_classes=3, scheduler="sync", partition_size=2)
    assert errors(result) == set(BAD.items()) | {("6", "record-crc-mismatch")}
    assert result.summary.records == 7  # 0..5, then 6: the rest of the file
    [issue] = [i for i in result.issues() if i.check == "record-crc-mismatch"]
    assert issue.details["part"] == "length" and issue.details["offset"] == at
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.report["kept"] == 3 and fixed.report["quarantined"] == 4
    assert fixed.clean.read_bytes() == b"".join(frames[n] for n in (0, 2, 5))
    assert (fixed.quarantine / "train.tfrecord").read_bytes() == b"".join(
        frames[n] for n in (1, 3, 4)
    ) + bytes(data[at:])


@pytest.mark.parametrize("cut", [5, 200])  # inside the last header; inside the last record's data
def test_a_file_cut_short_is_a_truncated_record_keyed_by_its_position(tmp_path, cut):
    source = tmp_path / "train.tfrecord"
    write_file(source)
    data = source.read_bytes()
    frames = frames_of(data)
    kept = len(data) - len(frames[-1])
    source.write_bytes(data[: kept + cut] if cut < 16 else data[: len(data) - cut])
    with pytest.raises(RuntimeError):  # the package's own reader fails on it
        list(tfrecord_loader(str(source), None))
    result = scrub.scan(source, num_classes=3, scheduler="sync")
    assert errors(result) == set(BAD.items()) | {("7", "truncated-record")}
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.report["kept"] == 4
    assert len(read_back(fixed.clean)) == 4  # the cleaned copy reads to its end


def test_gzip_files_are_read_by_their_magic_and_written_compressed(tmp_path):
    source = tmp_path / "train.tfrecord"  # named as a plain one: only its bytes say gzip
    written = write_file(source, compress=True)
    assert source.read_bytes()[:2] == b"\x1f\x8b"
    result = scrub.scan(source, num_classes=3, scheduler="sync")
    assert errors(result) == set(BAD.items())
    assert result.summary.dataset.files["train.tfrecord"]["compressed"]
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.clean.read_bytes()[:2] == b"\x1f\x8b"
    kept = [n for n in range(8) if str(n) not in BAD]
    assert read_back(fixed.clean, compressed=True) == [
        (written[n]["image/encoded"], written[n]["image/class/label"]) for n in kept
    ]
    assert gzip.decompress(fixed.clean.read_bytes()) == b"".join(
        frames_of(gzip.decompress(source.read_bytes()))[n] for n in kept
    )


def test_a_gzip_file_cut_short(tmp_path):
    source = tmp_path / "train.tfrecord.gz"
    write_file(source, compress=True)
    data = source.read_bytes()
    source.write_bytes(data[: len(data) - 300])
    result = scrub.scan(source, num_classes=3, scheduler="sync")
    found = errors(result)
    cut = [key for key, check in found if check == "truncated-record"]
    assert len(cut) == 1 and found - {(cut[0], "truncated-record")} <= set(BAD.items())
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.clean.name == "train.clean.tfrecord.gz"
    assert len(read_back(fixed.clean, compressed=True)) == fixed.report["kept"]


def test_a_folder_of_shards_and_patterns(tmp_path):
    folder = tmp_path / "mnist" / "3.0.1"
    for shard in range(2):
        write_file(folder / f"mnist-train.tfrecord-{shard:05d}-of-00002", seed=shard)
    write_file(folder / "bare-00000-of-00001", seed=5)  # a shard name without an extension
    (folder / "dataset_info.json").write_text("{}")
    (folder / "notes-00000-of-00001").write_bytes(b"not a TFRecord file at all")
    result = scrub.scan(folder, num_classes=3, scheduler="sync")
    sources = [
        "bare-00000-of-00001",
        "mnist-train.tfrecord-00000-of-00002",
        "mnist-train.tfrecord-00001-of-00002",
    ]
    assert sorted(result.summary.dataset.files) == sources
    assert errors(result) == set(BAD.items())  # keys repeat across files: one per (key, check)
    assert len([i for i in result.issues() if i.severity.value == "error"]) == 9
    fixed = scrub.fix(folder, quarantine=True, num_classes=3)
    assert fixed.verified and fixed.report["kept"] == 15
    assert sorted(p.name for p in fixed.clean.iterdir()) == sources
    for name in sources:
        assert len(read_back(fixed.clean / name)) == 5
    pattern = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(folder / "mnist-train.tfrecord-{00000..00001}-of-00002")],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(Path(scrub.__file__).parent.parent)},
        cwd=tmp_path,
    )
    assert pattern.returncode == 1, pattern.stderr  # without --num-classes: the JPEG and the NaN
    assert "mnist-train.tfrecord-00001-of-00002" in pattern.stdout
    globbed = scrub.scan(str(folder / "*-of-*"), num_classes=3, scheduler="sync")
    assert globbed.summary.records == 24  # the three TFRecord files; the text file is no dataset


def test_restore_puts_every_record_back_byte_for_byte(tmp_path):
    source = tmp_path / "train.tfrecord"
    write_file(source)
    fixed = scrub.fix(source, quarantine=True, num_classes=3)
    restored = restore(fixed.quarantine, keys=["3"])
    assert restored.verified and restored.report["kept"] == 6
    restored = restore(fixed.quarantine)
    assert restored.verified and restored.report["kept"] == 8
    assert fixed.clean.read_bytes() == source.read_bytes()


def test_a_record_that_is_not_an_example_is_malformed_and_the_scan_goes_on(tmp_path):
    source = tmp_path / "train.tfrecord"
    write_file(source)
    frames = frames_of(source.read_bytes())
    frames[5] = frame(b"\x0a\x05\x0a\x03abc\x0a\xff")  # a field that runs past the message's end
    frames.insert(6, frame(serialize_example({"other": ("int64", [1])})))  # nothing to train on
    source.write_bytes(b"".join(frames))
    result = scrub.scan(source, num_classes=3, scheduler="sync")
    assert errors(result) == set(BAD.items()) | {
        ("5", "malformed-record"),
        ("6", "malformed-record"),
        ("6", "missing-label"),  # an Example without the label feature the others have
    }
    assert result.summary.records == 9


def tokens_file(path: Path) -> None:
    writer = TFRecordWriter(str(path))
    for n in range(6):
        ids = [5, 6, 7] if n != 2 else [5, 70000, 7]
        writer.write(
            {"input_ids": (ids, "int"), "attention_mask": ([1, 1, 1] if n != 4 else [0, 0, 0], "int")}
        )
    writer.close()


def test_input_ids_are_token_records(tmp_path):
    source = tmp_path / "tokens.tfrecord"
    tokens_file(source)
    result = scrub.scan(source, vocab_size=1000, scheduler="sync")
    assert errors(result) == {("2", "token-out-of-range"), ("4", "empty-attention")}
    assert not result.summary.dataset.labelled


def test_float_lists_are_array_records_and_the_label_key_is_followed(tmp_path):
    source = tmp_path / "features.tfrecords"
    writer = TFRecordWriter(str(source))
    for n in range(6):
        x = np.full(8, 0.5, np.float32)
        if n == 1:
            x[3] = np.inf
        writer.write({"x": (x, "float"), "y": (n if n != 4 else 9, "int")})
    writer.close()
    result = scrub.scan(source, label_key="y", num_classes=6, scheduler="sync")
    assert errors(result) == {("1", "nonfinite-data"), ("4", "label-out-of-range")}
    assert one_line_error("scan", source, "--data-key", "nope").endswith(
        "--data-key nope: no record of the first 6 of " + str(source) + " has it (features: x, y)\n"
    )


@pytest.mark.slow
def test_exit_codes(tmp_path):
    clean, dirty = tmp_path / "clean.tfrecord", tmp_path / "dirty.tfrecord"
    write_file(clean, count=1)
    write_file(dirty)
    env = os.environ | {"PYTHONPATH": str(Path(scrub.__file__).parent.parent)}

    def run(*arguments: object) -> int:
        command = [sys.executable, "-m", "scrub", *map(str, arguments)]
        return subprocess.run(command, capture_output=True, env=env, cwd=tmp_path).returncode

    assert run("scan", clean, "--num-classes", "3") == 0
    assert run("scan", dirty, "--num-classes", "3") == 1
    assert run("fix", dirty, "--num-classes", "3") == 0
    assert "no TFRecord files" in one_line_error("scan", SAMPLES / "images", "--format", "tfrecord")


def test_the_sample_finds_every_planted_problem_and_nothing_else():
    result = scrub.scan(SAMPLES / "tfrecord", num_classes=10, scheduler="sync")
    first, second = "train.tfrecord-00000-of-00002", "train.tfrecord-00001-of-00002"
    assert {(i.source, i.key, i.check) for i in result.issues()} == {
        (first, "1", "corrupt-image"),
        (first, "2", "corrupt-image"),
        (first, "3", "label-out-of-range"),
        (first, "4", "nonfinite-data"),
        (second, "1", "malformed-record"),
        (second, "2", "record-crc-mismatch"),
        (second, "5", "truncated-record"),
    }
    assert result.summary.records == 12


# --- the decoder and the CRC, against other implementations ---------------------------------


def protobuf_features(data: bytes, message_class) -> dict[str, tuple[str, list]]:
    example = message_class()
    example.ParseFromString(data)
    found = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind is None:
            found[name] = ("none", None)
        else:
            found[name] = (kind.split("_")[0], list(getattr(feature, kind).value))
    return found


def ours(data: bytes) -> dict[str, tuple[str, list]]:
    return {
        name: (
            kind,
            None if values is None else [bytes(v) for v in values] if kind == "bytes" else values.tolist(),
        )
        for name, (kind, values) in parse_example(data).items()
    }


def random_example(rng: np.random.Generator) -> bytes:
    features = {}
    for number in range(int(rng.integers(0, 6))):
        kind = ["bytes", "float", "int64"][int(rng.integers(0, 3))]
        size = int(rng.integers(0, 20))
        if kind == "bytes":
            values = [rng.bytes(int(rng.integers(0, 30))) for _ in range(size)]
        elif kind == "float":
            values = rng.normal(0, 1e6, size).astype(np.float32).tolist()
        else:
            values = [int(v) for v in rng.integers(-(2**63), 2**63 - 1, size, dtype=np.int64)]
            values += [0, 1, 127, 128, -1, 300][: int(rng.integers(0, 7))]
        features[f"feature/{number}"] = (kind, values)
    return serialize_example(features)


def test_the_decoder_agrees_with_protobuf_on_examples_and_their_truncations():
    from tfrecord import example_pb2

    rng = np.random.default_rng(7)
    for _ in range(200):
        data = random_example(rng)
        assert (
            ours(data)
            == protobuf_features(data, example_pb2.Example)
            == protobuf_features(data, example_class())
        )
        for cut in sorted(set(rng.integers(0, len(data) + 1, 5).tolist())):
            try:
                expected = protobuf_features(data[:cut], example_pb2.Example)
            except Exception:  # protobuf's DecodeError
                expected = None
            try:
                found = ours(data[:cut])
            except ExampleError:
                found = None
            assert found == expected, (data, cut)


def test_the_decoder_takes_what_protobuf_takes_beyond_what_writers_write():
    from tfrecord import example_pb2

    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    unpacked_floats = field(2, b"".join(b"\x0d" + struct.pack("<f", v) for v in (1.5, -2.0)))
    unpacked_ints = field(3, b"\x08\x05\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
    twice = field(1, field(1, b"one")) + field(1, field(1, b"two"))  # a Feature twice: merged
    cases = [
        field(1, field(1, field(1, b"a") + field(2, unpacked_floats))),
        field(1, field(1, field(1, b"b") + field(2, unpacked_ints))),
        field(1, field(1, field(1, b"c") + field(2, twice))),
        field(1, field(1, field(1, b"d") + field(2, field(1, field(1, b"x")) + field(3, b"\x0a\x01\x07")))),
        field(1, field(1, field(1, b"e")))
        + field(1, field(1, field(1, b"e") + field(2, field(3, b"\x0a\x01\x02")))),
        field(1, field(1, field(1, b"\xff\xfe"))),  # a name that is not UTF-8
        b"\x10\x05" + field(1, field(1, field(1, b"f"))),  # an unknown field of Example
    ]
    for data in cases:
        try:
            expected = protobuf_features(data, example_pb2.Example)
        except Exception:
            expected = None
        try:
            found = ours(data)
        except ExampleError:
            found = None
        assert found == expected, data


def test_the_pure_python_crc_agrees_with_the_c_libraries():
    google_crc32c = pytest.importorskip("google_crc32c")
    crc32c = pytest.importorskip("crc32c")
    rng = np.random.default_rng(3)
    assert crc32c_python(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    for size in [0, 1, 7, 8, 9, 63, 64, 1000, 4097]:
        data = rng.bytes(size)
        assert crc32c_python(data) == google_crc32c.value(data) == crc32c.crc32c(data)
    length = struct.pack("<Q", 1234)
    assert masked_crc(length) == struct.unpack("<I", TFRecordWriter.masked_crc(length))[0]
