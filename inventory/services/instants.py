"""One rule for a moment given with a UTC offset: it must be a moment Python and the stored
values can name in UTC, written with an offset PostgreSQL can read. `9999-12-31T23:59:59-01:00`
parses (its local year is 9999) but is a moment of year 10000 in UTC, which no datetime holds: it
would pin a watermark for ever, and compare or convert with an OverflowError wherever it is used.
Python takes offsets of up to a day, to the microsecond; PostgreSQL reads its text (a stored
watermark value, cast to `timestamptz` at every merge; a bound parameter, which psycopg2 sends as
that text) only for offsets of whole seconds, at most 15:59:59 either way: a value past that would
be stored, then fail every merge after it (tests/sql/test_instant_offsets.py holds the two to the
same answers)."""

from datetime import UTC, datetime, timedelta

from inventory.services.errors import InvalidInput

# PostgreSQL's largest time zone displacement in a timestamptz's text (MAX_TZDISP_HOUR is 15)
OFFSET_LIMIT = timedelta(hours=16)


def instant_checked(parsed: datetime, *, field: str, given=None) -> datetime:
    """`parsed` (aware) as it is, once its UTC form is known to lie in years 1-9999 and its UTC
    offset to be one PostgreSQL reads."""
    shown = given if given is not None else parsed.isoformat()
    offset = parsed.utcoffset()
    if offset.microseconds or abs(offset) >= OFFSET_LIMIT:
        raise InvalidInput(
            field,
            f"{shown!r} has a UTC offset PostgreSQL cannot read: an offset is whole seconds, "
            "at most 15:59:59 either way",
        )
    try:
        parsed.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(field, f"{shown!r} is a moment outside years 1 to 9999 in UTC") from None
    return parsed
