"""``python -m scrub``."""

from scrub.cli import app

app(prog_name="scrub")
