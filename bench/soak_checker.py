"""A total-queue checker for a soak run, in the style of Jepsen's: it cannot pass a wrong run.

Given every source row (its key, a checksum of its content, the inventory item it came from), each
job's batches and watermark as the inventory holds them after the run, and what a reader of each
sink sees (every row with the checksum of its content and the batch and attempt that wrote it), it
reports, per sink:

- lost: source rows no reader sees;
- duplicated: source rows a reader sees more than once;
- unexpected: rows a reader sees that are no source row;
- altered: rows whose content differs from the source row's (checksum);
- stale: rows not written by the committed attempt of the batch that covers their item (a zombie's
  late write, an uncommitted batch's output, a row under another batch's name, the output of a
  batch a backfill or replay rewrote: a committed batch with `replaced_by` covers nothing);

and, for a table format read at each of its versions (Delta, Iceberg: `versions`, oldest first),
what a reader of an older version saw: a row twice at a version, a row gone from the version after
one that held it (a rewrite made as a delete and a later insert), and a row at a version whose
content is no source row's (`version_twice`, `version_gone`, `version_altered`);

and, per job: committed batches that overlap; outputs left standing (a batch whose output the
inventory still counts as in the sink, not replaced, although it no longer owns its items: a
replay superseded it and a committed batch now covers them, so its replacement's publish should
have replaced it); and a watermark that differs from the end of the
contiguous committed prefix (invariant 3); for a job with a key_value watermark (a Kafka topic's:
{partition: end offset}) given each item's value, also a value other than the per-key maximum over
the items of that prefix. Any of these fails the run: `Report.ok` is False and the command line
exits 1.

No Django and no Spark: the inputs are plain data, so the checker's own tests plant each kind of
error on purpose-built runs (tests/soak/test_checker.py). `read_json_lines_sink`,
`read_postgres_sink`, `read_delta_sink` and `read_iceberg_sink` read a files sink (JSON), a
PostgreSQL sink, a Delta table and an Iceberg table as a reader would, and recompute each row's
checksum from its content; `delta_versions` and `iceberg_versions` read every version.

    python bench/soak_checker.py run.json    # {"sources": ..., "jobs": ..., "sinks": ...}
"""

import argparse
import hashlib
import json
import sys
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

COMMITTED = ("succeeded", "skipped")


def checksum(*values) -> str:
    """The content checksum the soak's processor writes and the checker recomputes."""
    text = json.dumps([None if v is None else str(v) for v in values])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SourceRow:
    key: str
    checksum: str
    item: int  # the inventory item (asset id, offset) the row came from


@dataclass(frozen=True)
class SinkRow:
    key: str
    checksum: str
    batch_id: int
    attempt: int


@dataclass(frozen=True)
class BatchFact:
    id: int
    lo: int  # the item range [lo, hi) it covers
    hi: int
    status: str
    attempt: int
    replaced_by: int | None = None  # the batch that rewrote its range (a backfill or replay)
    published: bool = True  # its output went into the sink (published_attempt is set)


@dataclass
class JobFacts:
    name: str
    start: int  # the job's first position (the watermark before any commit)
    watermark: int | None  # the watermark's position after the run
    batches: list[BatchFact]
    # key_value watermarks only: the watermark's value after the run, and each item's own value
    # ({key: int}, e.g. a Kafka slice's {partition: end}); None: no value to check
    value: dict | None = None
    item_values: dict[int, dict] | None = None


@dataclass
class SinkVerdict:
    rows_seen: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    altered: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    # a table format read at every version: how many, and "<version>: <key>" for each finding
    versions: int = 0
    version_twice: list[str] = field(default_factory=list)
    version_gone: list[str] = field(default_factory=list)
    version_altered: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(getattr(self, kind) for kind in SINK_FINDINGS)


SINK_FINDINGS = (
    "lost",
    "duplicated",
    "unexpected",
    "altered",
    "stale",
    "version_twice",
    "version_gone",
    "version_altered",
)


@dataclass
class JobVerdict:
    overlaps: list[tuple[int, int]] = field(default_factory=list)
    left_standing: list[tuple[int, int]] = field(default_factory=list)  # (old, owner) batch ids
    watermark: int | None = None
    committed_prefix_end: int | None = None
    value: dict | None = None
    prefix_value: dict | None = None  # None: the job's value is not checked

    @property
    def ok(self) -> bool:
        return (
            not self.overlaps
            and not self.left_standing
            and self.watermark == self.committed_prefix_end
            and self.value == self.prefix_value
        )


