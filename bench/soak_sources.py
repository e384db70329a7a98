"""The soak's sources: what lands while batches run, and what a reader of each sink must then see.

One small class per source kind, one interface (`Source`):

- `setup()`: the connector over it (and its table, bucket or topic);
- `tick(t)`: the driver's landing step `t`; a source lands its next unit every `every` steps
  (the files source every step, the others fewer: the soak stays short);
- `discover()`: one look of the real discovery of its kind;
- `discovered()`: every unit it landed is registered (an asset covers every row);
- `items()`: the identity of each row's inventory item, {row_id: asset id};
- `expected(mode)`: the `SourceRow`s a reader of a `mode` sink must see.

Every unit holds `rows` rows: new keys, or (every fourth unit) updates of the keys of unit n - 3
(a new value, a null `note` on odd rows: a partial update that coalesce must not blank). Each row
carries `row_id`, `key`, `value`, `note`; its checksum is the checker's (bench/soak_checker.py).

- `FilesSource`: Parquet files renamed into a local directory (`files.directory_discover`);
- `S3Source`: Parquet objects put into a bucket of the S3 test server (moto), discovered by
  listing after the connector's cursor;
- `TableSource`: rows inserted, one transaction per unit, into a table of another PostgreSQL
  database (never Tidemark's own), discovered as id slices;
- `KafkaSource`: one message per row (the row as JSON, one record per produce call) into a
  two-partition topic of the Kafka test broker (Tansu), discovered as offset slices; its jobs keep
  a key_value watermark ({partition: end}), which the checker verifies too (`item_values`), and
  its rows carry `partition` and `offset` into the checksum (the message's identity).
"""

import io
import json
import logging
import os
import re
from pathlib import Path

from bench import soak_checker as sc

COLUMNS = ("row_id", "key", "value", "note")
KAFKA_CONTENT = (*COLUMNS, "partition", "offset")


def unit_rows(n: int, rows: int, prefix: str) -> list[dict]:
    """The rows of unit `n` of a source whose row ids start with `prefix`."""
    updates = n % 4 == 3
    out = []
    for r in range(rows):
        key = f"{prefix}k{n - 3:05d}-{r}" if updates else f"{prefix}k{n:05d}-{r}"
        out.append(
            {
                "row_id": f"{prefix}{n:05d}-{r}",
                "key": key,
                "value": f"v{n}-{r}",
                "note": None if updates and r % 2 else f"note {n}-{r}",
            }
        )
    return out


def parquet_bytes(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=pa.schema([(c, pa.string()) for c in COLUMNS]))
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


UNIT_NAME = re.compile(r"-(\d{5})\.parquet$")


class Source:
    """One source kind (see the module's docstring)."""

    name = ""
    prefix = ""
    processor = "soak_tag"
    watermark_type = "int"
    content = COLUMNS

    def __init__(self, *, work: Path, tag: str, rows: int, modes: tuple, every: int = 1):
        self.work, self.tag, self.rows, self.modes, self.every = work, tag, rows, modes, every
        self.landed = 0
        self.connector = None

    # -- landing and discovery --

    def tick(self, t: int) -> None:
        if t % self.every == 0:
            self.land(self.landed)
            self.landed += 1

    def land(self, n: int) -> None:
        raise NotImplementedError

    def discover(self) -> None:
        from inventory.services.discovery import discover

        discover(self.connector)

    def discovered(self) -> bool:
        """Every landed unit has an asset (rows-based sources override)."""
        from inventory.models import Asset

        return Asset.objects.filter(connector=self.connector).count() >= self.landed

    def rows_landed(self) -> list[dict]:
        return [row for n in range(self.landed) for row in unit_rows(n, self.rows, self.prefix)]

    # -- what the checker needs --

    def items(self) -> dict[str, int]:
        """{row_id: asset id} of every landed row: by unit, from the asset's location."""
        from inventory.models import Asset

        unit_of = {
            int(UNIT_NAME.search(location).group(1)): pk
            for pk, location in Asset.objects.filter(connector=self.connector).values_list(
                "id", "location"
            )
        }
        return {
            row["row_id"]: unit_of[n]
            for n in range(self.landed)
            for row in unit_rows(n, self.rows, self.prefix)
        }

    def values(self, row: dict) -> tuple:
        """The values a reader's checksum is computed over (`content`, in order)."""
        return tuple(row[c] for c in self.content)

    def expected(self, mode: str) -> list:
        """What a reader of a `mode` sink must see: each source row (files, delta, iceberg,
        append), or per key the latest version (upsert) or the latest non-null value of each
        column (coalesce)."""
        item_of = self.items()
        rows = [{**row, **self.extra(row)} for row in self.rows_landed()]
        if mode in ("files", "delta", "iceberg", "append"):
            return [
                sc.SourceRow(r["row_id"], sc.checksum(*self.values(r)), item_of[r["row_id"]])
                for r in rows
            ]
        merged: dict[str, tuple[dict, int]] = {}
        for r in rows:
            before = merged.get(r["key"], ({}, 0))[0]
            if mode == "coalesce":
                r = {c: (v if v is not None else before.get(c)) for c, v in r.items()}
            merged[r["key"]] = (r, item_of[r["row_id"]])
        return [
            sc.SourceRow(k, sc.checksum(*self.values(r)), item) for k, (r, item) in merged.items()
        ]

    def extra(self, row: dict) -> dict:
        """Columns a source adds to a row on its way (Kafka: its partition and offset)."""
        return {}

    def item_values(self) -> dict[int, dict] | None:
        """{asset id: the watermark value its batch reports}, for key_value watermarks only."""
        return None

    def close(self) -> None:
        """After the run: let go of clients (the checker needs only what was recorded)."""


