"""Segmentation datasets (images/ + masks/, VOC's JPEGImages/ + SegmentationClass/): every mask
fault found, fix keeps each image with its mask, and the cleaned copy gives a finite
cross-entropy loss (ignore_index=255) in real PyTorch where the source gives NaN or raises."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line_error
from PIL import Image

import scrub

CLASSES = 5


def png(array: np.ndarray, mode: str | None = None) -> bytes:
    buffer = io.BytesIO()
    image = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    image.save(buffer, "PNG")
    return buffer.getvalue()


def write_pairs(root: Path, images: str = "images", masks: str = "masks") -> dict[str, str]:
    """12 pairs in train/ and val/ sub-folders, one fault of each kind; returns name -> fault."""
    rng = np.random.default_rng(0)
    faults = {}
    for i in range(12):
        split = "train" if i < 8 else "val"
        image = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
        mask = rng.integers(0, CLASSES, (24, 32), dtype=np.uint8)
        mask[:3] = 255  # some void pixels: fine
        name = f"{split}/{i:04d}"
        (root / images / split).mkdir(parents=True, exist_ok=True)
        (root / masks / split).mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(root / images / f"{name}.jpg", quality=90)
        data = png(mask)
        if i == 1:
            mask[5, 5] = 7  # out of range
            data = png(mask)
            faults[name] = "mask-out-of-range"
        elif i == 2:
            data = png(np.full((24, 32), 255, np.uint8))  # all void: NaN under a mean loss
            faults[name] = "mask-all-void"
        elif i == 3:
            data = png(mask[:12, :16])  # the wrong size
            faults[name] = "mask-size-mismatch"
        elif i == 4:
            data = png(np.stack([mask * 40] * 3, axis=-1))  # an RGB visualisation
            faults[name] = "mask-not-class-map"
        elif i == 5:
            data = b""  # no mask written
            faults[name] = "missing-mask"
        elif i == 9:
            data = data[: len(data) // 2]  # truncated
            faults[name] = "mask-undecodable"
        elif i == 10:  # a palette mask (VOC's): class ids, fine
            palette = Image.fromarray(mask, mode="L").convert("P")
            buffer = io.BytesIO()
            palette.save(buffer, "PNG")
            data = buffer.getvalue()
        if data:
            (root / masks / f"{name}.png").write_bytes(data)
    (root / masks / "train" / "orphan.png").write_bytes(png(np.zeros((24, 32), np.uint8)))
    (root / "README.md").write_text("a segmentation dataset\n")
    return faults


def test_every_mask_fault_is_found_and_fix_keeps_pairs(tmp_path):
    root = tmp_path / "seg"
    faults = write_pairs(root)
    result = scrub.scan(root, num_classes=CLASSES, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    assert found == {(f"{name}.jpg", check) for name, check in faults.items()}
    assert result.summary.records == 12 and result.summary.dataset.format == "segmentation"
    pixels = result.summary.stats["mask_pixels"]
    assert set(pixels) >= {0, 1, 2, 3, 4, 255} and 7 in pixels  # the per-class histogram
    assert any("orphan.png" in note for note in result.summary.notes)
    fixed = scrub.fix(root, quarantine=True, num_classes=CLASSES, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 6 and fixed.report["quarantined"] == 6
    held = fixed.quarantine / "seg"
    for name in faults:  # each set-aside image with its mask (where it had one)
        assert (held / "images" / f"{name}.jpg").read_bytes() == (
            root / "images" / f"{name}.jpg"
        ).read_bytes()
        assert (held / "masks" / f"{name}.png").exists() == (root / "masks" / f"{name}.png").exists()
        assert not (fixed.clean / "images" / f"{name}.jpg").exists()
    assert (fixed.clean / "masks" / "train" / "orphan.png").exists()
    assert (fixed.clean / "README.md").exists()
    rescan = scrub.scan(fixed.clean, num_classes=CLASSES, scheduler="sync")
    assert rescan.summary.records == 6 and rescan.summary.records_with_errors == 0


def test_voc_folders_and_the_ignore_index(tmp_path):
    root = tmp_path / "VOC2012"
    faults = write_pairs(root, "JPEGImages", "SegmentationClass")
    result = scrub.scan(root, num_classes=CLASSES, scheduler="sync")
    assert {issue.check for issue in result.issues()} == set(faults.values())
    assert "masks: ignore index 255 (by default for masks)" in result.summary.notes
    # without an ignore index, 255 is a class id like any other: out of range, never "void"
    result = scrub.scan(root, num_classes=CLASSES, ignore_index="none", scheduler="sync")
    checks = {(issue.key, issue.check) for issue in result.issues()}
    assert ("train/0002.jpg", "mask-out-of-range") in checks and "mask-all-void" not in {c for _, c in checks}
    assert "masks: every value is a class (--ignore-index none)" in result.summary.notes
    without = scrub.scan(root, scheduler="sync")  # no class count: said, not silently skipped
    assert any("give --num-classes" in note for note in without.summary.notes)
    assert "--ignore-index" in one_line_error("scan", root, "--ignore-index", "void")


def test_the_cleaned_copy_trains_without_nan(tmp_path):
    torch = pytest.importorskip("torch")
    functional = pytest.importorskip("torch.nn.functional")
    root = tmp_path / "seg"
    write_pairs(root)
    fixed = scrub.fix(root, num_classes=CLASSES, scheduler="sync")

    def losses(folder: Path) -> list[float]:
        torch.manual_seed(0)
        head = torch.nn.Conv2d(3, CLASSES, 1)  # a tiny segmentation head
        found = []
        for image_path in sorted((folder / "images").rglob("*.jpg")):
            mask_path = folder / "masks" / image_path.relative_to(folder / "images").with_suffix(".png")
            image = torch.from_numpy(np.asarray(Image.open(image_path), dtype=np.float32) / 255).permute(
                2, 0, 1
            )
            mask = torch.from_numpy(np.asarray(Image.open(mask_path), dtype=np.int64))
            logits = head(image[None])
            loss = functional.cross_entropy(logits, mask[None], ignore_index=255)
            loss.backward()
            found.append(float(loss.detach()))
        return found

    clean = losses(fixed.clean)
    assert len(clean) == 6 and all(np.isfinite(clean))
    # the source, loaded the same way, breaks: its all-void mask gives NaN (the others raise)
    void = root / "masks" / "train" / "0002.png"
    logits = torch.zeros(1, CLASSES, 24, 32)
    mask = torch.from_numpy(np.asarray(Image.open(void), dtype=np.int64))[None]
    assert torch.isnan(functional.cross_entropy(logits, mask, ignore_index=255))


@pytest.mark.parametrize("container", ["hdf5", "npz"])
def test_array_masks_are_checked_row_by_row_and_split_with_the_data(tmp_path, container):
    """HDF5/NumPy segmentation data: `data` (N, C, H, W) with `mask` (N, H, W)."""
    rng = np.random.default_rng(1)
    data = rng.normal(size=(40, 3, 8, 8)).astype(np.float32)
    masks = rng.integers(0, CLASSES, size=(40, 8, 8)).astype(np.uint8)
    masks[5, 2, 2] = 9  # mask-out-of-range
    masks[11] = 255  # mask-all-void
    data[20, 0, 0, 0] = np.nan  # nonfinite-data, as for any rows
    if container == "hdf5":
        import h5py

        path = tmp_path / "seg.h5"
        with h5py.File(path, "w") as file:
            file["data"], file["mask"] = data, masks
    else:
        path = tmp_path / "seg.npz"
        np.savez(path, x=data, mask=masks)
    result = scrub.scan(path, num_classes=CLASSES, scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("5", "mask-out-of-range"),
        ("11", "mask-all-void"),
        ("20", "nonfinite-data"),
    }
    assert result.summary.stats["mask_pixels"][9] == 1 and result.summary.stats["mask_pixels"][255] == 64
    fixed = scrub.fix(path, quarantine=True, num_classes=CLASSES, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 37
    if container == "hdf5":
        import h5py

        with h5py.File(fixed.clean) as file:
            kept_masks = file["mask"][:]
    else:
        kept_masks = np.load(fixed.clean)["mask"]
    assert (
        len(kept_masks) == 37
        and kept_masks.max() < CLASSES
        and not (kept_masks == 255).all(axis=(1, 2)).any()
    )


def test_a_list_of_image_mask_pairs(tmp_path):
    """DeepLab's and mmsegmentation's lists: `image mask` per line, relative to the list's folder
    (a leading / too, where no such file exists); a line leaving the root is never read."""
    root = tmp_path / "VOC"
    faults = write_pairs(root, "JPEGImages", "SegmentationClass")
    names = sorted(
        p.relative_to(root / "JPEGImages").with_suffix("").as_posix()
        for p in (root / "JPEGImages").rglob("*.jpg")
    )
    lines = [f"/JPEGImages/{name}.jpg /SegmentationClass/{name}.png" for name in names]
    lines.append("../outside.jpg SegmentationClass/train/0000.png")
    (tmp_path / "outside.jpg").write_bytes(b"never read")
    listed = root / "train_aug.txt"
    listed.write_text("\n".join(lines) + "\n")
    result = scrub.scan(listed, num_classes=CLASSES, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    expected = {
        (f"JPEGImages/{name}.jpg", check) for name, check in faults.items() if check != "missing-mask"
    }
    assert expected <= found and ("../outside.jpg", "unsafe-path") in found
    assert ("JPEGImages/train/0005.jpg", "missing-mask") in found  # listed, but not there
    fixed = scrub.fix(listed, quarantine=True, num_classes=CLASSES, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 12 - len(faults)
    kept_lines = (fixed.clean / "train_aug.txt").read_text().splitlines()
    assert kept_lines == [line for line in lines if not any(f"{name}." in line for name in faults)][:-1]
    held_lines = (fixed.quarantine / "train_aug" / "train_aug.txt").read_text().splitlines()
    assert held_lines[-1] == "../outside.jpg SegmentationClass/train/0000.png"
    assert not list(fixed.quarantine.rglob("outside.jpg"))  # its line is kept, the file never read
    assert (
        scrub.scan(
            fixed.clean / "train_aug.txt", num_classes=CLASSES, scheduler="sync"
        ).summary.records_with_errors
        == 0
    )


def test_rgb_masks_are_read_through_a_palette(tmp_path):
    """VOC's colour-coded masks (SegmentationClass PNGs saved as RGB) with --mask-palette voc;
    a colour the palette lacks is still a finding."""
    from scrub.options.values import voc_palette

    colours = dict(voc_palette())
    root = tmp_path / "voc"
    for i in range(3):
        classes = np.zeros((8, 8), np.uint8)
        classes[2:6, 2:6] = 1 + i
        classes[0] = 255  # the boundary colour
        rgb = np.array([colours[c] for c in classes.ravel()], np.uint8).reshape(8, 8, 3)
        if i == 2:
            rgb[7, 7] = (1, 2, 3)  # no class has this colour
        (root / "JPEGImages").mkdir(parents=True, exist_ok=True)
        (root / "SegmentationClass").mkdir(exist_ok=True)
        noise = np.random.default_rng(i).integers(0, 256, (8, 8, 3), dtype=np.uint8)  # not constant-image
        Image.fromarray(noise).save(root / "JPEGImages" / f"{i}.jpg")
        (root / "SegmentationClass" / f"{i}.png").write_bytes(png(rgb))
    without = scrub.scan(root, num_classes=21, min_image_side=8, scheduler="sync")
    assert {issue.check for issue in without.issues()} == {"mask-not-class-map"}
    assert "--mask-palette" in next(iter(without.issues())).message
    result = scrub.scan(root, num_classes=2, mask_palette="voc", min_image_side=8, scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("1.jpg", "mask-out-of-range"),  # class 2 in a 2-class model: the colours were read
        ("2.jpg", "mask-not-class-map"),  # (1, 2, 3) is no class's
        ("2.jpg", "mask-out-of-range"),
    }
    assert result.summary.stats["mask_pixels"][255] == 24  # the boundary colour is the void id
    palette = tmp_path / "palette.json"
    palette.write_text(json.dumps({"0": [0, 0, 0], "1": [128, 0, 0], "2": [0, 128, 0], "3": [128, 128, 0]}))
    result = scrub.scan(root, num_classes=4, mask_palette=str(palette), min_image_side=8, scheduler="sync")
    unmapped = [issue for issue in result.issues() if issue.check == "mask-not-class-map"]
    assert {issue.key for issue in unmapped} == {"0.jpg", "1.jpg", "2.jpg"}  # no 255's colour in this one
    assert "palette" in one_line_error("scan", root, "--mask-palette", tmp_path / "missing.json")


@pytest.mark.parametrize("layout", ["segmentation", "yolo"])
def test_a_link_out_of_the_folders_is_never_read_and_set_aside_as_a_link(tmp_path, layout):
    """A file of the images or masks (labels) folder that is a link leaving the dataset is
    `unsafe-path`, never read (its target is not checked, not copied); `fix` sets the record
    aside with the link recreated, and verifies."""
    root = tmp_path / "ds"
    partner, suffix = ("masks", ".png") if layout == "segmentation" else ("labels", ".txt")
    (root / "images").mkdir(parents=True)
    (root / partner).mkdir()
    for name in ("a", "b"):
        Image.fromarray(np.full((16, 16, 3), 40, np.uint8)).save(root / "images" / f"{name}.png")
        if layout == "segmentation":
            Image.fromarray(np.full((16, 16), 1, np.uint8)).save(root / partner / f"{name}.png")
        else:
            (root / partner / f"{name}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (tmp_path / "secret.png").write_bytes(b"not an image: must never be read")
    (tmp_path / f"secret{suffix}").write_bytes(b"never read either")
    (root / "images" / "image-out.png").symlink_to("../../secret.png")
    Image.fromarray(np.full((16, 16, 3), 40, np.uint8)).save(root / "images" / "partner-out.png")
    (root / partner / f"partner-out{suffix}").symlink_to(f"../../secret{suffix}")
    result = scrub.scan(root, scheduler="sync")
    assert result.summary.dataset.format == layout
    found = sorted((issue.key, issue.check) for issue in result.issues() if issue.severity.value == "error")
    assert found == [("image-out.png", "unsafe-path"), ("partner-out.png", "unsafe-path")]
    fixed = scrub.fix(root, quarantine=True, scheduler="sync")
    assert fixed.verified and fixed.report["kept"] == 2 and fixed.report["quarantined"] == 2
    held = sorted(str(p.relative_to(fixed.quarantine)) for p in fixed.quarantine.rglob("*") if p.is_symlink())
    assert held == sorted([f"ds/{partner}/partner-out{suffix}", "ds/images/image-out.png"])
    assert not [p for p in fixed.clean.rglob("*") if p.is_symlink() or "out" in p.name]


@pytest.mark.parametrize("layout", ["segmentation", "yolo"])
def test_images_and_masks_are_read_ahead_from_the_disk_but_never_a_link_out(tmp_path, monkeypatch, layout):
    """Cold (every read taken for a read from the disk), the images and masks (labels) ahead are
    announced to the kernel; a file leading out of the dataset never is (nor read), and the
    findings are those of a scan that reads nothing ahead."""
    import scrub.readers.base as base

    root = tmp_path / "ds"
    partner, suffix = ("masks", ".png") if layout == "segmentation" else ("labels", ".txt")
    (root / "images").mkdir(parents=True)
    (root / partner).mkdir()
    for number in range(30):
        Image.fromarray(np.full((8, 8, 3), number, np.uint8)).save(root / "images" / f"{number:02d}.png")
        if number == 7:
            continue
        if layout == "segmentation":
            Image.fromarray(np.full((8, 8), number % 3, np.uint8)).save(root / partner / f"{number:02d}.png")
        else:  # one label file unreadable (a dangling link), one with a box of no area
            size = "0.0" if number == 9 else "0.2"
            (root / partner / f"{number:02d}{suffix}").write_text(f"0 0.5 0.5 {size} 0.2\n")
    if layout == "yolo":
        (root / partner / f"08{suffix}").unlink()
        (root / partner / f"08{suffix}").symlink_to("gone.txt")  # dangling
    (tmp_path / f"secret{suffix}").write_bytes(b"never read")
    (root / partner / f"12{suffix}").unlink()
    (root / partner / f"12{suffix}").symlink_to(f"../../secret{suffix}")
    (root / "images" / "20.png").unlink()
    (root / "images" / "20.png").symlink_to(f"../../secret{suffix}")
    before = sorted((i.key, i.check) for i in scrub.scan(root, scheduler="sync").issues())
    blocks = iter(range(10**6))
    monkeypatch.setattr(base, "blocks_read", lambda: next(blocks))
    announced: list[str] = []
    monkeypatch.setattr(
        base, "will_need", lambda path, keep=False: announced.append(os.path.relpath(path, root))
    )
    after = sorted((i.key, i.check) for i in scrub.scan(root, scheduler="sync").issues())
    assert after == before
    assert ("20.png", "unsafe-path") in after and ("12.png", "unsafe-path") in after
    if layout == "segmentation":
        assert ("07.png", "missing-mask") in after
    else:
        assert {
            ("07.png", "missing-boxes"),
            ("08.png", "box-malformed"),
            ("09.png", "box-degenerate"),
        } <= set(after)
    assert "images/05.png" in announced and f"{partner}/05{suffix}" in announced
    assert not {f"{partner}/12{suffix}", "images/12.png", "images/20.png", f"{partner}/20{suffix}"} & set(
        announced
    )
