"""The demo's order events: Parquet files landing in the demo's directory, a few per day.

The events are dated relative to the moment the demo runs: its DAYS days end at the minute it
started (`day_one`), so a job that processed them all is a few minutes behind in source time,
as the dashboard's "caught up" says, never months.
"""

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

CITIES = ["Lisbon", "Oslo", "Lyon", "Graz", "Turin", "Ghent", None]
DAYS = 4  # the demo writes days 1-3 first, then day 4
ROWS = 300  # per file, one every 144 s: a file covers 12 hours
EVENT_SECONDS = 144


def day_one(now: datetime | None = None) -> datetime:
    """When the demo's first day begins: DAYS days before the current minute began."""
    now = now or datetime.now(UTC)
    return now.replace(second=0, microsecond=0) - timedelta(days=DAYS)


def write_orders(
    landing: Path,
    *,
    first_day: int,
    days: int,
    start: datetime,
    files_per_day: int = 2,
    renames: bool = False,
) -> list[Path]:
    """Order events of days `first_day`.. of the demo, day 1 beginning at `start` (day_one);
    with `renames`, the events carry only a new customer name (a partial update: email and city
    are null, so `coalesce` keeps the stored ones)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    written = []
    for day in range(first_day, first_day + days):
        for part in range(files_per_day):
            rng = random.Random(day * 100 + part)
            begins = start + timedelta(days=day - 1, hours=12 * part)
            rows = ROWS
            first_id = (day * 10 + part) * 1000
            customers = [rng.randint(1, 40) for _ in range(rows)]
            table = pa.table(
                {
                    "order_id": pa.array(range(first_id, first_id + rows), pa.int64()),
                    "customer_id": pa.array(customers, pa.int64()),
                    "amount": pa.array(
                        [round(rng.uniform(5, 250), 2) for _ in range(rows)], pa.float64()
                    ),
                    "event_time": pa.array(
                        [begins + timedelta(seconds=EVENT_SECONDS * n) for n in range(rows)],
                        pa.timestamp("us", "UTC"),
                    ),
                    # partial customer records: most events carry only some fields
                    "email": pa.array(
                        [
                            None if renames or rng.random() > 0.3 else f"c{c}@example.com"
                            for c in customers
                        ],
                        pa.string(),
                    ),
                    "name": pa.array(
                        [
                            f"Customer {c} (renamed)"
                            if renames
                            else (f"Customer {c}" if rng.random() < 0.2 else None)
                            for c in customers
                        ],
                        pa.string(),
                    ),
                    "city": pa.array(
                        [None if renames else rng.choice(CITIES) for _ in customers],
                        pa.string(),
                    ),
                }
            )
            path = landing / f"orders-{begins:%Y-%m-%d-%H}h.parquet"
            staged = landing / f".{path.name}.part"  # matches no pattern: discovery skips it
            pq.write_table(table, staged)
            written.append((staged, path))
            time.sleep(0.01)  # distinct modification times: discovery registers in this order
    # the files arrive together (renamed in one go, at the end): a periodic discovery that ran
    # while they were being written would otherwise register some apart from the others
    for staged, path in written:
        staged.rename(path)
    return [path for _, path in written]