class FilesSource(Source):
    name, prefix = "files", "f"

    def setup(self):
        from inventory.services.connectors import connector_create

        self.landing = self.work / "landing"
        self.landing.mkdir(parents=True)
        self.connector = connector_create(
            name=f"{self.tag}-src", kind="files", config={"path": str(self.landing)}
        )
        return self.connector

    def land(self, n: int) -> None:
        aside = self.landing / f".f-{n:05d}.parquet.tmp"  # discovery skips names starting "."
        aside.write_bytes(parquet_bytes(unit_rows(n, self.rows, self.prefix)))
        os.rename(aside, self.landing / f"f-{n:05d}.parquet")

    def discover(self) -> None:
        from inventory.sources.files import directory_discover

        directory_discover(connector=self.connector)


class S3Source(Source):
    """`server`: tests/support/s3_fixtures.py's S3Server; `key_env`/`secret_env` name its credentials."""

    name, prefix = "s3", "s"

    def __init__(self, *, server, bucket: str, key_env: str, secret_env: str, **kwargs):
        super().__init__(**kwargs)
        self.server, self.bucket = server, bucket
        self.key_env, self.secret_env = key_env, secret_env

    def setup(self):
        from inventory.services.connectors import connector_create

        # a line per look (every step of the driver) says nothing the checker does not
        logging.getLogger("inventory.sources.object_store").setLevel(logging.WARNING)
        self.client = self.server.client()
        self.client.create_bucket(Bucket=self.bucket)
        self.connector = connector_create(
            name=f"{self.tag}-s3",
            kind="files",
            config={
                "path": f"s3://{self.bucket}/landing/",
                "endpoint_url": self.server.endpoint_url,
                "region": "us-east-1",
                "key_env": self.key_env,
                "secret_env": self.secret_env,
            },
        )
        return self.connector

    def land(self, n: int) -> None:
        body = parquet_bytes(unit_rows(n, self.rows, self.prefix))
        self.client.put_object(Bucket=self.bucket, Key=f"landing/s-{n:05d}.parquet", Body=body)


