"""`iceberg` connectors (issue 46): an Iceberg table's snapshots are the items, read on the
executors from the data files each added. The tables are written here with pyiceberg's SQL
catalog on a SQLite file; DuckDB's own Iceberg reader (its `iceberg` extension from PyPI) is the
second reader that says what the table holds."""

import functools
import json
import os
import uuid

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo, In

from inventory.models import Asset, Backfill, Batch, BatchStatus
from inventory.services import discovery, lifecycle
from inventory.services.connectors import connector_create, connector_update
from inventory.services.corrections import watermark_correct
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_create
from inventory.sources.iceberg import discovery as iceberg_discovery
from tests.support.factories import execute_refused_before_spark
from tests.support.files_job import drain, run_and_commit
from tests.support.iceberg_lake import Lake, arrow_rows
from tests.support.python_source_imports import CREATE, OBJECT_PLAN, PLAN, _planner_imports
from workers import specs
from workers.spark import iceberg_catalog
from workers.spark.errors import BatchError
from workers.spark.run import run_batch

pytestmark = pytest.mark.django_db(transaction=True)


def iceberg_job(name: str, lake: Lake, out, **options):
    connector = connector_create(name=f"{name}-src", kind="iceberg", config=dict(lake.config))
    return job_create(
        name=name,
        connector=connector,
        batch_weight=10**12,
        max_items=options.pop("max_items", 1),
        sink={"kind": "delta", "path": str(out)},
        retry_backoff_seconds=0,
        max_attempts=10,
        **options,
    )


def sink_state(out) -> list[tuple]:
    if not (out / "_delta_log").exists():
        return []
    table = DeltaTable(str(out)).to_pyarrow_table()
    return sorted(zip(table.column("key").to_pylist(), table.column("v").to_pylist(), strict=True))


def batch_rows(out, batch: Batch) -> list[tuple]:
    """What one batch wrote to the Delta sink (its files are under a prefix of its own)."""
    rows = []
    for uri in DeltaTable(str(out)).file_uris():
        if f"tidemark-b{batch.pk}-" in uri:
            table = pq.read_table(uri.removeprefix("file://"), columns=["key", "v"])
            rows += zip(table.column("key").to_pylist(), table.column("v").to_pylist(), strict=True)
    return sorted(rows)


def _extension(name: str) -> str:
    import duckdb_ext  # namespace package of the duckdb-ext-* wheels

    platform = duckdb.execute("PRAGMA platform").fetchone()[0]
    folder = os.path.join("extensions", f"v{duckdb.__version__}", platform)
    paths = [os.path.join(root, folder, f"{name}.duckdb_extension") for root in duckdb_ext.__path__]
    [path] = [p for p in paths if os.path.exists(p)]  # missing: an error, never a skip
    return path


@functools.cache
def _duckdb():
    """One connection per test process, its extensions loaded by path: no download."""
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    for name in ("avro", "iceberg"):  # the iceberg extension reads manifests with avro
        con.execute(f"LOAD '{_extension(name)}'")
    return con


def duckdb_rows(lake: Lake) -> list[tuple]:
    """The table's current rows as DuckDB's Iceberg reader sees them, duplicates kept."""
    metadata = lake.table.metadata_location.removeprefix("file://")
    query = "SELECT key, v FROM iceberg_scan(?)"
    return sorted(_duckdb().cursor().execute(query, [metadata]).fetchall())


def _own_batch(job, asset) -> Batch:
    return Batch.objects.get(
        job=job, backfill__isnull=True, span__contains=asset.pk, status=BatchStatus.SUCCEEDED
    )


def _start(job) -> int:
    """The watermark value a replay of every batch of `job` goes back to."""
    return Batch.objects.filter(job=job).order_by("span").first().span.lower - 1


def _restatements(job):
    return list(Backfill.objects.filter(job=job, created_by="tidemark").order_by("id"))


# ---- discovery -----------------------------------------------------------------------------