@dataclass
class Report:
    sinks: dict[str, SinkVerdict]
    jobs: dict[str, JobVerdict]

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.sinks.values()) and all(v.ok for v in self.jobs.values())

    def failures(self) -> list[str]:
        """One line per kind of failure, naming it and a few examples."""
        lines = []
        for name, v in self.sinks.items():
            for kind in SINK_FINDINGS:
                found = getattr(v, kind)
                if found:
                    lines.append(f"{name}: {len(found)} {kind}, e.g. {found[:5]}")
        for name, v in self.jobs.items():
            if v.overlaps:
                lines.append(f"job {name}: committed batches overlap: {v.overlaps[:5]}")
            if v.left_standing:
                lines.append(
                    f"job {name}: outputs left standing beside the batch that owns their items "
                    f"(old, owner): {v.left_standing[:5]}"
                )
            if v.watermark != v.committed_prefix_end:
                lines.append(
                    f"job {name}: watermark {v.watermark} is not the end of the contiguous "
                    f"committed prefix ({v.committed_prefix_end})"
                )
            if v.value != v.prefix_value:
                lines.append(
                    f"job {name}: watermark value {v.value} is not the per-key maximum over the "
                    f"contiguous committed prefix ({v.prefix_value})"
                )
        return lines

    def summary(self) -> dict:
        return {
            "ok": self.ok,
            "sinks": {
                name: {
                    "rows_seen": v.rows_seen,
                    **{k: len(getattr(v, k)) for k in SINK_FINDINGS[:5]},
                    **(
                        {
                            "versions": v.versions,
                            **{k: len(getattr(v, k)) for k in SINK_FINDINGS[5:]},
                        }
                        if v.versions
                        else {}
                    ),
                }
                for name, v in self.sinks.items()
            },
            "jobs": {name: asdict(v) for name, v in self.jobs.items()},
        }


def live_committed(job: JobFacts) -> list[BatchFact]:
    """The committed batches whose output stands, by range: a committed batch a backfill or replay
    rewrote (`replaced_by`) no longer owns its items; its replacement does."""
    return sorted(
        (b for b in job.batches if b.status in COMMITTED and b.replaced_by is None),
        key=lambda b: b.lo,
    )


def committed_prefix_end(job: JobFacts) -> int:
    """Where the watermark must stand: from the job's start, over committed batches each starting
    where the previous one ended, up to the first position no committed batch starts at (a gap,
    or a batch not committed: failed, dead, still running)."""
    starts = {b.lo: b.hi for b in live_committed(job)}
    end = job.start
    while starts.get(end, end) > end:
        end = starts[end]
    return end


def prefix_value(job: JobFacts, end: int) -> dict:
    """A key_value watermark's value over the committed prefix [start, end): per key, the maximum
    of the items' own values (a key no item there names is absent)."""
    value: dict = {}
    for item, own in job.item_values.items():
        if job.start <= item < end:
            for key, n in own.items():
                value[str(key)] = max(value.get(str(key), n), n)
    return value


def check_job(job: JobFacts) -> JobVerdict:
    committed = live_committed(job)
    overlaps = [
        (a.id, b.id)
        for a, b in zip(committed, committed[1:], strict=False)
        if b.lo < a.hi  # sorted by lo: the next one starts inside this one
    ]
    left_standing = [
        (old.id, owner.id)
        for old in job.batches
        if old.published and old.replaced_by is None and old.status not in COMMITTED
        for owner in committed
        if owner.lo < old.hi and old.lo < owner.hi
    ]
    end = committed_prefix_end(job)
    verdict = JobVerdict(
        overlaps=overlaps,
        left_standing=left_standing,
        watermark=job.watermark,
        committed_prefix_end=end,
    )
    if job.item_values is not None:
        verdict.value = {str(k): v for k, v in (job.value or {}).items()}
        verdict.prefix_value = prefix_value(job, end)
    return verdict


