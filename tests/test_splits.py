"""A run's splits: a record of an evaluation split that is also in a training split is a
`split-leak` error naming both, in every format whose records carry content; `fix` of the
splits removes it from the evaluation split, which then rescans clean."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES
from PIL import Image, ImageEnhance

import scrub
from scrub.checks.splits import pack_identities
from scrub.paths import EVALUATION, TRAINING, split_of, split_roles


def photos(folder: Path, count: int, seed: int) -> list[Path]:
    """``count`` distinct noisy JPEGs in two class folders."""
    rng = np.random.default_rng(seed)
    made = []
    for number in range(count):
        path = folder / ("cat" if number % 2 else "dog") / f"{seed}-{number:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(path, quality=90)
        made.append(path)
    return made


@pytest.fixture
def splits(tmp_path: Path) -> Path:
    """data/train, data/val, data/test: two training images copied into val and test (under other
    names), and a copy inside train itself (a duplicate, not a leak)."""
    data = tmp_path / "data"
    train = photos(data / "train", 20, 1)
    photos(data / "val", 6, 2)
    photos(data / "test", 6, 3)
    shutil.copy(train[3], data / "val" / "cat" / "renamed.jpg")
    shutil.copy(train[8], data / "test" / "dog" / "copy-of-8.jpg")
    shutil.copy(train[5], data / "train" / "cat" / "twice.jpg")
    return data


def leaks(result) -> dict[tuple[str, str], dict]:
    return {(Path(i.dataset).name, i.key): i.details for i in result.issues() if i.check == "split-leak"}


def test_split_names():
    assert [split_of(name) for name in ("train", "training", "val", "validation", "test.h5", "dev")] == [
        TRAINING,
        TRAINING,
        EVALUATION,
        EVALUATION,
        EVALUATION,
        EVALUATION,
    ]
    assert split_of("imagenet_val") == split_of("test-000001.tar") == split_of("data/valid/") == EVALUATION
    assert split_of("train-0.h5") == split_of("s3://bucket/train") == TRAINING
    for neither in ("trainval", "train_val", "images", "latest", "contest"):
        assert split_of(neither) is None
    assert split_roles(["train", "val", "extra"]) == [TRAINING, EVALUATION, None]
    assert split_roles(["val", "test"]) == [None, None]  # no training split: nothing to compare


def test_a_folder_of_splits_is_scanned_as_splits_and_names_each_leak(splits):
    result = scrub.scan(splits)
    assert [Path(part.path).name for part in result.summary.parts] == ["test", "train", "val"]
    found = leaks(result)
    assert set(found) == {("val", "cat/renamed.jpg"), ("test", "dog/copy-of-8.jpg")}
    train = found[("val", "cat/renamed.jpg")]["train"]
    assert Path(train["dataset"]).name == "train" and train["key"] == "cat/1-003.jpg"
    assert found[("test", "dog/copy-of-8.jpg")]["train"]["key"] == "dog/1-008.jpg"
    issue = next(i for i in result.issues() if i.check == "split-leak")
    assert issue.severity.value == "error" and "also in the training split train" in issue.message
    # the copy inside train stays a duplicate (a warning), not a leak
    duplicates = [(Path(i.dataset).name, i.key) for i in result.issues() if i.check == "duplicate"]
    assert duplicates == [("train", "cat/twice.jpg")]
    said = "each evaluation split (test, val) is compared with the training split (train)"
    assert any(said in note for note in result.summary.notes)
    assert result.exit_code() == 1


def test_the_classes_of_one_dataset_are_not_splits(tmp_path):
    photos(tmp_path / "animals", 8, 4)
    result = scrub.scan(tmp_path / "animals")
    assert result.summary.dataset.classes == ["cat", "dog"]
    assert "split-leak" not in result.summary.checks


def test_fix_of_the_splits_removes_the_leak_from_the_evaluation_split(splits, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", str(splits), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "split-leak: compared with the training split" in done.stdout
    kept = {path.relative_to(out).as_posix() for path in out.rglob("*.jpg")}
    assert "val.clean/cat/renamed.jpg" not in kept and "test.clean/dog/copy-of-8.jpg" not in kept
    assert "train.clean/cat/1-003.jpg" in kept and "train.clean/dog/1-008.jpg" in kept  # train keeps its data
    assert len([k for k in kept if k.startswith("train.clean/")]) == 21
    assert len([k for k in kept if k.startswith("val.clean/")]) == 6  # 7 less the leak
    rescanned = scrub.scan([out / "train.clean", out / "val.clean", out / "test.clean"])
    assert leaks(rescanned) == {} and rescanned.exit_code() == 0


def test_texts_leak_by_their_normalized_form(tmp_path):
    def write(path: Path, texts: list[str]) -> None:
        path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))

    decomposed = unicodedata.normalize("NFD", "Café au lait, s'il vous plaît.")
    write(tmp_path / "train.jsonl", ["The quick brown fox.", "Café au lait, s'il vous plaît.", "Nothing."])
    write(
        tmp_path / "test.jsonl",
        ["  the QUICK\tbrown\n fox. ", decomposed, "The quick brown fox!", "A new sentence."],
    )
    found = leaks(scrub.scan([tmp_path / "train.jsonl", tmp_path / "test.jsonl"]))
    # keys are line numbers; punctuation is content
    assert set(found) == {("test.jsonl", "1"), ("test.jsonl", "2")}
    assert found[("test.jsonl", "1")]["train"]["key"] == "1"


def test_array_rows_leak_by_dtype_shape_and_values(tmp_path):
    import h5py

    rng = np.random.default_rng(5)
    train = rng.normal(size=(300, 8)).astype(np.float32)
    val = rng.normal(size=(50, 8)).astype(np.float32)
    val[[4, 17]] = train[[10, 250]]
    for name, rows in (("train.h5", train), ("val.h5", val), ("test.h5", val.astype(np.float64))):
        with h5py.File(tmp_path / name, "w") as f:
            f["data"] = rows
    found = leaks(scrub.scan([tmp_path / "train.h5", tmp_path / "val.h5", tmp_path / "test.h5"]))
    assert set(found) == {("val.h5", "4"), ("val.h5", "17")}  # float64 rows are other values
    assert found[("val.h5", "17")]["train"]["index"] == 250


def test_token_sequences_leak_by_their_ids(tmp_path):
    def write(path: Path, rows: list[list[int]]) -> None:
        path.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in rows))

    write(tmp_path / "train.jsonl", [[1, 2, 3, 4], [5, 6, 7], [8, 9]])
    write(tmp_path / "validation.jsonl", [[5, 6, 7], [5, 6, 7, 8], [9, 8]])
    found = leaks(scrub.scan([tmp_path / "train.jsonl", tmp_path / "validation.jsonl"], vocab_size=16))
    assert set(found) == {("validation.jsonl", "1")}
    assert found[("validation.jsonl", "1")]["train"]["key"] == "2"


#: samples whose dataset is whole in itself (copied as a training and an evaluation split) and
#: the options they are scanned with
SELF_CONTAINED = [
    ("images", "", {}),
    ("hdf5", "train.h5", {}),
    ("numpy", "features.npy", {}),
    ("lmdb", "datum_lmdb", {}),
    ("webdataset", "", {"num_classes": 10}),
    ("parquet", "train.parquet", {}),
    ("jsonl", "train.jsonl", {"vocab_size": 1000}),
    ("tfrecord", "", {"num_classes": 10}),
    ("segmentation", "", {"num_classes": 5}),
    ("yolo", "", {}),
    ("mds", "", {"vocab_size": 1000}),
    ("megatron", "my_text_document", {"vocab_size": 1000, "max_length": 64}),
]


@pytest.mark.parametrize("copy, path, options", SELF_CONTAINED, ids=[c for c, _, _ in SELF_CONTAINED])
def test_every_record_of_a_copied_split_leaks_or_is_said_not_compared(copy, path, options, tmp_path):
    """A dataset copied whole into an evaluation split: each of its records is a leak, except
    those with nothing to name (unreadable ones), which a note counts."""
    if copy == "parquet":
        pytest.importorskip("pyarrow")
    source = SAMPLES / copy / path
    made = []
    for role in ("train", "val"):
        if copy == "megatron":
            (tmp_path / role).mkdir()
            for suffix in (".bin", ".idx"):
                shutil.copy(source.with_suffix(suffix), tmp_path / role / f"{role}_text_document{suffix}")
            made.append(tmp_path / role / f"{role}_text_document")
        elif source.is_dir():
            shutil.copytree(source, tmp_path / f"{role}_{copy}", symlinks=True)
            made.append(tmp_path / f"{role}_{copy}")
        else:
            shutil.copy(source, tmp_path / f"{role}{''.join(source.suffixes)}")
            made.append(tmp_path / f"{role}{''.join(source.suffixes)}")
    result = scrub.scan(made, scheduler="threads", **options)
    val = result.summary.parts[1]
    leaked = [i for i in result.issues() if i.check == "split-leak"]
    assert all(Path(i.dataset).name == made[1].name for i in leaked)
    unnamed = [n for n in val.notes if n.startswith("split-leak: no content identity for ")]
    not_compared = int(unnamed[0].split(" for ")[1].split(" record")[0].replace(",", "")) if unnamed else 0
    assert len(leaked) + not_compared == val.records
    assert len(leaked) >= val.records // 2


def test_split_leak_selected_where_there_are_no_splits_is_one_line_and_exit_2(tmp_path):
    photos(tmp_path / "a", 4, 6)
    photos(tmp_path / "b", 4, 7)
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", str(tmp_path / "a"), str(tmp_path / "b")]
        + ["--select", "split-leak"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "split-leak cannot run on" in done.stderr and "training split and evaluation split" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_evaluation_split_of_a_dataset_run_alone_is_not_compared(splits):
    result = scrub.scan(splits / "val")
    assert "split-leak" not in result.summary.checks and leaks(result) == {}


def test_windows_of_a_token_store_leak_by_their_ids(tmp_path):
    """nanoGPT's train.bin beside val.bin: a folder of splits whose records are windows of
    --max-length tokens; a window of val that is one of train's is a leak."""
    folder = tmp_path / "nano"
    folder.mkdir()
    rng = np.random.default_rng(8)
    train = rng.integers(0, 1000, 64 * 10).astype(np.uint16)
    train.tofile(folder / "train.bin")
    val = np.concatenate([rng.integers(0, 1000, 64 * 3), train[64 * 4 : 64 * 5]]).astype(np.uint16)
    val.tofile(folder / "val.bin")
    found = leaks(scrub.scan(folder, max_length=64, vocab_size=1000))
    assert list(found) == [("val.bin", "3")]
    assert found[("val.bin", "3")]["train"]["index"] == 4


