"""The description files of a Hugging Face ``save_to_disk`` folder, as ``datasets.load_from_disk``
reads them before it reads a row: ``state.json`` (its ``_data_files`` name the ``.arrow`` files,
in order), ``dataset_info.json`` (a JSON object), and a ``DatasetDict``'s ``dataset_dict.json``
(its ``splits``) above its split folders.

``load_from_disk`` fails on the whole folder when any of them is damaged, or when a data file
``state.json`` names is missing, though every row may still be intact. A missing data file
leaves no dataset to describe (one line, exit 2: `missing_data_file`); a damaged description
file is an ``unreadable-file`` finding on it (`damaged_descriptions`), the rows are scanned, and
`fix` writes the cleaned copy's description from its data files (`rebuilt_state`,
`rebuilt_info`), so that ``load_from_disk`` loads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the description files `datasets` writes beside (or, for a ``DatasetDict``, above) the data
STATE, INFO, DICTIONARY = "state.json", "dataset_info.json", "dataset_dict.json"


def state_files(folder: Path) -> list[Path]:
    """Each ``state.json`` of a local folder (its own, or its splits'), hidden folders left out."""
    return sorted(
        path
        for path in folder.rglob(STATE)
        if not any(part.startswith(".") for part in path.relative_to(folder).parent.parts)
    )


def is_saved_to_disk(folder: Path) -> bool:
    """Whether a local folder holds a ``save_to_disk`` description, even with no data file left:
    a ``state.json`` naming data files (another program's ``state.json`` is not one), or a
    ``DatasetDict``'s ``dataset_dict.json``."""
    return data_file_names(folder / STATE) is not None or (folder / DICTIONARY).is_file()


def data_file_names(state_path: Path) -> list[str] | None:
    """The data files a ``state.json`` names, in order; None when it is not datasets' state."""
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    return names if all(isinstance(name, str) for name in names) else None


def missing_data_file(folder: Path) -> str | None:
    """Why ``load_from_disk`` finds no dataset in ``folder`` (a data file ``state.json`` names is
    missing), as one line; None when every named file is there."""
    for state_path in state_files(folder):
        for name in data_file_names(state_path) or []:
            if not (state_path.parent / name).is_file():
                named = state_path.relative_to(folder).as_posix()
                return (
                    f"{folder}: {named} names the data file {name}, which is missing: "
                    "datasets.load_from_disk fails on this folder (restore the file, or save the "
                    "dataset again)"
                )
    return None


def damaged_descriptions(folder: Path) -> dict[str, str]:
    """The description files of ``folder`` that ``load_from_disk`` cannot read, by their path in
    the folder, with why."""
    damaged: dict[str, str] = {}
    for state_path in state_files(folder):
        named = state_path.relative_to(folder).as_posix()
        if data_file_names(state_path) is None:
            damaged[named] = "not datasets' state (JSON with the list of data files, '_data_files')"
        info_path = state_path.parent / INFO
        info_named = info_path.relative_to(folder).as_posix()
        if not info_path.is_file():
            damaged[info_named] = "missing"
        elif not isinstance(_json(info_path), dict):
            damaged[info_named] = "not a JSON object"
    dictionary = folder / DICTIONARY
    if dictionary.is_file():
        splits = _json(dictionary)
        if not isinstance(splits, dict) or not isinstance(splits.get("splits"), list):
            damaged[DICTIONARY] = "not a JSON object with the list of splits ('splits')"
    return {
        name: f"{why}: datasets.load_from_disk fails on the whole folder; fix writes the cleaned "
        "copy's from its data files"
        for name, why in damaged.items()
    }


def rebuilt_state(names: list[str], fingerprint: str) -> dict[str, Any]:
    """A ``state.json`` as ``save_to_disk`` writes one for these data files (no format set)."""
    return {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }


def rebuilt_info(features: dict[str, Any]) -> dict[str, Any]:
    """A ``dataset_info.json`` from the features the data files' schema holds (``datasets``
    reads the features from the schema when there are none)."""
    return {"features": features} if features else {}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