def check_sink(sources: Iterable[SourceRow], rows: Iterable[SinkRow], job: JobFacts) -> SinkVerdict:
    """What a reader of one sink sees, against the source rows the job read from."""
    expected = {row.key: row for row in sources}
    committed = live_committed(job)
    lows = [b.lo for b in committed]

    def covering(item: int) -> BatchFact | None:
        index = bisect_right(lows, item) - 1
        if index >= 0 and committed[index].lo <= item < committed[index].hi:
            return committed[index]
        return None

    rows = list(rows)
    seen = Counter(row.key for row in rows)
    verdict = SinkVerdict(rows_seen=len(rows))
    verdict.lost = sorted(key for key in expected if key not in seen)
    verdict.duplicated = sorted(key for key, n in seen.items() if n > 1 and key in expected)
    verdict.unexpected = sorted({row.key for row in rows if row.key not in expected})
    for row in rows:
        source = expected.get(row.key)
        if source is None:
            continue
        if row.checksum != source.checksum:
            verdict.altered.append(row.key)
        owner = covering(source.item)
        if owner is None or (owner.id, owner.attempt) != (row.batch_id, row.attempt):
            verdict.stale.append(row.key)
    verdict.altered = sorted(set(verdict.altered))
    verdict.stale = sorted(set(verdict.stale))
    return verdict


def check_versions(
    sources: Iterable[SourceRow], versions: list[tuple[str, list[SinkRow]]], verdict: SinkVerdict
) -> None:
    """Each version of a table format as its reader sees it (oldest first): no row twice, no row
    that was there gone from the next version, no row whose content is no source row's."""
    checksums = {row.key: row.checksum for row in sources}
    before: set[str] = set()
    verdict.versions = len(versions)
    for version, rows in versions:
        seen = Counter(row.key for row in rows)
        verdict.version_twice += [f"{version}: {key}" for key, n in seen.items() if n > 1]
        verdict.version_gone += [f"{version}: {key}" for key in sorted(before - set(seen))]
        verdict.version_altered += sorted(
            {f"{version}: {row.key}" for row in rows if checksums.get(row.key) != row.checksum}
        )
        before = set(seen)


def check(
    *,
    sources: dict[str, list[SourceRow]],
    jobs: dict[str, JobFacts],
    sinks: dict[str, tuple],
    versions: dict[str, list[tuple[str, list[SinkRow]]]] | None = None,
) -> Report:
    """`sinks` maps a sink's name to (job name, rows a reader sees); `sources` maps a job's name
    to the source rows it reads; `versions` a table format sink's name to what a reader sees at
    each of its versions, oldest first."""
    verdicts = {
        name: check_sink(sources[job_name], rows, jobs[job_name])
        for name, (job_name, rows) in sinks.items()
    }
    for name, each in (versions or {}).items():
        check_versions(sources[sinks[name][0]], each, verdicts[name])
    return Report(
        sinks=verdicts,
        jobs={name: check_job(job) for name, job in jobs.items()},
    )


# ---- readers: what a reader of each sink sees ---------------------------------------------------


# What the soak's rows carry: their content, and the batch and attempt that wrote them (added by
# its processor, bench/soak_processors.py). A reader recomputes each row's checksum from what it
# reads, so a row whose content changed on the way is `altered`.
CONTENT = ("row_id", "key", "value", "note")
WRITER = ("src_batch", "src_attempt")


def sink_row(record: dict, *, identity: str, content=CONTENT, writer=WRITER) -> SinkRow:
    return SinkRow(
        key=str(record[identity]),
        checksum=checksum(*(record.get(c) for c in content)),
        batch_id=int(record[writer[0]]),
        attempt=int(record[writer[1]]),
    )


def read_json_lines_sink(path: Path, *, identity: str = "row_id", **columns) -> list[SinkRow]:
    """A files sink in JSON format, read as Spark reads it: every `*.json` part file under the
    sink's path, paths with a part starting with `_` or `.` (staging, Spark's markers) skipped."""
    path = Path(path)
    rows = []
    for part in sorted(path.rglob("*.json")):
        if any(p.startswith(("_", ".")) for p in part.relative_to(path).parts):
            continue
        for line in part.read_text().splitlines():
            if line.strip():
                rows.append(sink_row(json.loads(line), identity=identity, **columns))
    return rows


def read_postgres_sink(
    dsn: str, table: str, *, identity: str = "key", content=CONTENT, writer=WRITER
) -> list[SinkRow]:
    """A PostgreSQL sink table, as a reader of the table sees it."""
    import psycopg2
    from psycopg2 import sql

    schema, _, name = table.rpartition(".")
    names = list(dict.fromkeys([identity, *content, *writer]))
    with psycopg2.connect(dsn) as conn, conn.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.Identifier(schema, name) if schema else sql.Identifier(name),
            )
        )
        records = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    conn.close()
    return [sink_row(r, identity=identity, content=content, writer=writer) for r in records]


def read_delta_sink(path, *, identity: str = "row_id", **columns) -> list[SinkRow]:
    """A Delta table, as a reader of its latest version sees it (delta-rs: only the files the
    Delta log names, never an uncommitted attempt's)."""
    from deltalake import DeltaTable

    records = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return [sink_row(r, identity=identity, **columns) for r in records]


