"""What every source kind's config check shares: the unknown-key rule and telling an object
store URL from a local path. Kept apart from `registry.py`, which imports every kind."""

from urllib.parse import urlparse

from inventory.services.errors import InvalidInput


def is_object_store_path(path) -> bool:
    """`s3://bucket/prefix` and any other fsspec URL (a one-letter scheme is a Windows drive)."""
    if not isinstance(path, str):
        return False
    scheme = urlparse(path).scheme
    return len(scheme) > 1 and scheme != "file"


def check_known_keys(config: dict, known, *, kind: str, field: str = "config") -> None:
    """A key that nothing reads (in a source's config, in a job's sink: `field`) is a typo to
    report, never a setting ignored: InvalidInput naming `<field>.<key>`."""
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise InvalidInput(
            f"{field}.{unknown[0]}", f"is not a {kind} setting; use {', '.join(sorted(known))}"
        )
