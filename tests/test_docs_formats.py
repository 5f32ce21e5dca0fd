"""Every list of the formats `--format` takes, in the README and docs/ (the `--format` flag's
row, the `format` config key's), names exactly the formats of the format table
(`scrub.formats`): a format added to the table and not to a list, or a list naming one the
table does not hold, fails here."""

from __future__ import annotations

import re

from conftest import REPO

from scrub.formats import BUILT_IN

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: a line that lists the formats: the `--format` flag's row, the `format` config key's row
FORMAT_LIST = re.compile(r"^\| `(--)?format` \|")


def listed_formats() -> dict[str, set[str]]:
    """page:line -> the backticked names on each line that lists the formats."""
    found = {}
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            if FORMAT_LIST.match(line):
                names = set(re.findall(r"`([a-z0-9]+)`", line)) - {"auto", "format"}
                found[f"{page.relative_to(REPO)}:{number}"] = names
    return found


def test_every_format_list_in_the_docs_is_the_format_table():
    lists = listed_formats()
    assert {where.split(":")[0] for where in lists} >= {"docs/commands.md", "docs/configuration.md"}
    for where, names in lists.items():
        assert names == set(BUILT_IN), (
            f"{where}: missing {sorted(set(BUILT_IN) - names)}, not formats {sorted(names - set(BUILT_IN))}"
        )
