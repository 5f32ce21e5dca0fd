"""Write your own check: flag images too small for your model, by your own bar.

Run it with ``scrub scan DATA --plugin tiny_images`` (with this folder on PYTHONPATH), or
``scrub.scan(path, plugins=["tiny_images"])``. A record check is a pure function of the record
and the options; the image facts (format, mode, size, decode verdict) are computed once by scrub
and shared by every check. Its docstring needs the four sections that `scrub checks ID` shows.
Its id must be new: scrub's own `tiny-image` (an error under `--min-image-side`, 10 px) is taken.
"""

from scrub.checks import CheckOptions, Finding, record_check
from scrub.records import Carries, Record, Severity

MIN_SIDE = 32


@record_check("small-image", Severity.WARNING, needs=Carries.IMAGE)
def small_image(record: Record, options: CheckOptions) -> Finding | None:
    """An image whose shorter side is under 32 pixels.

    What it finds:
        Thumbnails and icons scraped into an image dataset: a project's own bar, above the 10
        pixels under which scrub's built-in `tiny-image` is an error.
    Why it breaks training:
        Upscaled to the model's input size they are a blur that carries no label signal.
    Example:
        `cat/0042.jpg` is 16x16.
    What fix does:
        Nothing by default (a warning); with `--severity warning` it is quarantined.
    """
    facts = record.meta.get("image")
    if facts is None or facts.width is None or facts.height is None:
        return None
    if min(facts.width, facts.height) >= MIN_SIDE:
        return None
    return Finding(
        f"only {facts.width}x{facts.height} pixels", {"width": facts.width, "height": facts.height}
    )