def test_snapshots_are_registered_in_commit_order_with_what_each_added(tmp_path):
    lake = Lake(tmp_path / "lake")
    connector = connector_create(name="snaps", kind="iceberg", config=dict(lake.config))
    assert discovery.discover(connector) == 0  # an empty table has no snapshot
    lake.table.append(arrow_rows([1, 2, 3]))
    lake.table.append(arrow_rows([4, 5]))
    assert discovery.discover(connector) == 2
    lake.table.delete(EqualTo("key", 2))
    assert discovery.discover(connector) == 1
    assert discovery.discover(connector) == 0
    ids = lake.snapshot_ids()
    assets = list(Asset.objects.filter(connector=connector).order_by("id"))
    assert [(a.extra["snapshot"], a.extra["operation"], a.extra["rows"]) for a in assets] == [
        (ids[0], "append", 3),
        (ids[1], "append", 2),
        (ids[2], "overwrite", 2),  # the copy-on-write delete rewrote the file of 1, 2, 3
    ]
    sizes = {s.snapshot_id: int(s.summary["added-files-size"]) for s in lake.table.snapshots()}
    assert [a.weight for a in assets] == [sizes[i] for i in ids]
    assert all(a.weight > 0 for a in assets)
    assert [a.location for a in assets] == [f"ns.t@{i}" for i in ids]
    assert connector.cursor["snapshot"] == ids[2]


def test_a_look_that_registers_two_restating_snapshots_carries_the_later_one(tmp_path):
    """The restatement's backfill runs through the last restating snapshot of a look, in commit
    order. Snapshot ids are random, so each round's two deletes come in either id order; six
    rounds make it near certain that one of them has the later delete under the smaller id."""
    lake = Lake(tmp_path / "lake")
    connector = connector_create(name="two-restating", kind="iceberg", config=dict(lake.config))
    for round_ in range(6):
        first, second = 10 * round_ + 1, 10 * round_ + 5
        lake.table.append(arrow_rows([first, first + 1]))
        lake.table.append(arrow_rows([second, second + 1]))
        discovery.discover(connector)
        lake.table.delete(EqualTo("key", first))  # rewrites the first append's file
        lake.table.delete(EqualTo("key", second))  # rewrites the second append's file
        # the registering step alone (discovery.discover then restates and clears the cursor)
        assert iceberg_discovery.discover(connector) == 2
        later = lake.table.current_snapshot().snapshot_id
        carried = Asset.objects.get(connector=connector, extra__snapshot=later)
        assert carried.extra.get("restates"), carried.extra
        connector.refresh_from_db()
        assert connector.cursor["restate_through"] == carried.pk, (round_, lake.snapshot_ids())
        discovery.discover(connector)  # restates (no job: nothing to rebuild) and clears it


def test_a_look_after_the_cursors_snapshot_expired_registers_the_later_ones(tmp_path):
    lake = Lake(tmp_path / "lake")
    connector = connector_create(name="after", kind="iceberg", config=dict(lake.config))
    lake.table.append(arrow_rows([1]))
    lake.table.append(arrow_rows([2]))
    assert discovery.discover(connector) == 2
    lake.table.append(arrow_rows([3]))
    lake.table.maintenance.expire_snapshots().by_id(lake.snapshot_ids()[1]).commit()
    assert discovery.discover(connector) == 1
    last = Asset.objects.filter(connector=connector).order_by("id").last()
    assert last.extra["snapshot"] == lake.snapshot_ids()[-1]


def test_a_catalog_in_a_postgresql_database_the_deployment_names(
    spark, tmp_path, monkeypatch, settings
):
    """The catalog's DSN comes from the variable catalog_dsn_env names; another database of
    the embedded server is not Tidemark's own."""
    import psycopg2
    from psycopg2.extensions import make_dsn

    admin = psycopg2.connect(settings.DATABASE_URL)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("DROP DATABASE IF EXISTS tm_iceberg_catalog")
        cursor.execute("CREATE DATABASE tm_iceberg_catalog")
    admin.close()
    monkeypatch.setenv("TM_ICEBERG", make_dsn(settings.DATABASE_URL, dbname="tm_iceberg_catalog"))
    config = {"catalog_dsn_env": "TM_ICEBERG", "warehouse": str(tmp_path / "wh"), "table": "ns.t"}
    catalog = iceberg_catalog.catalog_from(config)
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=arrow_rows([1]).schema).append(arrow_rows([1, 2]))
    out = tmp_path / "out"
    connector = connector_create(name="pg-src", kind="iceberg", config=config)
    job = job_create(
        name="pg",
        connector=connector,
        batch_weight=10**12,
        sink={"kind": "delta", "path": str(out)},
    )
    assert discovery.discover(connector) == 1
    drain(spark, job)
    assert sink_state(out) == [(1, "a"), (2, "a")]


# ---- batch by batch, with restatements ------------------------------------------------------


