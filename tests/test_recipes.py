"""docs/internals.md's recipes name every file a newcomer touches: each file a recipe names
exists, and the plugin format's recipe is enough to build the format: its files alone, copied
where nothing else of the repository lies, make a format `scrub scan` finds by its prefix and
`scrub fix` writes as a pair."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
from conftest import REPO

INTERNALS = REPO / "docs" / "internals.md"
#: a recipe's file: a list item opening with a backticked path
FILE_ITEM = re.compile(r"^- `([\w./-]+)`", re.MULTILINE)


def recipes() -> dict[str, str]:
    """Each recipe's title -> its text."""
    text = INTERNALS.read_text(encoding="utf-8")
    parts = re.split(r"^## Recipe: (.+)$", text, flags=re.MULTILINE)
    return {title: body.split("\n# ")[0] for title, body in zip(parts[1::2], parts[2::2])}


def test_there_is_a_recipe_for_a_format_a_check_and_an_option():
    assert set(recipes()) == {"a format of your own package", "a format in scrub", "a check", "an option"}


def test_every_file_a_recipe_names_exists():
    for title, body in recipes().items():
        named = FILE_ITEM.findall(body) + re.findall(
            r"`((?:scrub|tests|docs|examples|sample_data)/[\w./-]+)`", body
        )
        assert len(FILE_ITEM.findall(body)) >= 3, title
        for path in named:
            if "NAME" in path or "KIND" in path:  # a template: the folder must exist
                path = os.path.dirname(path)
            assert (REPO / path).exists(), f"recipe {title!r} names {path}, which does not exist"


def test_the_plugin_format_is_built_from_its_recipe_alone(tmp_path):
    """The recipe's files of the example, copied into an empty folder that is all the import
    path has besides scrub: the entry point registers the format, a prefix names its dataset,
    and fix writes the pair. (The suite itself runs on it in `tests/test_toy_format.py`.)"""
    recipe = recipes()["a format of your own package"]
    files = [path for path in FILE_ITEM.findall(recipe) if path.startswith("examples/toy_format/")]
    example = REPO / "examples" / "toy_format"
    shipped = {str(path.relative_to(REPO)) for path in example.rglob("*") if path.is_file()}
    shipped = {path for path in shipped if "__pycache__" not in path}
    assert set(files) == shipped, "the recipe names every file of the example, and only those"
    package = tmp_path / "package"
    for path in files:
        target = package / os.path.relpath(path, "examples/toy_format")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, target)
    data = tmp_path / "data"
    data.mkdir()
    build = "import sys, numpy as np, toyrows; r = np.ones((6, 2), 'f4'); r[2, 0] = np.nan; "
    build += "toyrows.write_pair(sys.argv[1], r + np.arange(6)[:, None], np.arange(6) % 2)"
    environment = {**os.environ, "PYTHONPATH": f"{package}{os.pathsep}{REPO}"}
    subprocess.run([sys.executable, "-c", build, str(data / "train")], check=True, env=environment)
    scrub = [sys.executable, "-m", "scrub"]
    scan = subprocess.run(
        [*scrub, "scan", "train", "-q"], capture_output=True, text=True, cwd=data, env=environment
    )
    assert scan.returncode == 1, scan.stderr  # the NaN row: an error
    assert '"check":"nonfinite-data"' in (data / "train.scrub.jsonl").read_text()
    fix = subprocess.run(
        [*scrub, "fix", "train", "-q"], capture_output=True, text=True, cwd=data, env=environment
    )
    assert fix.returncode == 0, fix.stderr
    assert sorted(p.name for p in data.glob("train.clean*")) == ["train.clean.labels", "train.clean.rows"]
    sys.path.insert(0, str(package))
    try:
        import toyrows

        rows, labels = toyrows.read_pair(data / "train.clean")
    finally:
        sys.path.remove(str(package))
        sys.modules.pop("toyrows", None)
    assert len(rows) == 5 and np.isfinite(rows).all() and list(labels) == [0, 1, 1, 0, 1]
