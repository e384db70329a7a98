"""One rule for a moment given with a UTC offset: it must be a moment Python and the stored
values can name in UTC. `9999-12-31T23:59:59-01:00` parses (its local year is 9999) but is a
moment of year 10000 in UTC, which no datetime holds: it would pin a watermark for ever, and
compare or convert with an OverflowError wherever it is used."""

from datetime import UTC, datetime

from inventory.services.errors import InvalidInput


def instant_checked(parsed: datetime, *, field: str, given=None) -> datetime:
    """`parsed` (aware) as it is, once its UTC form is known to lie in years 1-9999."""
    try:
        parsed.astimezone(UTC)
    except OverflowError:
        shown = given if given is not None else parsed.isoformat()
        raise InvalidInput(field, f"{shown!r} is a moment outside years 1 to 9999 in UTC") from None
    return parsed