def test_each_batch_reads_what_its_snapshot_added_and_overwrites_and_deletes_restate(
    spark, tmp_path, client, role_users
):
    """Appends read their own rows; a delete that rewrites a file restates the snapshot that
    wrote it, a delete that drops a whole file too, an overwrite of the table every snapshot
    with rows left; each rebuild runs with its restating snapshot in one batch, and after every
    snapshot the sink holds the table's rows once, as DuckDB reads the table."""
    lake = Lake(tmp_path / "lake")
    out = tmp_path / "out"
    job = iceberg_job("replay", lake, out)

    def step():
        discovery.discover(job.connector)
        drain(spark, job)
        assert sink_state(out) == duckdb_rows(lake)

    lake.table.append(arrow_rows([1, 2, 3]))
    lake.table.append(arrow_rows([4, 5], "b"))
    step()
    first, second = Asset.objects.filter(connector=job.connector).order_by("id")
    assert batch_rows(out, _own_batch(job, first)) == [(1, "a"), (2, "a"), (3, "a")]
    assert batch_rows(out, _own_batch(job, second)) == [(4, "b"), (5, "b")]
    assert _restatements(job) == []

    lake.table.delete(EqualTo("key", 2))  # rewrites the first snapshot's file without key 2
    step()
    third = Asset.objects.get(connector=job.connector, extra__snapshot=lake.snapshot_ids()[2])
    assert third.extra["restates"] == [first.pk]
    [backfill] = _restatements(job)
    assert (backfill.range_start, backfill.range_end, backfill.priority) == (
        first.pk,
        third.pk,
        1,
    )
    # the rebuild reads the first snapshot (its file is gone: nothing) and the rewrite's rows
    assert batch_rows(out, backfill.batches.get()) == [(1, "a"), (3, "a"), (4, "b"), (5, "b")]
    assert sink_state(out) == [(1, "a"), (3, "a"), (4, "b"), (5, "b")]
    table = f"Iceberg table {lake.config['table']}"
    assert (
        backfill.reason
        == f"later snapshots of {table} replaced rows of snapshots {first.extra['snapshot']}"
    )

    lake.table.delete(In("key", [4, 5]))  # drops the second snapshot's whole file
    step()
    assert _restatements(job)[-1].reason.endswith(f"snapshots {second.extra['snapshot']}")
    assert sink_state(out) == [(1, "a"), (3, "a")]

    lake.table.overwrite(arrow_rows([9], "c"))  # a delete snapshot, then an append
    step()
    assert _restatements(job)[-1].reason.endswith(f"snapshots {third.extra['snapshot']}")
    assert sink_state(out) == [(9, "c")]

    # a replay from the start reads each row still live once
    watermark_correct(job=job, value=_start(job), actor="a", reason="fix", replay=True)
    drain(spark, job)
    assert sink_state(out) == duckdb_rows(lake) == [(9, "c")]
    client.force_login(role_users["viewer"])
    page = client.get(f"/jobs/{job.name}/").content.decode()
    assert "Iceberg snapshots whose rows a later one replaced" in page


