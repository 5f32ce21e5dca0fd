"""The README and the check docstrings document everything users rely on."""

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


@pytest.mark.parametrize("check", [c for c in catalogue() if not c.id.startswith("test-")], ids=lambda c: c.id)
def test_every_check_is_documented_in_full(check):
    assert check.summary
    sections = check.sections
    for section in DOC_SECTIONS:
        assert sections.get(section), f"{check.id}: docstring lacks '{section}:'"
    assert f"`{check.id}`" in README, f"{check.id} missing from the README"


def test_every_command_and_option_is_in_the_readme():
    command = typer.main.get_command(app)
    options = 0
    for name, sub in command.commands.items():
        assert f"scrub {name}" in README
        for parameter in sub.params:
            # typer may bring its own click: ask the parameter what it is, not isinstance
            if parameter.param_type_name == "option":
                options += 1
                for option in parameter.opts:
                    if option.startswith("--") and option != "--help":
                        assert option in README, f"{name} {option} missing from the README"
    assert options > 40  # scan's and fix's options were seen (the check cannot pass vacuously)


def test_every_config_key_is_in_the_readme():
    from scrub.options import COMMAND_LINE_ONLY, KEYS

    section = README.split("### Configuration", 1)[1].split("### Baselines", 1)[0]
    for name in set(KEYS) - COMMAND_LINE_ONLY:
        assert f"`{name}`" in section, f"config key {name} missing from the README's Configuration"


def test_manifest_fields_and_exit_codes_are_in_the_readme():
    for field in FIELDS + OPTIONAL_FIELDS:
        assert f"`{field}`" in README
    for code in ("0", "1", "2"):
        assert re.search(rf"\|\s*`?{code}`?\s*\|", README), f"exit code {code} missing"


def test_readme_opens_with_the_two_commands():
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", README, re.S)
    first, second = blocks[0].strip(), blocks[1].strip()
    assert "scrub scan sample_data/images" in first and len(first.splitlines()) == 1
    assert "pytest" in second and len(second.splitlines()) == 1
    ci = (REPO / ".ci" / "run").read_text()
    assert second in ci  # CI runs exactly the README's test command
