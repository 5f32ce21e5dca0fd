"""JSON Lines: files written with `json` (and `gzip`, `zstandard`), scanned and fixed; Hugging Face
``datasets.load_dataset("json")`` reads what fix wrote and finds exactly the kept records; every
planted defect is found by its check id on its line, numbered from 1 as editors number lines."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import one_line_error

import scrub
from scrub.manifest import read_manifest

VOCAB = 1000


def good(i: int) -> dict:
    """A clean record of one of the four kinds, by ``i``."""
    # the first two ids spell i: no two records are the same sequence (a `duplicate`)
    ids = [i % VOCAB, i // VOCAB % VOCAB] + [(7 * i + k) % VOCAB for k in range(3, 9)]
    return [
        {"text": f"Document {i}."},
        {"messages": [{"role": "user", "content": f"Q{i}?"}, {"role": "assistant", "content": f"A{i}."}]},
        {"prompt": f"P{i}:", "completion": f" C{i}"},
        {"input_ids": ids, "labels": [-100, -100] + ids[2:], "attention_mask": [1] * 8},
    ][i % 4]


#: line (from 1) -> (what is written there, the check it plants); None: a clean record
PLANTED: dict[int, tuple[str, str]] = {
    3: ('{"text": "cut off by a crash', "malformed-record"),
    5: (json.dumps({"prompt": "Say:", "completion": ""}), "empty-sequence"),
    8: (json.dumps({"input_ids": [1, 2, 3], "labels": [-100, -100, -100]}), "no-supervised-tokens"),
    11: (json.dumps({"input_ids": [1, VOCAB, 3]}), "token-out-of-range"),
    14: (
        json.dumps({"input_ids": [4, 5, 6], "labels": [4, 5, 6], "attention_mask": [0, 0, 0]}),
        "empty-attention",
    ),
    16: ("[1, 2, 3]", "malformed-record"),
    18: (json.dumps({"id": 7}), "malformed-record"),
}
BLANK = (6, 12)  # blank lines: no records, as datasets skips them
LINES = 20


def source_lines() -> list[str]:
    """Every line of the test file (without its newline): records, planted defects, blanks."""
    lines = []
    for number in range(1, LINES + 1):
        if number in BLANK:
            lines.append("" if number == 6 else "   \t")
        elif number in PLANTED:
            lines.append(PLANTED[number][0])
        else:
            lines.append(json.dumps(good(number)))
    return lines


def write_jsonl(path: Path, lines: list[str] | None = None, end: str = "\n") -> Path:
    text = "".join(line + end for line in (source_lines() if lines is None else lines)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb") as file:
            file.write(text)
    elif path.name.endswith(".zst"):
        zstandard = pytest.importorskip("zstandard")
        path.write_bytes(zstandard.ZstdCompressor().compress(text))
    else:
        path.write_bytes(text)
    return path


def found(result) -> set[tuple[str, str, int, str]]:
    return {(issue.source, issue.key, issue.index, issue.check) for issue in result.issues()}


def expected(source: str) -> set[tuple[str, str, int, str]]:
    return {(source, str(line), line - 1, check) for line, (_, check) in PLANTED.items()}


def load_json(files: str | list[str], cache: Path) -> list[dict]:
    """What ``datasets.load_dataset("json")`` reads from ``files``, as rows (without the columns
    a row lacks, which datasets fills with None)."""
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    loaded = datasets.load_dataset("json", data_files=files, split="train", cache_dir=str(cache))
    return [{name: value for name, value in row.items() if value is not None} for row in loaded]


def kept_rows(lines: list[str], dropped: set[int]) -> list[str]:
    """The records (as canonical JSON) of ``lines`` but those on ``dropped`` lines and blanks."""
    return [line for number, line in enumerate(lines, 1) if line.strip() and number not in dropped]


def test_every_planted_defect_is_found_on_its_line_counted_from_one(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl")
    result = scrub.scan(path, vocab_size=VOCAB, scheduler="sync")
    assert found(result) == expected("train.jsonl")
    assert result.summary.records == LINES - len(BLANK)
    assert result.summary.dataset.skipped == {"blank line": 2}
    messages = {issue.key: issue.message for issue in result.issues()}
    assert messages["3"].startswith("not JSON: Unterminated string")
    assert messages["16"] == "an array, not a JSON object"
    assert "none of the fields" in messages["18"]


@pytest.mark.slow
def test_the_cleaned_copy_loads_in_datasets_with_exactly_the_kept_records(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl")
    fixed = scrub.fix(path, quarantine=True, vocab_size=VOCAB, scheduler="sync")
    assert fixed.verified and fixed.clean == tmp_path / "train.clean.jsonl"
    bad = set(PLANTED)
    assert fixed.report["kept"] == LINES - len(BLANK) - len(bad)
    assert fixed.report["quarantined"] == len(bad)
    lines = source_lines()
    kept = kept_rows(lines, bad)
    assert load_json(str(fixed.clean), tmp_path / "hf") == [json.loads(line) for line in kept]
    # byte for byte: the source without the set-aside lines, blank lines where they were
    assert fixed.clean.read_text() == "".join(f"{line}\n" for n, line in enumerate(lines, 1) if n not in bad)
    held = (fixed.quarantine / "train.jsonl").read_text()
    assert held == "".join(f"{lines[n - 1]}\n" for n in sorted(bad))
    assert scrub.scan(fixed.clean, vocab_size=VOCAB, scheduler="sync").summary.records_with_errors == 0


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_a_compressed_file_is_read_and_written_compressed(tmp_path, suffix):
    path = write_jsonl(tmp_path / f"train{suffix}")
    result = scrub.scan(path, vocab_size=VOCAB, scheduler="sync")
    assert found(result) == expected(path.name)
    assert result.summary.dataset.files[path.name]["compression"] == (
        "gzip" if suffix.endswith("gz") else "zstd"
    )
    fixed = scrub.fix(path, quarantine=True, vocab_size=VOCAB, scheduler="sync")
    assert fixed.verified and fixed.clean.name == f"train.clean{suffix}"
    assert fixed.clean.read_bytes()[:2] == path.read_bytes()[:2]  # the same compression's magic
    kept = kept_rows(source_lines(), set(PLANTED))
    assert load_json(str(fixed.clean), tmp_path / "hf") == [json.loads(line) for line in kept]


@pytest.mark.slow
def test_a_folder_of_files_is_a_folder_of_cleaned_files(tmp_path):
    folder = tmp_path / "corpus"
    write_jsonl(folder / "data" / "train-0.jsonl")
    write_jsonl(folder / "data" / "train-1.jsonl.gz", [json.dumps(good(i)) for i in range(100, 106)])
    (folder / "README.md").write_text("# corpus\n")
    result = scrub.scan(folder, vocab_size=VOCAB, scheduler="sync")
    assert found(result) == expected("data/train-0.jsonl")
    assert result.summary.records == LINES - len(BLANK) + 6
    assert result.summary.dataset.skipped["not a JSON Lines file"] == 1
    fixed = scrub.fix(folder, quarantine=True, vocab_size=VOCAB, scheduler="sync")
    assert fixed.verified and fixed.clean == tmp_path / "corpus.clean"
    assert (fixed.clean / "README.md").read_text() == "# corpus\n"
    rows = load_json([str(fixed.clean / "data" / "train-0.jsonl")], tmp_path / "hf")
    assert len(rows) == LINES - len(BLANK) - len(PLANTED)
    assert len(load_json([str(fixed.clean / "data" / "train-1.jsonl.gz")], tmp_path / "hf2")) == 6
    assert sorted(p.name for p in (fixed.quarantine / "corpus" / "data").iterdir()) == ["train-0.jsonl"]


def test_partitions_keep_line_numbers_across_their_boundaries(tmp_path):
    """Many small partitions on processes, blank lines among them: every record keyed by its line."""
    lines = [json.dumps(good(i)) if i % 9 else "" for i in range(1, 2001)]
    bad = {37, 1000, 1999}
    for number in bad:
        lines[number - 1] = '{"text": '
    path = write_jsonl(tmp_path / "big.jsonl", lines)
    result = scrub.scan(path, partition_size=50, scheduler="processes", workers=2)
    assert found(result) == {("big.jsonl", str(n), n - 1, "malformed-record") for n in bad}
    assert result.summary.records == sum(1 for line in lines if line)
    from scrub.api import open_dataset
    from scrub.options.model import ScanOptions

    dataset = open_dataset(path, ScanOptions.build(partition_size=50))
    assert len(dataset.partitions) > 10
    keys = [key for p in dataset.partitions for _, key, _ in dataset.reader.locate(p, range(len(p)))]
    assert keys == [str(n) for n, line in enumerate(lines, 1) if line]


def test_a_truncated_final_line_is_a_malformed_record(tmp_path):
    lines = [json.dumps(good(i)) for i in range(4)]
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines) + '\n{"text": "the write stop')  # no newline, cut JSON
    result = scrub.scan(path, scheduler="sync")
    (issue,) = result.issues()
    assert (issue.key, issue.index, issue.check) == ("5", 4, "malformed-record")
    assert "the file ends inside this line" in issue.message
    fixed = scrub.fix(path, quarantine=True, scheduler="sync")
    assert fixed.verified
    assert (fixed.quarantine / "cut.jsonl").read_text() == '{"text": "the write stop'
    assert fixed.clean.read_text() == "\n".join(lines) + "\n"


def test_crlf_lines_and_text_that_is_not_utf8(tmp_path):
    path = tmp_path / "windows.jsonl"
    records = [json.dumps(good(i)).encode() for i in range(3)]
    path.write_bytes(
        b"\r\n".join([records[0], b'{"text": "caf\xe9"}', records[1], b"\r", records[2]]) + b"\r\n"
    )
    result = scrub.scan(path, scheduler="sync")
    assert found(result) == {("windows.jsonl", "2", 1, "malformed-record")}
    assert next(iter(result.issues())).message == "not JSON: not UTF-8 text"
    assert result.summary.records == 4
    fixed = scrub.fix(path, scheduler="sync")
    assert fixed.clean.read_bytes() == b"\r\n".join([records[0], records[1], b"\r", records[2]]) + b"\r\n"


def test_which_json_files_are_json_lines(tmp_path):
    from scrub.readers.jsonl import JsonLinesReader

    lines = write_jsonl(tmp_path / "lines.json", [json.dumps(good(i)) for i in range(3)])
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"images": [], "annotations": []}) + "\n")  # a single document
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps({"text": "a"}, indent=1) + "\n" + json.dumps({"text": "b"}, indent=1))
    assert JsonLinesReader.sniff(lines)
    assert not JsonLinesReader.sniff(one) and not JsonLinesReader.sniff(pretty)
    assert scrub.scan(lines, scheduler="sync").summary.dataset.format == "jsonl"
    # a JSON Lines record that mentions "images" (a multimodal chat) is not taken for COCO
    chats = write_jsonl(tmp_path / "chats.json", [json.dumps({"text": "x", "images": []})] * 2)
    assert scrub.scan(chats, scheduler="sync").summary.dataset.format == "jsonl"


@pytest.mark.parametrize("name", ["metadata.jsonl", "boxes.jsonl"])
def test_an_image_folder_with_a_jsonl_file_stays_an_image_folder(tmp_path, name):
    """Hugging Face ImageFolder's metadata.jsonl, or any annotations beside the images."""
    from conftest import image_bytes

    from scrub.readers.jsonl import JsonLinesReader

    folder = tmp_path / "imagefolder"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.jpg").write_bytes(image_bytes(i))
    write_jsonl(folder / name, [json.dumps({"file_name": f"{i}.jpg", "label": i}) for i in range(3)])
    assert not JsonLinesReader.sniff(folder)
    assert scrub.scan(folder, scheduler="sync").summary.dataset.format == "images"


