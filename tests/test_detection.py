"""Detection datasets: YOLO (Ultralytics' images/ + labels/ + data.yaml) and COCO JSON. Every box
fault is found and named by its line or annotation id; fix keeps each image with its labels
(YOLO) or rewrites the JSON with ids kept (COCO); every box of a cleaned copy gives a finite
complete-IoU loss in real PyTorch, where a zero-area box of the source gives NaN."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import image_bytes, one_line_error, write

import scrub

YOLO_LABELS = {
    "train/000": ("0 0.5 0.5 0.2 0.3\n1 0.25 0.25 0.1 0.1\n", None),
    "train/001": ("5 0.5 0.5 0.2 0.3\n", "box-class-invalid"),  # 3 names in data.yaml
    "train/002": ("0 nan 0.5 0.2 0.3\n", "box-nonfinite"),
    "train/003": ("0 0.5 0.5 0.2 0.3\n1 0.5 0.5 0.0 0.0\n", "box-degenerate"),  # line 2: a click
    "train/004": ("0 320 240 50 80\n", "box-out-of-bounds"),  # pixels, not fractions
    "train/005": ("0 0.5 0.5 0.2\n", "box-malformed"),
    "train/006": ("0 0.5 0.5 0.2 0.3\n0 0.5 0.5 0.2 0.3\n", "duplicate-box"),
    "train/007": ("1.5 0.5 0.5 0.2 0.3\n", "box-class-invalid"),
    "val/008": ("2 0.1 0.1 0.3 0.1 0.2 0.3\n", None),  # a polygon (segment labels): fine
    "val/009": (None, "missing-boxes"),  # a background image
}


def write_yolo(root: Path) -> None:
    for seed, (name, (labels, _)) in enumerate(YOLO_LABELS.items()):
        write(root / "images" / f"{name}.jpg", image_bytes(seed, size=32))
        if labels is not None:
            write(root / "labels" / f"{name}.txt", labels.encode())
    write(root / "labels" / "val" / "010.txt", b"0 0.5 0.5 0.1 0.1\n")  # no image
    (root / "data.yaml").write_text(
        "path: .\ntrain: images/train\nval: images/val\nnames:\n  0: cat\n  1: dog\n  2: bird\n"
    )


def yolo_boxes(root: Path) -> list[tuple[float, ...]]:
    """Every box of a YOLO copy as (x1, y1, x2, y2), normalized."""
    boxes = []
    for path in sorted((root / "labels").rglob("*.txt")):
        for line in path.read_text().splitlines():
            values = [float(v) for v in line.split()]
            if len(values) == 5:
                _, cx, cy, w, h = values
                boxes.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
    return boxes


def complete_iou_loss(torch, predicted, target, eps: float = 1e-7):
    """torchvision.ops.complete_box_iou_loss (torchvision/ops/ciou_loss.py), where torchvision is
    not installed: the same float32 arithmetic in torch."""
    try:
        from torchvision.ops import complete_box_iou_loss

        return complete_box_iou_loss(predicted, target)
    except (ImportError, RuntimeError):
        pass
    x1, y1, x2, y2 = predicted.unbind(-1)
    x1g, y1g, x2g, y2g = target.unbind(-1)
    intersection = (torch.min(x2, x2g) - torch.max(x1, x1g)).clamp(min=0) * (
        torch.min(y2, y2g) - torch.max(y1, y1g)
    ).clamp(min=0)
    union = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intersection
    iou = intersection / (union + eps)
    diagonal = (
        (torch.max(x2, x2g) - torch.min(x1, x1g)) ** 2 + (torch.max(y2, y2g) - torch.min(y1, y1g)) ** 2 + eps
    )
    centres = ((x1 + x2) / 2 - (x1g + x2g) / 2) ** 2 + ((y1 + y2) / 2 - (y1g + y2g) / 2) ** 2
    distance_iou_loss = 1 - iou + centres / diagonal
    v = (4 / math.pi**2) * (torch.atan((x2g - x1g) / (y2g - y1g)) - torch.atan((x2 - x1) / (y2 - y1))) ** 2
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return distance_iou_loss + alpha * v


def test_yolo_faults_are_found_by_line_and_fix_keeps_labels_with_images(tmp_path):
    root = tmp_path / "coco8"
    write_yolo(root)
    result = scrub.scan(root, scheduler="sync")
    found = {(issue.key, issue.check) for issue in result.issues()}
    expected = {(f"{name}.jpg", check) for name, (_, check) in YOLO_LABELS.items() if check}
    assert found == expected | {("labels/val/010.txt", "label-without-image")}
    degenerate = next(issue for issue in result.issues() if issue.check == "box-degenerate")
    assert degenerate.details["boxes"] == ["line 2"] and "line 2" in degenerate.message
    messages = {issue.key: issue.message for issue in result.issues() if issue.check == "box-class-invalid"}
    assert messages["train/001.jpg"] == "class id outside [0, 3): 5 (line 1)"  # the id, not only its line
    assert messages["train/007.jpg"] == "class id not an integer: 1.5 (line 1)"
    assert result.summary.dataset.classes == ["cat", "dog", "bird"]
    fixed = scrub.fix(root, quarantine=True, scheduler="sync")
    errors = {
        name
        for name, (_, check) in YOLO_LABELS.items()
        if check and check not in ("duplicate-box", "missing-boxes")
    }
    assert fixed.verified and fixed.report["quarantined"] == len(errors)
    held = fixed.quarantine / "coco8"
    for name in errors:
        assert (held / "labels" / f"{name}.txt").read_bytes() == (
            root / "labels" / f"{name}.txt"
        ).read_bytes()
        assert (held / "images" / f"{name}.jpg").exists() and not (
            fixed.clean / "images" / f"{name}.jpg"
        ).exists()
    assert (held / "data.yaml").exists() and (fixed.clean / "data.yaml").exists()
    assert (fixed.clean / "labels" / "val" / "010.txt").exists()  # a warning: kept
    rescan = scrub.scan(fixed.clean, scheduler="sync")
    assert rescan.summary.records_with_errors == 0


def test_every_box_of_the_cleaned_copy_gives_a_finite_complete_iou_loss(tmp_path):
    torch = pytest.importorskip("torch")
    root = tmp_path / "yolo"
    write_yolo(root)
    fixed = scrub.fix(root, scheduler="sync")
    target = torch.tensor(yolo_boxes(fixed.clean), dtype=torch.float32)
    predicted = torch.tensor([[0.3, 0.3, 0.6, 0.7]], dtype=torch.float32).expand_as(target)
    assert len(target) == 5 and torch.isfinite(complete_iou_loss(torch, predicted, target)).all()
    click = torch.tensor([[0.5, 0.5, 0.5, 0.5]])  # the source's zero-area box (train/003, line 2)
    assert torch.isnan(complete_iou_loss(torch, predicted[:1], click)).all()


def write_coco(root: Path, nan_box: bool = True) -> Path:
    images, annotations = [], []
    boxes = {
        0: [[10, 10, 20, 15]],
        1: [[0, 0, 0, 10]],  # zero width
        2: [[50, 30, 30, 30]],  # past the 60x40 image
        3: [[5, 5, 10, 10], [5, 5, 10, 10]],  # a duplicate (warning)
        4: [[float("nan") if nan_box else 1, 1, 2, 3]],
        5: [[1, 1, 5, 5]],  # category 99: not declared
        6: [[1, 2, 3]],  # not a bbox
        7: [[2, 2, 8, 8]],
    }
    for i, image_boxes in boxes.items():
        name = f"{i:012d}.jpg"
        write(root / "val2017" / name, image_bytes(i, size=16))
        images.append({"id": 100 + i, "file_name": name, "width": 60, "height": 40})
        for box in image_boxes:
            category = 99 if i == 5 else 1
            annotations.append(
                {"id": len(annotations) + 1, "image_id": 100 + i, "category_id": category, "bbox": box}
            )
    annotations.append({"id": 999, "image_id": 555, "category_id": 1, "bbox": [1, 1, 2, 2]})  # no such image
    path = root / "annotations" / "instances_val2017.json"
    path.parent.mkdir(parents=True)
    document = {"info": {"year": 2017}, "images": images, "annotations": annotations,
                "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]}  # fmt: skip
    path.write_text(json.dumps(document))  # Python's json writes NaN, as pycocotools reads it
    return path


def test_coco_faults_are_found_by_annotation_and_fix_rewrites_the_json(tmp_path):
    path = write_coco(tmp_path / "coco")
    result = scrub.scan(path, scheduler="sync")
    assert {(issue.key, issue.check) for issue in result.issues()} == {
        ("000000000001.jpg", "box-degenerate"),
        ("000000000002.jpg", "box-out-of-bounds"),
        ("000000000003.jpg", "duplicate-box"),
        ("000000000004.jpg", "box-nonfinite"),
        ("000000000005.jpg", "box-class-invalid"),
        ("000000000006.jpg", "box-malformed"),
    }
    out_of_bounds = next(issue for issue in result.issues() if issue.check == "box-out-of-bounds")
    assert out_of_bounds.details["boxes"] == ["annotation 3"]
    fixed = scrub.fix(path, quarantine=True, scheduler="sync")
    assert fixed.verified and fixed.clean.name == "instances_val2017.clean.json"
    clean = json.loads(fixed.clean.read_text())
    source = json.loads(path.read_text())
    assert [image["id"] for image in clean["images"]] == [100, 103, 107]  # ids kept
    kept = {a["id"] for a in clean["annotations"]}
    assert kept == {a["id"] for a in source["annotations"] if a["image_id"] in (100, 103, 107, 555)}
    assert clean["categories"] == source["categories"] and clean["info"] == source["info"]
    held = json.loads((fixed.quarantine / "instances_val2017.json").read_text())
    assert sorted(image["id"] for image in held["images"]) == [101, 102, 104, 105, 106]
    assert any(math.isnan(a["bbox"][0]) for a in held["annotations"])  # kept as it was: NaN
    assert scrub.scan(fixed.clean, scheduler="sync").summary.records_with_errors == 0


def test_coco_images_not_found_is_one_line(tmp_path):
    path = write_coco(tmp_path / "coco")
    moved = tmp_path / "elsewhere"
    (tmp_path / "coco" / "val2017").rename(moved)
    assert "--root" in one_line_error("scan", path)
    assert scrub.scan(path, root=moved, scheduler="sync").summary.records == 8


def test_pycocotools_reads_the_cleaned_copy_as_cocodetection_does(tmp_path):
    """What torchvision's CocoDetection does with a COCO JSON: pycocotools indexes it, and each
    image id gives its file and its annotations."""
    coco = pytest.importorskip("pycocotools.coco")
    from PIL import Image

    path = write_coco(tmp_path / "coco", nan_box=False)
    fixed = scrub.fix(path, scheduler="sync")
    index = coco.COCO(str(fixed.clean))
    ids = sorted(index.imgs)
    assert ids == [100, 103, 104, 107]  # the NaN-free box of 104 is fine now
    for image_id in ids:
        (info,) = index.loadImgs(image_id)
        Image.open(tmp_path / "coco" / "val2017" / info["file_name"]).load()
        boxes = [a["bbox"] for a in index.loadAnns(index.getAnnIds(imgIds=image_id))]
        assert boxes and all(w > 0 and h > 0 for _, _, w, h in boxes)