def _compact(lake: Lake, monkeypatch) -> None:
    """A replace snapshot, as a compaction by another writer makes it: every data file's rows
    in one new file. pyiceberg commits one but cannot sum up its summary (it writes no
    compactions itself), so its totals are summed as for an overwrite."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.table import snapshots
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update import snapshot as producer
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    def summaries(summary, previous_summary=None):
        overwrite = Summary(Operation.OVERWRITE, **summary.additional_properties)
        totals = snapshots.update_snapshot_summaries(overwrite, previous_summary)
        return Summary(Operation.REPLACE, **totals.additional_properties)

    monkeypatch.setattr(producer, "update_snapshot_summaries", summaries)
    table = lake.table
    rows = table.scan().to_arrow()
    old = [task.file for task in table.scan().plan_files()]
    with table.transaction() as tx:
        replace = _OverwriteFiles(
            operation=Operation.REPLACE, transaction=tx, io=table.io, commit_uuid=uuid.uuid4()
        )
        for data_file in old:
            replace.delete_data_file(data_file)
        for data_file in _dataframe_to_data_files(
            table_metadata=tx.table_metadata, df=rows, io=table.io
        ):
            replace.append_data_file(data_file)
        replace.commit()
    monkeypatch.undo()


def test_a_compaction_restates_nothing_and_a_replay_still_reads_each_row_once(
    spark, tmp_path, monkeypatch
):
    lake = Lake(tmp_path / "lake")
    out = tmp_path / "out"
    job = iceberg_job("compact", lake, out)
    lake.table.append(arrow_rows([1, 2]))
    lake.table.append(arrow_rows([3]))
    discovery.discover(job.connector)
    drain(spark, job)
    _compact(lake, monkeypatch)
    assert discovery.discover(job.connector) == 1
    replace = Asset.objects.filter(connector=job.connector).order_by("id").last()
    assert (replace.extra["operation"], "restates" in replace.extra) == ("replace", False)
    drain(spark, job)
    assert _restatements(job) == []
    assert batch_rows(out, _own_batch(job, replace)) == []  # moved rows, none new
    assert sink_state(out) == duckdb_rows(lake) == [(1, "a"), (2, "a"), (3, "a")]
    # replayed, the appends read their files the compaction replaced (still on disk)
    watermark_correct(job=job, value=_start(job), actor="a", reason="fix", replay=True)
    drain(spark, job)
    assert sink_state(out) == [(1, "a"), (2, "a"), (3, "a")]
    # a delete after the compaction restates the appends whose rows the compacted file held
    lake.table.delete(EqualTo("key", 1))
    discovery.discover(job.connector)
    restating = Asset.objects.filter(connector=job.connector).order_by("id").last()
    appends = list(Asset.objects.filter(connector=job.connector).order_by("id")[:2])
    assert restating.extra["restates"] == [a.pk for a in appends]
    drain(spark, job)
    assert sink_state(out) == duckdb_rows(lake) == [(2, "a"), (3, "a")]


# ---- expired snapshots, missing files, confinement -----------------------------------------


def test_an_expired_snapshot_fails_its_batch_naming_it_and_a_snapshot_backfill_reads_it(
    spark, tmp_path, client, role_users
):
    lake = Lake(tmp_path / "lake")
    out = tmp_path / "out"
    lake.table.append(arrow_rows([1, 2]))
    lake.table.append(arrow_rows([3]))
    lake.table.delete(EqualTo("key", 3))
    job = iceberg_job("expired", lake, out)
    discovery.discover(job.connector)
    first = lake.snapshot_ids()[0]
    lake.table.maintenance.expire_snapshots().by_id(first).commit()
    (batch,) = lifecycle.batches_plan(job=job, limit=1)
    stored = execute_refused_before_spark(batch)
    assert stored.status == BatchStatus.FAILED
    message = stored.error["message"]
    assert f"snapshot {first} of the Iceberg table ns.t is no longer in the table" in message
    assert 'snapshot backfill: set the connector\'s config.expired to "snapshot"' in message
    client.force_login(role_users["viewer"])
    page = client.get(f"/batches/{batch.pk}/").content.decode()
    assert f"snapshot {first} of the Iceberg table ns.t is no longer" in page

    connector_update(connector=job.connector, config={**lake.config, "expired": "snapshot"})
    run_and_commit(spark, lifecycle.batch_acquire(job=job, worker="w"))
    assert sink_state(out) == [(1, "a"), (2, "a")]  # its rows the table still holds
    drain(spark, job)
    assert sink_state(out) == duckdb_rows(lake) == [(1, "a"), (2, "a")]
    with pytest.raises(InvalidInput) as refused:
        connector_update(connector=job.connector, config={**lake.config, "expired": "x"})
    assert refused.value.field == "config.expired"


def test_a_data_file_gone_after_planning_fails_the_batch_naming_its_snapshot(spark, tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.table.append(arrow_rows([1]))
    job = iceberg_job("gone", lake, tmp_path / "out")
    discovery.discover(job.connector)
    spec = specs.batch_spec(batch=lifecycle.batch_acquire(job=job, worker="w"))
    [file] = spec["source"]["files"]
    os.unlink(file["path"].removeprefix("file://"))
    with pytest.raises(BatchError, match=f"snapshot {file['snapshot']} .* is gone"):
        run_batch(spark, spec)


def test_a_manifest_naming_a_data_file_outside_the_table_is_refused(spark, tmp_path):
    """A file the metadata names outside the table's location is never read: added by path
    (pyiceberg's add_files), discovery refuses the snapshot naming it; a spec naming one (by
    `..`, an absolute path elsewhere or a link leading out) fails the batch before any read."""
    lake = Lake(tmp_path / "lake")
    lake.table.append(arrow_rows([1]))
    job = iceberg_job("outside", lake, tmp_path / "out", max_items=10)
    discovery.discover(job.connector)
    spec = specs.batch_spec(batch=lifecycle.batch_acquire(job=job, worker="w"))
    [file] = spec["source"]["files"]
    location = spec["source"]["location"].removeprefix("file://")
    os.symlink("/etc/hostname", os.path.join(location, "data", "linked.parquet"))
    for path in (
        f"{location}/../../etc/passwd",
        "/etc/passwd",
        "file:///etc/passwd",
        "s3://bucket/x.parquet",
        f"{location}/data/linked.parquet",
    ):
        spec["source"]["files"] = [{**file, "path": path}]
        with pytest.raises(BatchError, match=f"snapshot {file['snapshot']} .* outside"):
            run_batch(spark, spec)

    elsewhere = tmp_path / "elsewhere.parquet"
    pq.write_table(arrow_rows([7]), elsewhere)
    lake.table.add_files([str(elsewhere)])
    added = lake.snapshot_ids()[-1]
    with pytest.raises(InvalidInput, match=f"snapshot {added} .* outside the table's location"):
        discovery.discover(job.connector)
    assert Asset.objects.filter(connector=job.connector).count() == 1


def _delete_positions(lake: Lake, positions: list[int]) -> None:
    """A merge-on-read delete, as another writer commits it: a position delete file naming rows
    of the table's one data file, in a delete manifest of a `delete` snapshot (pyiceberg reads
    them but writes copy-on-write deletes only, so its writer is told to write a delete
    manifest)."""
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestWriterV2,
    )
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _OverwriteFiles
    from pyiceberg.typedef import Record

    table = lake.table
    [task] = table.scan().plan_files()
    path = f"{table.location().removeprefix('file://')}/data/deletes-{uuid.uuid4()}.parquet"
    target = task.file.file_path
    pq.write_table(
        pa.table({"file_path": [target] * len(positions), "pos": pa.array(positions, pa.int64())}),
        path,
    )
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=f"file://{path}",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(positions),
        file_size_in_bytes=os.path.getsize(path),
        spec_id=0,
    )
    meta = ManifestWriterV2._meta
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ManifestWriterV2, "content", lambda self: ManifestContent.DELETES)
        patch.setattr(
            ManifestWriterV2,
            "_meta",
            property(lambda self: {**meta.fget(self), "content": "deletes"}),
        )
        with table.transaction() as tx:
            delete = _OverwriteFiles(
                operation=Operation.DELETE, transaction=tx, io=table.io, commit_uuid=uuid.uuid4()
            )
            delete.append_data_file(delete_file)
            delete.commit()


def test_a_position_delete_restates_the_snapshot_whose_rows_it_deleted(spark, tmp_path):
    lake = Lake(tmp_path / "lake")
    out = tmp_path / "out"
    job = iceberg_job("positions-restate", lake, out)
    lake.table.append(arrow_rows([1, 2, 3, 4]))
    discovery.discover(job.connector)
    drain(spark, job)
    _delete_positions(lake, [1, 3])
    assert discovery.discover(job.connector) == 1
    first, deleting = Asset.objects.filter(connector=job.connector).order_by("id")
    assert (deleting.extra["operation"], deleting.extra["restates"]) == ("delete", [first.pk])
    drain(spark, job)
    [backfill] = _restatements(job)
    # the rebuild reads the first snapshot's file without the deleted positions
    assert batch_rows(out, backfill.batches.get()) == [(1, "a"), (3, "a")]
    assert sink_state(out) == duckdb_rows(lake) == [(1, "a"), (3, "a")]


def test_position_deletes_are_honoured_on_the_executors(spark, tmp_path):
    """A data file's rows at the positions a position delete file names for it are dropped
    (pyiceberg writes copy-on-write deletes only: the delete file is written here)."""
    lake = Lake(tmp_path / "lake")
    lake.table.append(arrow_rows([1, 2, 3, 4]))
    job = iceberg_job("positions", lake, tmp_path / "out")
    discovery.discover(job.connector)
    spec = specs.batch_spec(batch=lifecycle.batch_acquire(job=job, worker="w"))
    [file] = spec["source"]["files"]
    deletes = os.path.join(spec["source"]["location"].removeprefix("file://"), "data", "d.parquet")
    pq.write_table(
        pa.table(
            {
                "file_path": [file["path"], file["path"], "file:///elsewhere.parquet"],
                "pos": pa.array([1, 3, 0], pa.int64()),
            }
        ),
        deletes,
    )
    spec["source"]["files"] = [{**file, "deletes": [deletes]}]
    result = run_batch(spark, spec)
    assert result["rows_in"] == 2
    table = DeltaTable(str(tmp_path / "out")).to_pyarrow_table()
    assert sorted(table.column("key").to_pylist()) == [1, 3]


# ---- the kind everywhere else: API, dashboard form, pipelines file ---------------------------


def test_the_api_creates_an_iceberg_connector_and_refuses_a_bad_one_naming_the_field(
    role_users, tmp_path, monkeypatch, settings
):
    from tests.support.api_support import token_client

    admin = token_client(role_users["admin"])
    lake = Lake(tmp_path / "lake")
    lake.table.append(arrow_rows([1]))

    def post(config):
        return admin.post(
            "/api/v1/connectors/",
            {"name": "ice", "kind": "iceberg", "config": config},
            format="json",
        )

    for config, field in [
        ({**lake.config, "table": "ns.missing"}, "config.table"),
        ({**lake.config, "table": "ns.t; drop"}, "config.table"),
        ({**lake.config, "catalog_uri": "sqlite:///relative.db"}, "config.catalog_uri"),
        ({**lake.config, "catalog_uri": f"sqlite:///{tmp_path}/none.db"}, "config.catalog_uri"),
        ({**lake.config, "catalog_uri": "sqlite:////etc/catalog.db"}, "config.catalog_uri"),
        ({"table": "ns.t"}, "config.catalog_uri"),
        ({**lake.config, "catalog_dsn_env": "TM_LAKE"}, "config.catalog_uri"),  # both
        ({**lake.config, "path": "/x"}, "config.path"),
        ({**lake.config, "expired": "never"}, "config.expired"),
    ]:
        bad = post(config)
        assert bad.status_code == 400 and field in bad.json(), (config, bad.content)
    # a PostgreSQL catalog is never Tidemark's own database, by its own name or another
    monkeypatch.setenv("TM_LAKE", settings.DATABASE_URL)
    for name in ("DATABASE_URL", "TM_LAKE"):
        own = post({"catalog_dsn_env": name, "table": "ns.t"})
        assert own.status_code == 400 and "config.catalog_dsn_env" in own.json(), own.content
    assert "Tidemark's own database" in str(own.json())
    made = post(lake.config)
    assert made.status_code == 201, made.content
    assert (made.json()["kind"], made.json()["weight_unit"]) == ("iceberg", "bytes")
    assert admin.post("/api/v1/connectors/ice/discover/").json()["registered"] == 1


def test_catalog_name_reads_a_table_another_writer_registered_and_re_points_the_connector(
    tmp_path,
):
    # a table registered under another catalog name in the same SQLite catalog (Spark's JDBC
    # catalog, say): the default name `tidemark` does not see it, `catalog_name` does
    root = tmp_path / "lake"
    root.mkdir()
    config = {"catalog_uri": f"sqlite:///{root}/catalog.db", "table": "ns.other"}
    other = SqlCatalog("lakehouse", uri=config["catalog_uri"], warehouse=f"file://{root}/w")
    other.create_namespace("ns")
    other.create_table("ns.other", schema=arrow_rows([1]).schema).append(arrow_rows([1, 2]))
    with pytest.raises(InvalidInput) as unseen:
        connector_create(name="other", kind="iceberg", config=dict(config))
    assert unseen.value.field == "config.table"
    for bad in ("", "no-dash", 7):
        with pytest.raises(InvalidInput) as refused:
            connector_create(name="other", kind="iceberg", config={**config, "catalog_name": bad})
        assert refused.value.field == "config.catalog_name"
    connector = connector_create(
        name="other", kind="iceberg", config={**config, "catalog_name": "lakehouse"}
    )
    assert discovery.discover(connector) == 1
    # another catalog's table of the same name is other data: a job's watermark would not hold
    job_create(
        name="other-job",
        connector=connector,
        batch_weight=10**12,
        max_items=1,
        sink={"kind": "delta", "path": str(tmp_path / "out")},
    )
    second = tmp_path / "second"
    second.mkdir()
    for name, uri in (
        ("tidemark", config["catalog_uri"]),
        ("lakehouse", f"sqlite:///{second}/c.db"),
    ):
        catalog = SqlCatalog(name, uri=uri, warehouse=f"file://{second}/w-{name}")
        catalog.create_namespace("ns")
        catalog.create_table("ns.other", schema=arrow_rows([1]).schema)
    moved = [
        ({**config, "catalog_name": "tidemark"}, "config.catalog_name"),
        (
            {**config, "catalog_uri": f"sqlite:///{second}/c.db", "catalog_name": "lakehouse"},
            "config.catalog_uri",
        ),
    ]
    for config_now, field in moved:
        with pytest.raises(InvalidInput) as repointed:
            connector_update(connector=connector, config=config_now)
        assert repointed.value.field == field and "reset the connector" in repointed.value.message
    # a change that keeps the table where it is is taken
    connector_update(
        connector=connector, config={**config, "catalog_name": "lakehouse", "expired": "snapshot"}
    )


def test_the_dashboard_connector_form_offers_the_iceberg_kind(client, role_users):
    client.force_login(role_users["admin"])
    page = client.get("/new/connector/").content.decode()
    assert '<option value="iceberg">iceberg</option>' in page


def test_a_pipelines_file_declares_an_iceberg_connector(tmp_path):
    from tidemark_cli.config import UsageError
    from tidemark_cli.pipeline_file import load

    file = tmp_path / "p.yaml"
    file.write_text(
        "version: 1\nconnectors:\n  - {name: orders, kind: iceberg, config: "
        "{catalog_uri: 'sqlite:////data/lake/catalog.db', table: sales.orders}}\n"
    )
    [connector] = load(str(file)).connectors
    assert (connector["kind"], connector["config"]["table"]) == ("iceberg", "sales.orders")
    file.write_text("version: 1\nconnectors:\n  - {name: orders, kind: icebergs}\n")
    with pytest.raises(UsageError, match=r"connectors\[0\]\.kind"):
        load(str(file))


@pytest.mark.parametrize("worker", [CREATE, PLAN])
def test_a_planner_process_plans_an_iceberg_batch_without_pyarrow(worker):
    """Spark's planner processes unpickle the data source and list its partitions, one a data
    file, without importing pyarrow (only the executors' read needs it)."""
    from workers.spark.sources.iceberg import IcebergSource

    files = [
        {"path": f"/data/t/data/{n}.parquet", "named": f"/data/t/data/{n}.parquet", "snapshot": 1}
        for n in range(3)
    ]
    plan = {"table": "ns.t", "files": files, "schema": json.dumps(OBJECT_PLAN["schema"])}
    found = _planner_imports(IcebergSource, plan, worker)
    assert found["before"] == ([] if worker == CREATE else ["pyarrow"])
    assert found["added"] == [], f"the planner process imported {found['added']}"
    assert found["partitions"] == 3


def test_a_table_partitioned_by_a_column_value_is_read_once_per_row(spark, tmp_path):
    """An identity partition puts each data file under a folder such as `v=a/`; the executors read
    the file itself (the folder is not a second `v` column), so a partitioned table reads as DuckDB
    reads it."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    lake = Lake(tmp_path / "lake")
    lake.catalog.drop_table("ns.t")
    schema = lake.catalog.create_table("ns.probe", schema=arrow_rows([1]).schema).schema()
    lake.catalog.drop_table("ns.probe")
    v = schema.find_field("v")
    spec = PartitionSpec(PartitionField(v.field_id, 1000, IdentityTransform(), "v"))
    lake.catalog.create_table("ns.t", schema=schema, partition_spec=spec)
    lake.table.append(pa.concat_tables([arrow_rows([1, 2], "a"), arrow_rows([3], "b")]))
    assert any("v=a" in task.file.file_path for task in lake.table.scan().plan_files())
    out = tmp_path / "out"
    job = iceberg_job("parted", lake, out)

    discovery.discover(job.connector)
    drain(spark, job)

    assert sink_state(out) == duckdb_rows(lake) == [(1, "a"), (2, "a"), (3, "b")]


def test_a_batch_over_a_replacing_snapshot_waits_for_the_restatement_of_what_it_replaced(
    spark, tmp_path
):
    """Restatements go first for Iceberg as for Delta: once a delete rewrote the first snapshot's
    file, the incremental planner takes nothing past it until the job's restatement has rebuilt
    the first snapshot's output (tidemark_stale_outputs), so the sink never holds key 1 twice."""
    from inventory.sources.registry import kind_of

    lake = Lake(tmp_path / "lake")
    out = tmp_path / "out"
    job = iceberg_job("waits", lake, out)
    lake.table.append(arrow_rows([1, 2, 3]))
    discovery.discover(job.connector)
    drain(spark, job)
    lake.table.delete(EqualTo("key", 2))  # rewrites the first snapshot's file without key 2
    kind_of(job.connector).discover(job.connector)  # the look alone: no restatement yet
    first, replacing = Asset.objects.filter(connector=job.connector).order_by("id")
    assert replacing.extra["restates"] == [first.pk]

    assert lifecycle.batch_acquire(job=job, worker="racer") is None

    discovery.discover(job.connector)  # the look's restatement step
    drain(spark, job)
    assert sink_state(out) == duckdb_rows(lake) == [(1, "a"), (3, "a")]


def _swap(lake: Lake, *, remove: list, add: list | None = None, rows=None) -> list:
    """One overwrite snapshot removing the data files `remove` and adding `add` (DataFiles,
    perhaps ones an earlier snapshot removed, under their own paths) or new files of `rows`:
    what the Iceberg sink writes for a replay (the replaced files out, the new ones in), and for
    the undo snapshot when its publish fence fails after the catalog commit (the removed files
    put back, workers/spark/iceberg_sink.py `_revert`). Returns the files it added."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    table = lake.table
    live = {task.file.file_path: task.file for task in table.scan().plan_files()}
    with table.transaction() as tx:
        if add is None:
            add = list(
                _dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=table.io)
            )
        with tx.update_snapshot().overwrite() as step:
            for data_file in remove:
                step.delete_data_file(live[data_file.file_path])
            for data_file in add:
                step.append_data_file(data_file)
    return add


def test_a_file_put_back_by_a_later_snapshot_is_read_once_by_the_rebuild(spark, tmp_path):
    """An upstream Iceberg sink's undo snapshot puts back the very files its failed publish
    removed: the rebuild over the three snapshots reads them from the snapshot that put them
    back (a removal before that snapshot does not make them dead), each row once."""
    lake = Lake(tmp_path / "lake")
    out = tmp_path / "out"
    job = iceberg_job("put-back", lake, out)

    def step():
        discovery.discover(job.connector)
        drain(spark, job)
        assert sink_state(out) == duckdb_rows(lake)

    lake.table.append(arrow_rows([1, 2]))
    step()
    first = [task.file for task in lake.table.scan().plan_files()]
    second = _swap(lake, remove=first, rows=arrow_rows([1, 2], "b"))  # a replay's publish
    step()
    assert sink_state(out) == [(1, "b"), (2, "b")]
    _swap(lake, remove=second, add=first)  # its undo
    step()
    assert sink_state(out) == duckdb_rows(lake) == [(1, "a"), (2, "a")]
    undo = Asset.objects.filter(connector=job.connector).order_by("id").last()
    assert undo.extra["restates"]


def test_a_column_renamed_between_snapshots_is_read_by_its_field_id_not_lost(spark, tmp_path):
    """Iceberg renames a column in the metadata only: files written before keep the old name
    under the same field id. A batch over a snapshot from before the rename, read after it,
    takes the column by its id (pyiceberg's files carry ids), as DuckDB does, never as nulls;
    a column dropped and added again under the same name is a new column, null in old files."""
    from pyiceberg.types import StringType

    lake = Lake(tmp_path / "lake")
    out = tmp_path / "out"
    job = iceberg_job("renamed", lake, out, max_items=10)
    lake.table.append(arrow_rows([1, 2], "old"))
    with lake.table.update_schema() as update:
        update.rename_column("v", "w")
    lake.table.append(
        pa.table({"key": pa.array([3], pa.int64()), "w": pa.array(["new"], pa.string())})
    )
    discovery.discover(job.connector)
    drain(spark, job)
    written = DeltaTable(str(out)).to_pyarrow_table()
    rows = sorted(zip(*(written.column(c).to_pylist() for c in ("key", "w")), strict=True))
    metadata = lake.table.metadata_location.removeprefix("file://")
    duck = _duckdb().cursor().execute("SELECT key, w FROM iceberg_scan(?)", [metadata])
    assert rows == sorted(duck.fetchall()) == [(1, "old"), (2, "old"), (3, "new")]

    again = Lake(tmp_path / "again")
    again.table.append(arrow_rows([1], "old"))
    with again.table.update_schema() as update:
        update.delete_column("v")
    with again.table.update_schema() as update:
        update.add_column("v", StringType())
    job = iceberg_job("readded", again, tmp_path / "out2", max_items=10)
    discovery.discover(job.connector)
    drain(spark, job)
    assert sink_state(tmp_path / "out2") == duckdb_rows(again) == [(1, None)]
