"""Checks every config shares, a source's or a sink's: the unknown-key rule, and how often a
connector is looked at (`discover_seconds`, read by the schedule)."""

from inventory.services.errors import InvalidInput


def check_known_keys(config: dict, known, *, kind: str, field: str = "config") -> None:
    """A key that nothing reads (in a source's config, in a job's sink: `field`) is a typo to
    report, never a setting ignored: InvalidInput naming `<field>.<key>`."""
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise InvalidInput(
            f"{field}.{unknown[0]}", f"is not a {kind} setting; use {', '.join(sorted(known))}"
        )


DEFAULT_DISCOVER_SECONDS = 60
MAX_DISCOVER_SECONDS = 31_536_000  # a year; beat's interval column holds up to 2**31 - 1


def _discover_seconds_valid(value) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int)
        and 1 <= value <= MAX_DISCOVER_SECONDS
    )


def check_discover_seconds(config: dict) -> None:
    """`discover_seconds`, when given, is the whole number of seconds between discoveries: a value
    beat cannot schedule is InvalidInput naming it, not a failing schedule sync later."""
    if "discover_seconds" in config and not _discover_seconds_valid(config["discover_seconds"]):
        raise InvalidInput(
            "config.discover_seconds",
            f"must be a whole number of seconds from 1 to {MAX_DISCOVER_SECONDS}, "
            f"got {config['discover_seconds']!r}",
        )


def discover_seconds(config: dict) -> int:
    """The seconds between discoveries of a connector; the default for a value stored before
    check_discover_seconds existed, so one connector never stops the schedules of all."""
    value = (config or {}).get("discover_seconds")
    return value if _discover_seconds_valid(value) else DEFAULT_DISCOVER_SECONDS
