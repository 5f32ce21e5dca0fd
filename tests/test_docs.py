"""The README (the front door) and docs/ (the reference) document everything users rely on,
and every link between them resolves."""

from __future__ import annotations

import re

import pytest
import typer.main
from conftest import REPO

from scrub.checks import catalogue
from scrub.checks.base import DOC_SECTIONS
from scrub.cli import app
from scrub.manifest import FIELDS, OPTIONAL_FIELDS

README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


@pytest.mark.parametrize(
    "check", [c for c in catalogue() if not c.id.startswith("test-")], ids=lambda c: c.id
)
def test_every_check_is_documented_in_full(check):
    assert check.summary
    sections = check.sections
    for section in DOC_SECTIONS:
        assert sections.get(section), f"{check.id}: docstring lacks '{section}:'"
    assert f"`{check.id}`" in page("checks.md"), f"{check.id} missing from docs/checks.md"
    # whole sentences, unwrapped (`scrub checks` cut three summaries at their docstring's line end)
    assert check.summary.endswith((".", ")")) and "\n" not in check.summary, check.summary
    assert all("\n" not in text.replace("\n\n", "") for text in sections.values()), check.id


def test_every_command_and_option_is_in_the_readme():
    command = typer.main.get_command(app)
    options = 0
    reference = page("commands.md")
    for name, sub in command.commands.items():
        assert f"scrub {name}" in reference
        for parameter in sub.params:
            # typer may bring its own click: ask the parameter what it is, not isinstance
            if parameter.param_type_name == "option":
                options += 1
                for option in parameter.opts:
                    if option.startswith("--") and option != "--help":
                        assert option in reference, f"{name} {option} missing from docs/commands.md"
    assert options > 40  # scan's and fix's options were seen (the check cannot pass vacuously)


def test_every_config_key_is_in_the_readme():
    from scrub.options.keys import COMMAND_LINE_ONLY, KEYS

    section = page("configuration.md")
    for name in set(KEYS) - COMMAND_LINE_ONLY:
        assert f"`{name}`" in section, f"config key {name} missing from docs/configuration.md"


def test_manifest_fields_and_exit_codes_are_documented():
    outputs = page("outputs.md")
    for field in FIELDS + OPTIONAL_FIELDS:
        assert f"`{field}`" in outputs
    from scrub.errors import ExitCode

    table = README.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in [*ExitCode, 130]:
        assert re.search(rf"\|\s*`{int(code)}`\s*\|", table), (
            f"exit code {int(code)} missing from the README's table"
        )


def test_readme_opens_with_the_two_commands():
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", README, re.S)
    first, second = blocks[0].strip(), blocks[1].strip()
    assert "scrub scan sample_data/images" in first and len(first.splitlines()) == 1
    assert "pytest" in second and len(second.splitlines()) == 1
    ci = (REPO / ".ci" / "run").read_text()
    assert second in ci  # CI runs exactly the README's test command


def test_every_summary_field_is_documented(tmp_path):
    import scrub

    result = scrub.scan(
        REPO / "sample_data" / "images", manifest=tmp_path / "m.jsonl", cache=tmp_path / "cache"
    )
    outputs = page("outputs.md")
    for field in result.summary.to_dict():
        assert f"`{field}`" in outputs or f'"{field}"' in outputs, (
            f"summary field {field} missing from docs/outputs.md"
        )


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_readme_and_docs_resolve():
    files = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    checked = 0
    for source in files:
        text = source.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (source.parent / path).resolve() if path else source
            assert resolved.exists(), f"{source.name}: link to missing {target}"
            if anchor:
                headings = {_slug(h) for h in re.findall(r"^#{1,6} (.*)$", resolved.read_text(), re.M)}
                assert anchor in headings, f"{source.name}: no heading #{anchor} in {resolved.name}"
            checked += 1
    assert checked > 30


def test_the_readme_shows_what_its_first_command_prints(tmp_path):
    """The front door's sample output is what `scrub scan sample_data/images` prints (run from a
    folder whose sample_data is the repository's): only the timings and the absolute path the
    README shortens to `...` may differ."""
    import subprocess
    import sys

    shown = README.split("The first command prints", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    (tmp_path / "sample_data").symlink_to(REPO / "sample_data")
    done = subprocess.run(
        [sys.executable, "-m", "scrub", "scan", "sample_data/images"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr

    def normal(text: str) -> list[str]:
        text = text.replace(str(REPO), "...")
        text = re.sub(r"in \d+\.\d+ s \([\d,]+ records/s", "in S s (R records/s", text)
        return [line.rstrip() for line in text.strip().splitlines()]

    assert normal(done.stdout) == normal(shown)
