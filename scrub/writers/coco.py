"""COCO annotations: the cleaned copy is the annotations JSON without the quarantined images and
their annotations (every id kept, ``info``, ``licenses`` and ``categories`` as they were), named
``instances_X.clean.json`` beside the source; it refers to the same image folder, so
``CocoDetection(root, "instances_X.clean.json")`` (torchvision) or pycocotools read it as
they read the source. The quarantine holds the JSON of the quarantined images with their
annotations. Annotations of no listed image stay in the cleaned copy. Each image entry is
checksummed with its annotations; the image files are not copied (the source is never modified,
and both JSONs name them where they are)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from scrub.fixing.ledger import Ledger, identity_seed
from scrub.readers.coco import CocoReader, load_coco
from scrub.writers.base import Tally, Verdicts, Writer


class CocoWriter(Writer[CocoReader]):
    format = "coco"

    @property
    def output_is_folder(self) -> bool:
        return False

    def write(self, verdicts: Verdicts, clean: Path, quarantine: Path | None, link: bool = False) -> Tally:
        tally = Tally()
        document = load_coco(self.source)
        images = [entry for entry in document["images"] if isinstance(entry, dict)]
        annotations = _by_image(document)
        sides: dict[bool, list[dict]] = {False: [], True: []}
        for number, entry in enumerate(images):
            key = str(entry.get("file_name", f"#{number}"))
            quarantined = verdicts.quarantined(key, number)
            sides[quarantined].append(entry)
            (tally.quarantined if quarantined else tally.kept).add_record(
                *_ledger_entry(key, entry, annotations.get(entry.get("id"), []))
            )
            if quarantined:
                tally.records_quarantined += 1
            else:
                tally.records_kept += 1
        listed = {entry.get("id") for entry in images}
        orphans = [
            a
            for a in document.get("annotations", [])
            if not isinstance(a, dict) or a.get("image_id") not in listed
        ]
        tally.other_files = len(orphans)
        for side, target in ((False, clean), (True, quarantine)):
            if target is None:
                continue
            ids = {entry.get("id") for entry in sides[side]}
            kept = [
                a for a in document.get("annotations", []) if isinstance(a, dict) and a.get("image_id") in ids
            ]
            output = {**document, "images": sides[side], "annotations": kept + (orphans if not side else [])}
            # Python's json, as pycocotools reads it: NaN stays NaN (orjson would write null)
            target.write_text(json.dumps(output, separators=(",", ":")), encoding="utf-8")
        return tally

    def tally_output(self, verdicts: Verdicts, target: Path, side: str) -> Ledger:
        ledger = Ledger()
        if not target.exists():
            return ledger
        document = load_coco(target)
        annotations = _by_image(document)
        for number, entry in enumerate(e for e in document["images"] if isinstance(e, dict)):
            key = str(entry.get("file_name", f"#{number}"))
            ledger.add_record(*_ledger_entry(key, entry, annotations.get(entry.get("id"), [])))
        return ledger


def _by_image(document: dict[str, Any]) -> dict[Any, list[dict]]:
    found: dict[Any, list[dict]] = defaultdict(list)
    for annotation in document.get("annotations", []):
        if isinstance(annotation, dict):
            found[annotation.get("image_id")].append(annotation)
    return found


def _ledger_entry(key: str, entry: dict, annotations: list[dict]) -> tuple[int, bytes, bytes]:
    """An image entry's identity and contents: the entry and its annotations, canonical JSON."""

    def canonical(value: Any) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

    ordered = sorted(annotations, key=canonical)
    return identity_seed(key, entry.get("id")), canonical(entry), canonical(ordered)
