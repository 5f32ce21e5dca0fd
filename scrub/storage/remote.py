"""Errors of object stores said in one line: a missing bucket, object or credential, or an
unreachable store, is an unusable dataset (exit 2), never an SDK's traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from scrub.errors import UnusableDataset, UsageError
from scrub.storage.base import Location


@contextmanager
def remote_errors(path: Location) -> Iterator[None]:
    """Object-store errors as one line: a missing credential, bucket or object is an unusable
    dataset (exit 2), not a traceback."""
    try:
        yield
    except (UnusableDataset, UsageError):
        raise
    except FileNotFoundError:
        raise UnusableDataset(f"{path}: no such object or bucket") from None
    except TypeError as error:  # an option the store's filesystem does not take
        if "keyword argument" not in str(error):
            raise
        raise UsageError(f"storage-options: {first_words(error)}") from None
    except Exception as error:  # the SDKs' own error types vary by store and version
        name = type(error).__name__
        if isinstance(error, PermissionError) or "Credential" in name or "AccessDenied" in str(error):
            raise UnusableDataset(
                f"{path}: access denied or no credentials ({first_words(error)}): set them as the "
                "SDK expects (AWS_ACCESS_KEY_ID..., ~/.aws) or in storage-options"
            ) from None
        if isinstance(error, OSError) or "Endpoint" in name or "Connect" in name:
            raise UnusableDataset(f"{path}: cannot reach the object store ({first_words(error)})") from None
        raise


def first_words(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."
