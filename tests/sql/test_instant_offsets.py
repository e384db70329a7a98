"""The seam between Tidemark's check of a moment with a UTC offset (services/instants.py, through
watermarks.parse_value) and PostgreSQL's reading of the text it stores: a datetime watermark
value is cast to `timestamptz` at every merge (tidemark_merge_watermark). The same values, a
corpus and generated ones, go through both: what the check accepts is stored as text PostgreSQL
reads as the instant the check parsed (and the given text, where PostgreSQL reads it, as that
instant too), and what it refuses PostgreSQL cannot read or reads as a moment outside years
1-9999 in UTC (which no Python datetime holds)."""

import random
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import psycopg2
import pytest
from django.db import connection, transaction

from inventory.models import WatermarkType
from inventory.services.errors import InvalidInput
from inventory.services.watermarks import parse_value

pytestmark = pytest.mark.django_db

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

CORPUS = [
    "2026-01-01T00:00:00+00:00",
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00+15:59:59",
    "2026-01-01T00:00:00-15:59:59",
    "2026-01-01T00:00:00+16:00",
    "2026-01-01T00:00:00-16:00",
    "2026-01-01T00:00:00+20:00",
    "2026-01-01T00:00:00-23:59",
    "2026-01-01T00:00:00+05:30:15",
    "2026-01-01T00:00:00+05:30:15.123456",
    "2026-01-01T00:00:00+00:00:00.000001",
    "2026-06-30T12:34:56.789+14:00",
    "0001-01-01T00:00:00+00:00",
    "0001-01-01T00:00:00+15:00",
    "0001-01-01T10:00:00+09:59:59",
    "9999-12-31T23:59:59.999999+00:00",
    "9999-12-31T23:59:59.999999-15:00",
    "9999-12-31T20:00:00-03:59:59",
]


def _generated(count: int, seed: int = 48) -> list[str]:
    rng = random.Random(seed)
    values = []
    for _ in range(count):
        moment = datetime(rng.choice([1, 2, 1970, 2026, 9998, 9999]), 1, 1) + timedelta(
            seconds=rng.randrange(0, 366 * 86400), microseconds=rng.randrange(0, 10**6)
        )
        moment = min(moment, datetime(9999, 12, 31, 23, 59, 59, 999999))
        grain = rng.choice(["minutes", "seconds", "microseconds"])
        limit = 86400 * 10**6 - 1
        micros = rng.randrange(-limit, limit + 1)
        if grain == "minutes":
            micros -= micros % (60 * 10**6)
        elif grain == "seconds":
            micros -= micros % 10**6
        offset = timedelta(microseconds=micros)
        values.append(moment.replace(tzinfo=timezone(offset)).isoformat())
    return values


def _postgres_epoch(text: str) -> Decimal | None:
    """The instant PostgreSQL reads from `text` (seconds since the epoch), None if it cannot."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT extract(epoch FROM %s::timestamptz)", [text])
            return cursor.fetchone()[0]
    except psycopg2.Error:
        return None
    except Exception as exc:  # Django wraps the driver's errors
        if isinstance(exc.__cause__, psycopg2.Error):
            return None
        raise


def _epoch(moment: datetime) -> Decimal:
    delta = moment - EPOCH
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / 10**6


def _first_year_second() -> Decimal:
    return _epoch(datetime(1, 1, 1, tzinfo=UTC))


def _past_last_year() -> Decimal:
    return _epoch(datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) + Decimal("0.000001")


@pytest.mark.parametrize("given", CORPUS + _generated(200))
def test_the_check_and_postgresql_agree_on_a_moment_with_an_offset(given):
    read = _postgres_epoch(given)
    try:
        stored = parse_value(WatermarkType.DATETIME, given, field="watermark_value")
    except InvalidInput as refused:
        assert refused.field == "watermark_value"
        # refused: PostgreSQL cannot read it, or reads a moment no Python datetime holds
        assert read is None or not (_first_year_second() <= read < _past_last_year()), given
        return
    # accepted: what is stored (the text every merge casts) is read as the instant Tidemark
    # parsed; and where PostgreSQL can read the text as given, it reads that instant too
    instant = _epoch(datetime.fromisoformat(given))
    assert _postgres_epoch(stored) == instant, (given, stored)
    assert read is None or read == instant, given


def test_a_value_past_postgresqls_offsets_is_refused_naming_its_field():
    with pytest.raises(InvalidInput) as refused:
        parse_value(WatermarkType.DATETIME, "2026-01-01T00:00:00+20:00", field="watermark_value")
    assert refused.value.field == "watermark_value"
    assert "15:59:59" in refused.value.message
