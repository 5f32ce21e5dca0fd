"""examples/nightly/: the nightly job really runs, night after night, on a real image folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, manifest_lines
from PIL import Image

NIGHTLY = REPO / "examples" / "nightly"
BASH = shutil.which("bash")


def scrub_bin() -> Path:
    """The folder holding the `scrub` command of the environment running the tests."""
    here = Path(sys.executable).parent
    return here if (here / "scrub").exists() else REPO / ".venv" / "bin"


def jpeg(path: Path, colour: tuple[int, int, int]) -> bytes:
    """A 32x32 JPEG of random blocks drawn from ``colour``: each colour another picture (one
    colour alone is constant-image; one drawing in other colours, a near-duplicate)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    blocks = np.random.default_rng(list(colour)).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    Image.fromarray(blocks).resize((32, 32), Image.Resampling.NEAREST).save(path, "JPEG")
    return path.read_bytes()


def run_nightly(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SCRUB_")}
    environ["PATH"] = f"{scrub_bin()}{os.pathsep}{environ.get('PATH', '')}"
    environ.update(env)
    return subprocess.run(
        [BASH, str(NIGHTLY / "nightly.sh"), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_three_nights(tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    for i in range(3):  # distinct colours: no duplicates
        jpeg(data / "cat" / f"{i}.jpg", (i * 20 + 10, 0, 0))
        jpeg(data / "dog" / f"{i}.jpg", (0, i * 20 + 10, 0))
    whole = jpeg(tmp_path / "spare" / "a.jpg", (200, 200, 0))
    (data / "cat" / "truncated.jpg").write_bytes(whole[:100])

    # Night 1: no baseline yet: the scan writes one (scrub exits 1: a known issue) and the job succeeds.
    night = run_nightly(tmp_path, str(data), str(state))
    assert night.returncode == 0, night.stdout + night.stderr
    assert "baseline created" in night.stdout
    baseline = manifest_lines(state / "baseline.jsonl")
    assert [(line["key"], line["check"]) for line in baseline] == [("cat/truncated.jpg", "corrupt-image")]
    assert (state / "baseline.scan.json").is_file()

    # Night 2, nothing changed (DATA and STATE from the environment): exit 0, tonight is promoted.
    night = run_nightly(tmp_path, SCRUB_DATA=str(data), SCRUB_STATE=str(state))
    assert night.returncode == 0, night.stdout + night.stderr
    summary = json.loads((state / "summary.json").read_text())
    assert summary["baseline"]["persisting"] >= 1 and summary["baseline"]["new"] == 0
    assert summary["cache"]["reused"] > 0
    assert not (state / "tonight.jsonl").exists() and not (state / "tonight.scan.json").exists()
    promoted = manifest_lines(state / "baseline.jsonl")
    assert [(line["key"], line["status"]) for line in promoted] == [("cat/truncated.jpg", "persisting")]
    assert (
        json.loads((state / "baseline.scan.json").read_text())["baseline"]["persisting"] == 1
    )  # tonight's record

    # Night 3: a new truncated JPEG: exit 1, and the baseline is kept.
    before = (state / "baseline.jsonl").read_bytes()
    other = jpeg(tmp_path / "spare" / "b.jpg", (0, 90, 200))
    (data / "dog" / "truncated.jpg").write_bytes(other[:150])
    night = run_nightly(tmp_path, str(data), str(state))
    assert night.returncode == 1, night.stdout + night.stderr
    assert "baseline kept" in night.stderr
    assert (state / "baseline.jsonl").read_bytes() == before
    assert "dog/truncated.jpg" not in (state / "baseline.jsonl").read_text()
    tonight = {
        (line["key"], line["check"]): line["status"] for line in manifest_lines(state / "tonight.jsonl")
    }
    assert tonight == {
        ("cat/truncated.jpg", "corrupt-image"): "persisting",
        ("dog/truncated.jpg", "corrupt-image"): "new",
        ("*", "record-count-change"): "new",  # 7 records where the baseline had 6: drift, a warning
    }
    summary = json.loads((state / "summary.json").read_text())
    assert summary["baseline"]["new_errors"] == 1 and summary["cache"]["reused"] > 0


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_an_unusable_dataset_fails_and_leaves_no_baseline(tmp_path):
    night = run_nightly(tmp_path, str(tmp_path / "missing"), str(tmp_path / "state"))
    assert night.returncode == 2, night.stdout + night.stderr
    assert not (tmp_path / "state" / "baseline.jsonl").exists()


def test_the_script_is_valid_bash():
    if BASH is None:
        pytest.skip("needs bash")
    subprocess.run([BASH, "-n", str(NIGHTLY / "nightly.sh")], check=True)
    if shutil.which("shellcheck"):
        subprocess.run(["shellcheck", str(NIGHTLY / "nightly.sh")], check=True)


def test_the_github_workflow_is_scheduled():
    workflow = yaml.safe_load((NIGHTLY / "github-actions.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1: a bare `on` key is the boolean True
    assert triggers["schedule"][0]["cron"] == "30 2 * * *"
    assert "workflow_dispatch" in triggers
    steps = workflow["jobs"]["scan"]["steps"]
    uses = [step.get("uses", "") for step in steps]
    assert "actions/upload-artifact@v4" in uses and any(u.startswith("actions/cache") for u in uses)
    assert next(s for s in steps if s.get("uses") == "actions/upload-artifact@v4")["if"] == "always()"


def test_the_systemd_units_and_crontab():
    timer = (NIGHTLY / "scrub-nightly.timer").read_text()
    assert "OnCalendar=*-*-* 02:30:00" in timer and "Persistent=true" in timer
    service = (NIGHTLY / "scrub-nightly.service").read_text()
    assert "Type=oneshot" in service and "nightly.sh" in service and "Environment=SCRUB_DATA=" in service
    cron = [
        line for line in (NIGHTLY / "crontab").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert (
        len(cron) == 1 and cron[0].startswith("30 2 * * * ") and "nightly.sh" in cron[0] and ">>" in cron[0]
    )