# --------------------------------------------------------------------------------------------
# Near copies of images: perceptual hashes


def scene(seed: int, size: int = 256) -> Image.Image:
    """A photograph-like picture: smooth colour fields, a few discs, sensor noise."""
    rng = np.random.default_rng(seed)
    field = Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).resize(
        (size, size), Image.Resampling.BICUBIC
    )
    pixels = np.asarray(field).astype(np.float64)
    rows, columns = np.mgrid[:size, :size]
    for _ in range(4):
        x, y = rng.integers(0, size, 2)
        radius = int(rng.integers(size // 10, size // 4))
        pixels[(columns - x) ** 2 + (rows - y) ** 2 < radius * radius] = rng.integers(0, 255, 3)
    pixels += rng.normal(0, 6, pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def encoded(image: Image.Image, fmt: str = "JPEG", quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def defined_phash(image: Image.Image) -> int:
    """pHash by its definition, written out apart from scrub's: grayscale, Lanczos to 32 x 32,
    DCT-II of the rows then the columns, the 8 x 8 lowest frequencies above their median."""
    pixels = np.asarray(image.convert("L").resize((32, 32), Image.Resampling.LANCZOS), np.float64)
    n = np.arange(32)
    low = np.empty((8, 8))
    for u in range(8):
        for v in range(8):  # sum over x, y of pixel(x, y) cos((2x + 1) u pi / 64) cos((2y + 1) v pi / 64)
            low[u, v] = np.cos(np.pi * (2 * n + 1) * u / 64) @ pixels @ np.cos(np.pi * (2 * n + 1) * v / 64)
    bits = "".join("1" if value > np.median(low) else "0" for value in low.reshape(-1))
    return int(bits, 2)


def hashed(data: bytes) -> int | None:
    """The perceptual hash a run of splits makes of an encoded image (None: none)."""
    from scrub.checks.imagedecode import inspect_image
    from scrub.checks.splits import IDENTITY_BYTES

    facts = inspect_image(data, None, perceptual=True)
    if facts.reduced is None:
        return None
    column = pack_identities([(b"i" * 16, facts.reduced)])
    assert column.dtype.itemsize == IDENTITY_BYTES
    return int.from_bytes(column.tobytes()[16:], "big")


def test_the_perceptual_hash_follows_its_definition():
    """From the decode that judges the image: a PNG's is the definition's, bit for bit; a JPEG's
    comes from its reduced decode, a few bits from the full image's."""
    from scrub.checks.imagedecode import inspect_image

    for seed in range(6):
        picture = scene(seed, size=(256, 600, 48)[seed % 3])
        assert hashed(encoded(picture, "PNG")) == defined_phash(picture)
        data = encoded(picture)
        jpeg = hashed(data)
        assert jpeg is not None and bin(jpeg ^ defined_phash(Image.open(io.BytesIO(data)))).count("1") <= 6
    assert inspect_image(encoded(scene(1)), None).reduced is None  # made only when asked
    constant = Image.new("RGB", (64, 64), (9, 9, 9))
    assert hashed(encoded(constant, "PNG")) == 0  # names nothing


def test_a_partitions_hashes_made_at_once_equal_each_made_alone():
    from scrub.checks.perceptual import phash, phashes

    grays = np.random.default_rng(3).integers(0, 255, (50, 32, 32), dtype=np.uint8)
    grays[7] = 40
    assert phashes(grays).tolist() == [phash(gray) for gray in grays]
    assert phash(grays[7]) == 0


def test_the_perceptual_hash_agrees_with_imagehash():
    imagehash = pytest.importorskip("imagehash")

    for seed in range(4):
        picture = scene(seed)
        assert hashed(encoded(picture, "PNG")) == int(str(imagehash.phash(picture)), 16)


def test_near_pairs_equal_a_brute_force_search():
    from scrub.checks.perceptual import near_pairs

    rng = np.random.default_rng(9)
    known = rng.integers(0, 1 << 63, 3000, dtype=np.int64).astype(np.uint64)
    queries = rng.integers(0, 1 << 63, 2000, dtype=np.int64).astype(np.uint64)
    flips = rng.integers(0, 63, (100, 3)).astype(np.uint64)
    queries[:100] = known[rng.integers(0, 3000, 100)]
    for bit in range(3):
        queries[:100] ^= np.left_shift(np.uint64(1), flips[:, bit])
    queries[100:110] = known[:10]
    queries[110] = known[5] = 0  # NO_HASH: never a match
    for radius in (0, 2, 6, 10):
        found, nearest, distance = near_pairs(known, queries, radius)
        table = np.bitwise_count(queries[:, None] ^ known[None, :]).astype(int)
        table[:, known == 0] = 99
        table[queries == 0, :] = 99
        expected = np.flatnonzero(table.min(axis=1) <= radius)
        assert found.tolist() == expected.tolist()
        assert nearest.tolist() == table.argmin(axis=1)[expected].tolist()  # the first of equals
        assert distance.tolist() == table.min(axis=1)[expected].tolist()


@pytest.fixture
def near_splits(tmp_path: Path) -> Path:
    """train: 12 pictures; val: changed copies of train's first seven and of its last, and five others."""
    data = tmp_path / "data"
    (data / "train" / "a").mkdir(parents=True)
    (data / "val" / "a").mkdir(parents=True)
    pictures = [scene(seed) for seed in range(12)]
    for number, picture in enumerate(pictures):
        (data / "train" / "a" / f"{number:02d}.jpg").write_bytes(encoded(picture))
    w, h = pictures[0].size
    changed = {
        "q50.jpg": encoded(pictures[0], quality=50),
        "half.jpg": encoded(pictures[1].resize((w // 2, h // 2))),
        "nine-tenths.jpg": encoded(pictures[2].resize((w * 9 // 10, h * 9 // 10))),
        "cropped.jpg": encoded(pictures[3].crop((5, 5, w - 5, h - 5))),  # 2% a side
        "darker.jpg": encoded(ImageEnhance.Brightness(pictures[4]).enhance(0.9)),
        "brighter.jpg": encoded(ImageEnhance.Brightness(pictures[5]).enhance(1.1)),
        "as.png": encoded(pictures[6], "PNG"),
        "cropped-more.jpg": encoded(pictures[11].crop((13, 13, w - 13, h - 13))),  # 5% a side
    }
    for name, data_bytes in changed.items():
        (data / "val" / "a" / name).write_bytes(data_bytes)
    for seed in range(100, 105):
        (data / "val" / "a" / f"other-{seed}.jpg").write_bytes(encoded(scene(seed)))
    return data


def test_changed_copies_of_training_images_leak_and_other_images_do_not(near_splits):
    found = leaks(scrub.scan(near_splits))
    expected = {
        "a/q50.jpg": "a/00.jpg",
        "a/half.jpg": "a/01.jpg",
        "a/nine-tenths.jpg": "a/02.jpg",
        "a/cropped.jpg": "a/03.jpg",
        "a/darker.jpg": "a/04.jpg",
        "a/brighter.jpg": "a/05.jpg",
        "a/as.png": "a/06.jpg",
        "a/cropped-more.jpg": "a/11.jpg",  # near the hash of train's central crop, not its whole
    }
    assert {key: details["train"]["key"] for (_, key), details in found.items()} == expected
    assert all(d["match"] == "perceptual" and 0 <= d["distance"] <= 6 for d in found.values())


def test_a_training_images_central_crops_are_hashed_from_its_own_grayscale():
    """`crop_phashes` resample the 32 x 32 grayscale the whole image's hash is made of: within a
    few bits of the hash of the image cut by `CROPS` a side; a packed column holds them after
    the hash, and a value packed before (a cached one) stays as it is."""
    from scrub.checks.perceptual import CROPS, crop_phashes, distances, phash, reduced
    from scrub.checks.splits import CROP_BYTES, IDENTITY_BYTES, identity_parts, pack_identities

    for seed in range(8):
        picture = scene(seed).convert("L")
        w, h = picture.size
        made = crop_phashes(reduced(picture)[None])[0]
        for share, hashed in zip(CROPS, made):
            cut = round(w * share), round(h * share)
            cropped = phash(picture.crop((*cut, w - cut[0], h - cut[1])))
            assert distances(np.uint64(cropped), hashed) <= 4, (seed, share)
    gray = reduced(scene(3).convert("L"))
    column = pack_identities([(b"i" * 16, gray)], crops=True)
    assert column.dtype.itemsize == IDENTITY_BYTES + CROP_BYTES
    _, _, crops, _ = identity_parts(column)
    assert crops is not None and crops[0].tolist() == crop_phashes(gray[None])[0].tolist()
    again = pack_identities([column[0].tobytes(), b"t" * 16 + b"\0" * 8], crops=True)
    assert again.tobytes() == column.tobytes() + b"t" * 16 + b"\0" * 24


def test_near_distance_zero_finds_exact_copies_only(near_splits):
    shutil.copy(near_splits / "train" / "a" / "07.jpg", near_splits / "val" / "a" / "same.jpg")
    found = leaks(scrub.scan(near_splits, near_distance=0))
    assert list(found) == [("val", "a/same.jpg")] and found[("val", "a/same.jpg")]["match"] == "exact"


def test_a_cached_rescan_of_the_splits_finds_the_same_leaks(near_splits, tmp_path):
    first = leaks(scrub.scan(near_splits, cache=tmp_path / "cache"))
    again = scrub.scan(near_splits, cache=tmp_path / "cache")
    assert leaks(again) == first and len(first) == 8
    assert all(part.cache["reused"] == part.records for part in again.summary.parts)


def test_fix_leak_side_train_keeps_the_evaluation_split_whole(splits, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "fix", str(splits), "--out", str(out), "--leak-side", "train"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "set aside from this training split (--leak-side train)" in done.stdout
    kept = {path.relative_to(out).as_posix() for path in out.rglob("*.jpg")}
    assert "val.clean/cat/renamed.jpg" in kept and "test.clean/dog/copy-of-8.jpg" in kept
    assert "train.clean/cat/1-003.jpg" not in kept and "train.clean/dog/1-008.jpg" not in kept
    assert len([k for k in kept if k.startswith("train.clean/")]) == 19


def test_hamming_distances_without_numpy_2s_bitwise_count(monkeypatch):
    """NumPy before 2.0 has no ``bitwise_count``: the byte table gives the same distances."""
    from scrub.checks.perceptual import distances

    rng = np.random.default_rng(4)
    first, second = (rng.integers(0, 1 << 63, (20, 30), dtype=np.int64).astype(np.uint64) for _ in range(2))
    expected = distances(first, second)
    monkeypatch.delattr(np, "bitwise_count")
    assert distances(first, second).tolist() == expected.tolist()
    assert expected.shape == (20, 30) and expected.max() <= 64


def test_split_options_that_cannot_apply_are_said(splits, tmp_path):
    """--near-distance where no image is compared, --leak-side on a dataset fixed alone: each is
    a note naming the option, never passed over."""
    scanned = scrub.scan(splits / "val", near_distance=2, ignore=["near-duplicate"])
    assert any(n.startswith("--near-distance 2: not used") for n in scanned.summary.notes)
    assert not any("near-distance" in n for n in scrub.scan(splits / "val", near_distance=2).summary.notes)
    assert not any("near-distance" in n for n in scrub.scan(splits, near_distance=2).summary.notes)
    fixed = scrub.fix(splits / "val", out=tmp_path / "val.clean", leak_side="train")
    assert any(n.startswith("--leak-side train: not used") for n in fixed.report["notes"])