def read_iceberg_sink(sink: dict, *, identity: str = "row_id", **columns) -> list[SinkRow]:
    """An Iceberg table, as a reader of its current snapshot sees it (pyiceberg: only the files
    the snapshot's manifests name)."""
    versions = iceberg_versions(sink, identity=identity, latest_only=True, **columns)
    return versions[-1][1] if versions else []


def iceberg_versions(
    sink: dict, *, identity: str = "row_id", latest_only: bool = False, **columns
) -> list[tuple[str, list[SinkRow]]]:
    """Every snapshot of an Iceberg sink, oldest first, as a reader of that snapshot sees it: the
    rows of the data files its manifests name. A data file is read once however many snapshots
    hold it (a soak of thousands of commits would read every file thousands of times); a
    snapshot whose files carry delete files is scanned whole by pyiceberg instead."""
    from workers.spark.iceberg_catalog import catalog_from

    table = catalog_from(sink).load_table(tuple(sink["table"].split(".")))
    snapshots = table.snapshots()[-1:] if latest_only else table.snapshots()
    files: dict[str, list[SinkRow]] = {}
    found = []
    for snapshot in snapshots:
        scan = table.scan(snapshot_id=snapshot.snapshot_id)
        tasks = list(scan.plan_files())
        if any(task.delete_files for task in tasks):
            records = scan.to_arrow().to_pylist()
            rows = [sink_row(r, identity=identity, **columns) for r in records]
        else:
            rows = []
            for task in tasks:
                rows += _file_rows(files, task.file.file_path, identity, columns)
        found.append((f"snapshot {snapshot.snapshot_id}", rows))
    return found


def delta_versions(path, *, identity: str = "row_id", **columns) -> list[tuple[str, list[SinkRow]]]:
    """Every version of a Delta sink, oldest first, as a reader of that version sees it: the rows
    of the files delta-rs lists as its own. A file is read once however many versions hold it; a
    partitioned table (values kept in the log, not the files) or one with deletion vectors is
    read whole at each version by delta-rs instead."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    last = table.version()
    whole = bool(table.metadata().partition_columns) or "deletionVectors" in (
        table.protocol().reader_features or []
    )
    files: dict[str, list[SinkRow]] = {}
    found = []
    for version in range(last + 1):
        table.load_as_version(version)
        if whole:
            records = table.to_pyarrow_table().to_pylist()
            rows = [sink_row(r, identity=identity, **columns) for r in records]
        else:
            rows = []
            for uri in table.file_uris():
                rows += _file_rows(files, uri, identity, columns)
        found.append((f"version {version}", rows))
    return found


def _file_rows(files: dict, uri: str, identity: str, columns: dict) -> list[SinkRow]:
    """The rows of one immutable Parquet data file, read the first time it is asked for."""
    if uri not in files:
        import pyarrow.parquet as pq

        records = pq.read_table(uri).to_pylist()
        files[uri] = [sink_row(r, identity=identity, **columns) for r in records]
    return files[uri]


# ---- command line -------------------------------------------------------------------------------


def load(document: dict) -> tuple[dict, dict, dict]:
    """The JSON form: {"sources": {job: [[key, checksum, item], ...]}, "jobs": {job: {"start",
    "watermark", "batches": [[id, lo, hi, status, attempt(, replaced_by, published)], ...], optional "value" and
    "item_values": {item: {key: int}}}}, "sinks": {name: {"job", "rows": [[key, checksum, batch_id,
    attempt], ...]}}}."""
    sources = {j: [SourceRow(*r) for r in rows] for j, rows in document["sources"].items()}
    jobs = {
        j: JobFacts(
            name=j,
            start=f["start"],
            watermark=f["watermark"],
            batches=[BatchFact(*b) for b in f["batches"]],
            value=f.get("value"),
            item_values=(
                {int(i): v for i, v in f["item_values"].items()} if "item_values" in f else None
            ),
        )
        for j, f in document["jobs"].items()
    }
    sinks = {n: (s["job"], [SinkRow(*r) for r in s["rows"]]) for n, s in document["sinks"].items()}
    return sources, jobs, sinks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the run's facts as JSON (see load())")
    args = parser.parse_args(argv)
    sources, jobs, sinks = load(json.loads(args.run.read_text()))
    report = check(sources=sources, jobs=jobs, sinks=sinks)
    print(json.dumps(report.summary(), indent=1))
    for line in report.failures():
        print("FAIL", line, file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