class TableSource(Source):
    """A table `soak_rows` in the database `dsn` (never Tidemark's own), named by `dsn_env`."""

    name, prefix = "table", "t"

    def __init__(self, *, dsn: str, dsn_env: str, **kwargs):
        super().__init__(**kwargs)
        self.dsn, self.dsn_env = dsn, dsn_env

    def _execute(self, statement: str, rows=()) -> None:
        import psycopg2

        with psycopg2.connect(self.dsn) as conn, conn.cursor() as cursor:
            if rows:
                cursor.executemany(statement, rows)
            else:
                cursor.execute(statement)
        conn.close()

    def setup(self):
        from inventory.services.connectors import connector_create

        self._execute(
            "CREATE TABLE soak_rows (id bigint PRIMARY KEY, row_id text NOT NULL, "
            "key text NOT NULL, value text, note text)"
        )
        self.connector = connector_create(
            name=f"{self.tag}-table",
            kind="table",
            config={
                "dsn_env": self.dsn_env,
                "table": "soak_rows",
                "column": "id",
                "slice_rows": self.rows,
            },
        )
        return self.connector

    def row_number(self, row_id: str) -> int:
        """The row's `id`: its place in landing order, from 1."""
        n, r = row_id[len(self.prefix) :].split("-")
        return int(n) * self.rows + int(r) + 1

    def land(self, n: int) -> None:
        rows = unit_rows(n, self.rows, self.prefix)
        self._execute(
            "INSERT INTO soak_rows (id, row_id, key, value, note) VALUES (%s, %s, %s, %s, %s)",
            [(self.row_number(r["row_id"]), *(r[c] for c in COLUMNS)) for r in rows],
        )

    def _slices(self) -> list[tuple[int, int, int]]:
        from inventory.models import Asset

        return [
            (pk, int(extra["lower"]), int(extra["upper"]))
            for pk, extra in Asset.objects.filter(connector=self.connector).values_list(
                "id", "extra"
            )
        ]

    def discovered(self) -> bool:
        last = self.landed * self.rows  # ids 1..last landed
        return any(upper > last for _pk, _lower, upper in self._slices()) or last == 0

    def items(self) -> dict[str, int]:
        slices = self._slices()
        out = {}
        for row in self.rows_landed():
            number = self.row_number(row["row_id"])
            out[row["row_id"]] = next(pk for pk, lo, hi in slices if lo <= number < hi)
        return out


class KafkaSource(Source):
    """`broker`: tests/support/kafka_fixtures.py's KafkaBroker."""

    name, prefix = "kafka", "q"
    processor = "soak_kafka"
    watermark_type = "key_value"
    content = KAFKA_CONTENT
    partitions = 2

    def __init__(self, *, broker, **kwargs):
        super().__init__(**kwargs)
        self.broker = broker
        self.offsets: dict[str, tuple[int, int]] = {}  # row_id -> (partition, offset)

    def setup(self):
        from confluent_kafka import Producer

        from inventory.services.connectors import connector_create

        self.topic = self.broker.create_topic_named(
            f"{self.tag}-topic".replace("_", "-"), partitions=self.partitions
        )
        # one record per produce call: the broker reports its end offset right (a Tansu quirk)
        self.producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 0})
        self.connector = connector_create(
            name=f"{self.tag}-kafka",
            kind="kafka",
            config={
                "bootstrap_servers": self.broker.bootstrap,
                "topic": self.topic,
                "slice_messages": self.rows,
            },
        )
        return self.connector

    def land(self, n: int) -> None:
        for r, row in enumerate(unit_rows(n, self.rows, self.prefix)):
            delivered = []
            self.producer.produce(
                self.topic,
                key=row["row_id"].encode(),
                value=json.dumps(row).encode(),
                partition=(n * self.rows + r) % self.partitions,
                on_delivery=lambda err, msg, out=delivered: out.append((err, msg)),
            )
            if self.producer.flush(30) != 0 or not delivered or delivered[0][0] is not None:
                raise RuntimeError(f"the broker did not take message {row['row_id']}: {delivered}")
            message = delivered[0][1]
            self.offsets[row["row_id"]] = (message.partition(), message.offset())

    def _slices(self) -> list[tuple[int, int, int, int]]:
        from inventory.models import Asset

        return [
            (pk, int(e["partition"]), int(e["start"]), int(e["end"]))
            for pk, e in Asset.objects.filter(connector=self.connector).values_list("id", "extra")
        ]

    def discovered(self) -> bool:
        ends: dict[int, int] = {}
        for _pk, partition, _start, end in self._slices():
            ends[partition] = max(ends.get(partition, 0), end)
        return all(offset < ends.get(p, 0) for p, offset in self.offsets.values())

    def items(self) -> dict[str, int]:
        slices = self._slices()
        return {
            row_id: next(pk for pk, p, lo, hi in slices if p == partition and lo <= offset < hi)
            for row_id, (partition, offset) in self.offsets.items()
        }

    def extra(self, row: dict) -> dict:
        partition, offset = self.offsets[row["row_id"]]
        return {"partition": partition, "offset": offset}

    def item_values(self) -> dict[int, dict]:
        return {pk: {str(partition): end} for pk, partition, _start, end in self._slices()}

    def close(self) -> None:
        self.producer = None  # its client goes with it: no reconnecting to a stopped broker
