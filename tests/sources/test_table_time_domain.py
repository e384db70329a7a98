"""The `table` connector's timestamp domain against the driver that reads the values.

Discovery's bounds statement (`table_time_bounds`) decides in SQL which values a slice can hold;
psycopg2 then turns the smallest and largest into Python datetimes, and a slice's end is one
microsecond past a value. Differential: each value of a corpus (the edges of years 1 and 9999, the
infinities, BC dates, other time zones) and of generated variants, alone in a table, through the
very statement discovery sends on a connection opened as discovery opens it (`source_connection`,
the role's TimeZone set ahead of UTC), must be counted outside exactly when psycopg2 cannot fetch
it as a datetime that stands for it exactly and has a successor.
"""

import random
from datetime import timedelta

import psycopg2
import pytest

from inventory.sources import table as table_source
from inventory.sources.remote_database import source_connection
from tests.support.table_source import SOURCE_ENV

pytestmark = pytest.mark.django_db(transaction=True)

EDGES = [
    "0001-01-01 00:00:00",
    "0001-01-01 00:00:00.000001",
    "0001-12-31 23:59:59 BC",
    "0044-03-15 12:00:00 BC",
    "1970-01-01 00:00:00",
    "2026-12-06 21:00:00.123456",
    "9999-12-31 00:00:00",
    "9999-12-31 23:30:00",
    "9999-12-31 23:59:59.999998",
    "9999-12-31 23:59:59.999999",
    "10000-01-01 00:00:00",
    "294276-12-31 23:59:59",
    "infinity",
    "-infinity",
]
ZONES = ["", "+00", "+05:30", "-12", "+14"]


def _generated(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    values = []
    for _ in range(count):
        year = rng.choice([1, 2, 9998, 9999, 10000, rng.randint(1, 12000)])
        month = rng.choice([1, 12, rng.randint(1, 12)])
        day = rng.choice([1, 28, rng.randint(1, 28)]) if month != 12 else rng.choice([1, 31])
        clock = rng.choice(
            ["00:00:00", "23:59:59.999999", "23:59:59.999998", "12:34:56.5"]
            + [f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02}:{rng.randint(0, 59):02}"]
        )
        era = " BC" if rng.random() < 0.1 else ""
        values.append(f"{year:04}-{month:02}-{day:02} {clock}{era}")
    return values


def _held(cursor) -> bool:
    """What the driver makes of the stored value on discovery's connection: a datetime that
    stands for it exactly (psycopg2 reads 'infinity' as datetime.max, which is another value) and
    one microsecond past which is a datetime too."""
    try:
        cursor.execute("SELECT v FROM probe")
        value = cursor.fetchone()[0]
        value + timedelta(microseconds=1)
    except (ValueError, OverflowError):
        return False
    cursor.execute("SELECT v = %s FROM probe", [value])
    return cursor.fetchone()[0]


@pytest.mark.parametrize("column_type", ["timestamptz", "timestamp"])
def test_the_bounds_statement_counts_a_value_outside_exactly_when_the_driver_cannot_hold_it(
    source_dsn, column_type
):
    name = source_dsn.split("dbname='")[1].split("'")[0]
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        # discovery's connections set UTC themselves; without that, +05:30 turns the last hours
        # of year 9999 into year 10000
        cursor.execute(f"ALTER DATABASE \"{name}\" SET timezone TO 'Asia/Kolkata'")
        cursor.execute(f"CREATE TABLE probe (v {column_type})")
    config = {"dsn_env": SOURCE_ENV, "table": "probe", "column": "v", "column_type": column_type}
    bounds = table_source._statements(config)["bounds"]
    domain = table_source._time_domain(column_type)
    corpus = [
        f"{edge}{zone}" if column_type == "timestamptz" and edge[0].isdigit() else edge
        for edge in EDGES
        for zone in (ZONES if column_type == "timestamptz" else [""])
    ] + _generated(150, seed=48 if column_type == "timestamp" else 49)
    disagree = []
    # each value committed on its own (a psycopg2 connection used as a context manager would
    # hold one transaction, and its lock, across them all)
    writer = psycopg2.connect(source_dsn)
    writer.autocommit = True
    with (
        writer.cursor() as write,
        source_connection(config, field="config.dsn_env") as conn,
        conn.cursor() as cursor,
    ):
        for literal in corpus:
            write.execute("TRUNCATE probe")
            try:
                write.execute(f"INSERT INTO probe VALUES (%s::{column_type})", [literal])
            except psycopg2.DataError:
                continue  # not a value of the column type at all: no table holds it
            cursor.execute(bounds, domain)
            low, high, outside = cursor.fetchone()
            held = _held(cursor)
            if held != (outside == 0) or (held and low != high):
                disagree.append((literal, held, outside))
    writer.close()
    assert not disagree, disagree