@pytest.mark.slow
def test_the_command_line_exit_codes(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl")
    clean = write_jsonl(tmp_path / "clean.jsonl", [json.dumps(good(i)) for i in range(8)])

    def scan(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "scrub", "scan", str(path), "--vocab-size", str(VOCAB), "-q"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )

    assert scan(bad).returncode == 1
    assert scan(clean).returncode == 0, scan(clean).stderr
    assert "no such file" in one_line_error("scan", tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert "every line is blank" in one_line_error("scan", empty)


def test_a_zstd_file_without_zstandard_is_one_line_naming_the_extra(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl.zst", [json.dumps(good(i)) for i in range(3)])
    blocked = "import sys; sys.modules['zstandard'] = None; from scrub.__main__ import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", blocked, "scan", str(path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "pip install 'scrub[zstd]'" in done.stderr


def test_restore_puts_every_line_back_where_it_was(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl")
    fixed = scrub.fix(path, quarantine=True, vocab_size=VOCAB, scheduler="sync")
    held = {issue.key for issue in read_manifest(fixed.quarantine / "manifest.jsonl")}
    assert held == {str(line) for line in PLANTED}
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "restore", str(fixed.quarantine), "--key", "train.jsonl:11", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert '"input_ids": [1, 1000, 3]' in fixed.clean.read_text()  # line 11 is back, in its place
    assert fixed.clean.read_text().splitlines()[7] == source_lines()[11 - 1]  # 3, 5, 8 still out
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "restore", str(fixed.quarantine), "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert fixed.clean.read_bytes() == path.read_bytes()  # every line back where it was


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_a_compressed_file_cut_short_is_set_aside_whole_and_the_scan_goes_on(tmp_path, suffix):
    """A download that stopped: the lines before the damage are scanned, the file is named by a
    dataset-level malformed-record, fix copies it byte for byte into the quarantine."""
    folder = tmp_path / "shards"
    lines = [json.dumps(good(i)) for i in range(3000)]
    whole = write_jsonl(folder / f"a{suffix}", lines)
    cut = write_jsonl(folder / f"b{suffix}", lines)
    cut.write_bytes(cut.read_bytes()[: len(cut.read_bytes()) // 2])
    result = scrub.scan(folder, scheduler="sync")
    damaged = [issue for issue in result.issues() if issue.key == "*"]
    assert [(issue.source, issue.check) for issue in damaged] == [(cut.name, "malformed-record")]
    assert "damaged after line" in damaged[0].message
    read = result.summary.dataset.files[cut.name]["records"]
    assert read < 3000 and result.summary.records == 3000 + read  # zstd may hold back a cut block
    fixed = scrub.fix(folder, quarantine=True, scheduler="sync")
    assert fixed.verified and fixed.report["quarantined"] == read
    assert (fixed.quarantine / "shards" / cut.name).read_bytes() == cut.read_bytes()
    assert not (fixed.clean / cut.name).exists()
    assert (fixed.clean / whole.name).read_bytes()[:2] == whole.read_bytes()[:2]


def test_ids_that_are_not_all_integers_are_malformed(tmp_path):
    path = write_jsonl(
        tmp_path / "ids.jsonl",
        [
            json.dumps({"input_ids": [1, True]}),
            json.dumps({"input_ids": [1, 2.5]}),
            json.dumps({"input_ids": [1, 2]}),
        ],
    )
    result = scrub.scan(path, scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("1", "malformed-record"),
        ("2", "malformed-record"),
    }


@pytest.mark.slow
def test_a_lone_surrogate_is_malformed_record_on_its_line_and_the_scan_goes_on(tmp_path):
    """Python's ``json.loads`` reads a surrogate encoded in UTF-8 (bytes ED A0 80) or escaped
    (``\\ud800``); orjson and tokenizers refuse both: each is a finding on its line."""
    import orjson

    lines = [
        b'{"text": "hello"}',
        b'{"text": "a\xed\xa0\x80b"}',
        b'{"text": "c\\ud800d"}',
        b'{"text": "a smile \xf0\x9f\x98\x80"}',
        b'{"text": "fine"}',
    ]
    path = tmp_path / "chat.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for surrogate in lines[1:3]:
        assert json.loads(surrogate)  # what a json.loads loader passes ...
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(surrogate)  # ... and what breaks the next encoder
        with pytest.raises(UnicodeEncodeError):
            json.loads(surrogate)["text"].encode("utf-8")
    manifest = tmp_path / "chat.scrub.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(path), "--manifest", str(manifest)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    found = [issue for issue in read_manifest(manifest) if issue.key != "*"]
    assert [(issue.key, issue.check) for issue in found] == [(key, "malformed-record") for key in ("2", "3")]
    assert "not UTF-8 text: byte 11" in found[0].message and "lone surrogate" in found[1].message
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", str(path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0 and "verified" in done.stdout, done.stdout + done.stderr
    kept = (tmp_path / "chat.clean.jsonl").read_bytes().splitlines()
    assert kept == [lines[0], lines[3], lines[4]] and all(orjson.loads(line) for line in kept)
