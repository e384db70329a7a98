"""`hudi` connectors (issue 46): a Hudi table's completed instants are the items, read on the
executors from the table's file slices. The sample tables were written by Spark with Hudi (the
SQL beside each zip in ../shared/data/hudi says what every instant did); a test replays a table's
timeline instant by instant and checks, row by row, what each batch read and what the sink then
holds."""

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from inventory.models import Asset, Backfill, Batch, BatchStatus
from inventory.services import discovery, lifecycle
from inventory.services.connectors import connector_create, connector_update
from inventory.services.corrections import watermark_correct
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_create
from inventory.sources import hudi as hudi_source
from tests.support.factories import execute_refused_before_spark
from tests.support.files_job import drain, run_and_commit
from tests.support.hudi_samples import (
    TXNS_NONPART_META,
    TXNS_SIMPLE_META,
    TXNS_SIMPLE_META_MOR,
    Timeline,
    _apply,
    sample,
)
from workers import specs
from workers.spark.errors import BatchError
from workers.spark.run import run_batch

pytestmark = pytest.mark.django_db(transaction=True)


def hudi_job(name: str, table: Path, out: Path, **options):
    connector = connector_create(name=f"{name}-src", kind="hudi", config={"path": str(table)})
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


def sink_state(out: Path, columns=("txn_id", "txn_ts")) -> list[tuple]:
    if not (out / "_delta_log").exists():
        return []
    table = DeltaTable(str(out)).to_pyarrow_table()
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def batch_rows(out: Path, batch: Batch, columns=("txn_id", "txn_ts")) -> list[tuple]:
    """What one batch wrote to the Delta sink (its files are under a prefix of its own)."""
    rows = []
    for uri in DeltaTable(str(out)).file_uris():
        if f"tidemark-b{batch.pk}-" in uri:
            table = pq.read_table(uri.removeprefix("file://"), columns=list(columns))
            rows += zip(*(table.column(c).to_pylist() for c in columns), strict=True)
    return sorted(rows)


def snapshot(table: Path, columns=("txn_id", "txn_ts")) -> list[tuple]:
    """The table's current rows as hudi-rs's own snapshot read gives them."""
    from hudi import HudiTable

    rows = []
    for batch in HudiTable(str(table)).read():
        rows += zip(*(batch.column(c).to_pylist() for c in columns), strict=True)
    return sorted(rows)


# ---- what each instant of the sample tables did, from the SQL beside it ----------------------


@pytest.mark.parametrize(
    ("name", "steps", "last_restated"),
    [
        # the insert overwrite of eu restates every instant with rows in eu
        ("sample_table/cow/v9_txns_simple_meta", TXNS_SIMPLE_META, (0, 3, 4, 6)),
        ("sample_table/mor/avro/v9_txns_simple_meta", TXNS_SIMPLE_META_MOR, (0, 3, 4, 6)),
        # one file group: the update of TXN-007 restates every instant before it
        ("sample_table/cow/v9_txns_nonpart_meta", TXNS_NONPART_META, (0, 1, 2, 3, 4)),
    ],
)
def test_each_batch_reads_what_its_instant_changed_and_the_sink_holds_each_key_once(
    spark, tmp_path, name, steps, last_restated, client, role_users
):
    """The table's timeline replayed instant by instant: each instant's own batch reads exactly
    the rows the SQL says it inserted or updated (nothing for a delete, clustering or a
    compaction); an update, a delete and the insert overwrite restate the instants whose rows
    they changed, whose rebuilds read only their rows still live; after every instant the sink
    holds the table's rows, each key once with its latest state."""
    table = sample(tmp_path, name)
    timeline = Timeline(table)
    out = tmp_path / "out"
    job = hudi_job("replay", table, out)
    state: dict = {}
    for number, step in enumerate(steps, start=1):
        stamp = timeline.advance()
        assert discovery.discover(job.connector) == 1, f"instant {number}"
        [asset] = Asset.objects.filter(connector=job.connector, extra__instant=stamp)
        drain(spark, job)
        published = Batch.objects.get(
            job=job, span__contains=asset.pk, status=BatchStatus.SUCCEEDED, replaced_by=None
        )
        read = batch_rows(out, published)
        if "restates" in asset.extra:
            # its restatement carries it: the restated instants' live rows and its own, at once
            assert published.backfill.created_by == "tidemark", f"instant {number} ({stamp})"
            assert set(step[0].items()) <= set(read), f"instant {number} ({stamp})"
        else:
            assert published.backfill is None, f"instant {number} ({stamp})"
            assert read == sorted(step[0].items()), f"instant {number} ({stamp})"
        state = _apply(state, step)
        assert sink_state(out) == sorted(state.items()), f"after instant {number} ({stamp})"
    assert sink_state(out) == snapshot(table)
    # a replay from the output holding the eighth instant on (where the partitioned tables'
    # insert overwrite is, published with its restatement's batch): each key once still
    eighth = Asset.objects.get(connector=job.connector, extra__instant=timeline.writes[7])
    holding = Batch.objects.get(
        job=job, span__contains=eighth.pk, status=BatchStatus.SUCCEEDED, replaced_by=None
    )
    watermark_correct(job=job, value=holding.span.lower - 1, actor="a", reason="fix", replay=True)
    drain(spark, job)
    assert sink_state(out) == snapshot(table) == sorted(state.items())
    restated = Backfill.objects.filter(job=job, created_by="tidemark").order_by("id")
    shown = ", ".join(timeline.writes[i] for i in last_restated)
    assert restated.last().reason == (
        f"later instants of Hudi table {table} changed rows of instants {shown}"
    )
    client.force_login(role_users["viewer"])
    page = client.get(f"/jobs/{job.name}/").content.decode()
    assert "Hudi instants whose rows a later instant changed" in page
    assert f"changed rows of instants {shown}" in page


def test_clustering_and_compaction_restate_nothing_and_an_overwrite_restates_down_the_chain(
    tmp_path,
):
    """Registered in one look each, the MOR table's instants: updates and deletes restate the
    insert they changed, the insert overwrite of eu restates every instant whose rows lived in
    the file groups it replaced, clustering and compaction nothing; each changing instant's item
    records what it restates (`extra.restates`)."""
    table = sample(tmp_path, "sample_table/mor/avro/v9_txns_simple_meta")
    timeline = Timeline(table)
    connector = connector_create(name="chain", kind="hudi", config={"path": str(table)})
    restated = []
    for _ in TXNS_SIMPLE_META_MOR:
        timeline.advance()
        hudi_source.discover(connector)  # without the restatement step, which takes the list
        restated.append(
            sorted(
                Asset.objects.filter(
                    pk__in=(connector.cursor or {}).get("restate", [])
                ).values_list("extra__instant", flat=True)
            )
        )
        connector.cursor = {k: v for k, v in connector.cursor.items() if k != "restate"}
        connector.save(update_fields=["cursor"])
    w = timeline.writes
    assert restated == [
        [],
        [w[0]],  # update of TXN-001
        [w[0], w[1]],  # delete of TXN-002 in the same file group
        [w[0]],  # update of TXN-005 (eu)
        [w[0], w[3]],  # its delete
        [w[0]],  # update of TXN-007 (apac)
        [],  # insert of two eu rows in a new file group
        [w[0], w[3], w[4], w[6]],  # insert overwrite of eu: both eu file groups
        [],
        [],
        [],  # compaction
        [],  # clustering
        [],
    ]
    # each changing instant's item names the items it restates (restatements go first)
    recorded = [
        sorted(
            Asset.objects.filter(pk__in=asset.extra.get("restates", [])).values_list(
                "extra__instant", flat=True
            )
        )
        for asset in Asset.objects.filter(connector=connector).order_by("id")
    ]
    assert recorded == restated


def test_instants_are_registered_in_timeline_order_and_a_pending_one_holds_back_later_ones(
    tmp_path,
):
    table = sample(tmp_path, "sample_table/cow/v9_txns_simple_overwrite")
    timeline = Timeline(table, shown=1)
    connector = connector_create(name="instants", kind="hudi", config={"path": str(table)})
    assert hudi_source.discover(connector) == 1
    # the second insert is still inflight (its completed file is not written yet) when the
    # overwrite completes: the overwrite waits until the insert before it completes
    second = timeline.advance()
    timeline.advance()
    [done] = timeline.folder.glob(f"{second}_*.commit")
    shutil.move(done, timeline.held / done.name)
    assert hudi_source.discover(connector) == 0
    shutil.move(timeline.held / done.name, done)
    assert hudi_source.discover(connector) == 2
    assets = list(Asset.objects.filter(connector=connector).order_by("id"))
    assert [a.extra["instant"] for a in assets] == timeline.writes
    assert [(a.extra["action"], a.extra["operation"], a.extra["rows"]) for a in assets] == [
        ("commit", "insert", 6),
        ("commit", "insert", 2),
        ("replacecommit", "insert_overwrite_table", 3),
    ]
    assert all(a.weight > 400_000 for a in assets)  # the bytes each wrote
    assert [a.location for a in assets] == [f"{table}@{s}" for s in timeline.writes]
    assert connector.cursor["instant"] == timeline.writes[-1]
    # the overwrite of the table restates the insert registered before it; the second insert,
    # registered in the same look, was never read
    assert connector.cursor["restate"] == [assets[0].pk]


def test_an_overwrite_of_the_table_leaves_only_its_rows_in_the_sink(spark, tmp_path):
    table = sample(tmp_path, "sample_table/mor/avro/v9_txns_simple_overwrite")
    timeline = Timeline(table, shown=2)
    out = tmp_path / "out"
    job = hudi_job("overwritten", table, out)
    discovery.discover(job.connector)
    drain(spark, job)
    assert [k for k, _ in sink_state(out)] == [f"TXN-00{i}" for i in range(1, 9)]
    timeline.advance()
    discovery.discover(job.connector)
    assert Backfill.objects.filter(job=job, created_by="tidemark").count() == 1
    drain(spark, job)
    assert [k for k, _ in sink_state(out)] == ["TXN-101", "TXN-102", "TXN-103"]
    assert sink_state(out) == snapshot(table)


def test_a_rolled_back_instant_is_never_read(spark, tmp_path):
    """The SQL upserts TXN-001 and inserts TXN-004 in its second commit, then rolls it back: the
    sink never sees them, only the first commit's rows and the third's TXN-002 (an INSERT, which
    Hudi does not de-duplicate: the table holds TXN-002 twice, and so does the sink)."""
    table = sample(tmp_path, "sample_table/mor/avro/v9_nonpartitioned_rollback")
    out = tmp_path / "out"
    job = hudi_job("rolled-back", table, out, max_items=10)
    assert discovery.discover(job.connector) == 2
    drain(spark, job)
    rows = sink_state(out, ("txn_id", "txn_ts", "txn_type"))
    assert rows == [
        ("TXN-001", 1700000000001, "debit"),
        ("TXN-002", 1700000000002, "debit"),
        ("TXN-002", 1700200000002, "debit"),
        ("TXN-003", 1700000000003, "debit"),
    ]
    assert sink_state(out) == snapshot(table)


@pytest.mark.parametrize(
    ("name", "columns"),
    [
        ("sample_table/cow/v9_txns_simple_overwrite", ("txn_id", "txn_ts", "amount")),
        ("sample_table/cow/v8_nonpartitioned", ("id", "name", "isActive")),
        ("quickstart_trips_table/mor/avro/v8_trips_8i3u1d", ("uuid", "rider", "fare")),
    ],
)
def test_a_job_over_a_whole_table_holds_its_snapshot(spark, tmp_path, name, columns):
    """One look registers every instant; the batches (two instants each) leave the sink with the
    table's rows as hudi-rs's snapshot read gives them, each key once."""
    table = sample(tmp_path, name)
    out = tmp_path / "out"
    job = hudi_job("whole", table, out, max_items=2)
    assert discovery.discover(job.connector) >= 2
    drain(spark, job)
    assert sink_state(out, columns) == snapshot(table, columns)
    assert len(sink_state(out, columns[:1])) == len(set(sink_state(out, columns[:1])))


def test_a_log_block_of_an_instant_completed_after_planning_is_not_merged(spark, tmp_path):
    """A merge-on-read slice read on an executor is merged as of the batch's planning: a log
    block that a later instant added meanwhile would otherwise replace a key's state by one whose
    commit time is not the batch's, and the batch would lose the row."""
    table = sample(tmp_path, "quickstart_trips_table/mor/avro/v8_trips_8i3u1d")
    timeline = Timeline(table, shown=6)  # the last deltacommit (an update in sao_paulo) not yet
    out = tmp_path / "out"
    job = hudi_job("as-of", table, out, max_items=10)
    assert discovery.discover(job.connector) == 6
    planned = snapshot(table, ("uuid", "fare"))
    spec = specs.batch_spec(batch=lifecycle.batch_acquire(job=job, worker="w"))
    timeline.advance()
    [late] = table.glob(f"city=sao_paulo/.*_{timeline.writes[-1]}.log.*")
    [sao_paulo] = [s for s in spec["source"]["slices"] if s["base"].startswith("city=sao_paulo")]
    sao_paulo["logs"].append(str(late.relative_to(table)))  # as if appended to its log
    assert run_batch(spark, spec)["rows_out"] == len(planned)
    assert sink_state(out, ("uuid", "fare")) == planned


def test_an_empty_table_has_no_items(tmp_path):
    table = sample(tmp_path, "sample_table/cow/v6_empty")
    connector = connector_create(name="empty", kind="hudi", config={"path": str(table)})
    assert discovery.discover(connector) == 0
    assert Asset.objects.filter(connector=connector).count() == 0


def test_a_path_that_is_not_a_hudi_table_or_an_unknown_key_is_a_400(tmp_path):
    with pytest.raises(InvalidInput) as refused:
        connector_create(name="not-hudi", kind="hudi", config={"path": str(tmp_path)})
    assert refused.value.field == "config.path"
    assert "not a Hudi table" in str(refused.value)
    table = sample(tmp_path, "sample_table/cow/v8_nonpartitioned")
    with pytest.raises(InvalidInput) as refused:
        connector_create(name="typo", kind="hudi", config={"path": str(table), "format": "x"})
    assert refused.value.field == "config.format"
    with pytest.raises(InvalidInput) as refused:
        connector_create(name="relative", kind="hudi", config={"path": "tables/t"})
    assert refused.value.field == "config.path"
    with pytest.raises(InvalidInput) as refused:  # outside TIDEMARK_ALLOWED_ROOTS
        connector_create(name="outside", kind="hudi", config={"path": "/etc"})
    assert refused.value.field == "config.path"
    assert "TIDEMARK_ALLOWED_ROOTS" in str(refused.value)


def test_an_archived_instant_fails_its_batch_naming_it_and_a_snapshot_backfill_reads_it(
    spark, tmp_path, client, role_users
):
    """An instant the archiver took off the active timeline fails its batch (stored on the
    batch, shown on its page) naming the instant, the table's retention and the way out; with
    config.archived "snapshot" the retry reads the rows the instant last wrote from every
    partition's latest file slices."""
    table = sample(tmp_path, "sample_table/cow/v9_txns_simple_meta")
    out = tmp_path / "out"
    job = hudi_job("archived", table, out)
    discovery.discover(job.connector)
    first = Asset.objects.filter(connector=job.connector).order_by("id").first()
    for file in (table / ".hoodie" / "timeline").glob(f"{first.extra['instant']}*"):
        file.unlink()  # what the archiver does to the active timeline
    (batch,) = lifecycle.batches_plan(job=job, limit=1)
    stored = execute_refused_before_spark(batch)
    assert stored.status == BatchStatus.FAILED
    message = stored.error["message"]
    assert f"instant {first.extra['instant']} of the Hudi table {table}" in message
    assert "hoodie.cleaner.commits.retained=10, hoodie.keep.min.commits=20" in message
    assert 'snapshot backfill: set the connector\'s config.archived to "snapshot"' in message
    client.force_login(role_users["viewer"])
    page = client.get(f"/batches/{batch.pk}/").content.decode()
    assert f"instant {first.extra['instant']} of the Hudi table {table} is no longer" in page

    connector_update(connector=job.connector, config={"path": str(table), "archived": "snapshot"})
    run_and_commit(spark, lifecycle.batch_acquire(job=job, worker="w"))
    # the first insert's rows still live: not updated, deleted or overwritten since
    assert sink_state(out) == [
        ("TXN-003", 1700000000003),
        ("TXN-008", 1700000000008),
    ]
    with pytest.raises(InvalidInput) as refused:
        connector_update(connector=job.connector, config={"path": str(table), "archived": "x"})
    assert refused.value.field == "config.archived"


def test_a_file_slice_outside_the_table_fails_the_batch_naming_its_instant(spark, tmp_path):
    table = sample(tmp_path, "sample_table/cow/v8_nonpartitioned")
    job = hudi_job("outside", table, tmp_path / "out", max_items=10)
    discovery.discover(job.connector)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    spec = specs.batch_spec(batch=batch)
    [file_slice] = spec["source"]["slices"]
    (table / "linked.parquet").symlink_to("/etc/hostname")  # a link inside, leading outside
    for name in ("../../etc/passwd", "/etc/passwd", "../nowhere.parquet", "linked.parquet"):
        spec["source"]["slices"] = [{**file_slice, "base": name}]
        with pytest.raises(BatchError, match=f"instant {file_slice['instant']} .* outside"):
            run_batch(spark, spec)
    with pytest.raises(InvalidInput, match="outside the table directory"):
        hudi_source.inside(str(table), "../other/x.parquet", instant="1")
    Batch.objects.filter(pk=batch.pk).delete()


def test_a_file_slice_cleaned_after_planning_fails_the_batch_naming_its_instant(spark, tmp_path):
    table = sample(tmp_path, "sample_table/cow/v8_nonpartitioned")
    job = hudi_job("cleaned", table, tmp_path / "out", max_items=10)
    discovery.discover(job.connector)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    spec = specs.batch_spec(batch=batch)
    [file_slice] = spec["source"]["slices"]
    (table / file_slice["base"]).unlink()
    with pytest.raises(BatchError, match=f"instant {file_slice['instant']} .* was cleaned"):
        run_batch(spark, spec)


# ---- the kind everywhere else: API, dashboard form, pipelines file ---------------------------


def test_the_api_creates_a_hudi_connector_and_refuses_a_bad_one_naming_the_field(
    role_users, tmp_path
):
    from tests.support.api_support import token_client

    admin = token_client(role_users["admin"])
    table = sample(tmp_path, "sample_table/cow/v8_nonpartitioned")
    bad = admin.post(
        "/api/v1/connectors/",
        {"name": "h", "kind": "hudi", "config": {"path": str(tmp_path)}},
        format="json",
    )
    assert bad.status_code == 400, bad.content
    assert "not a Hudi table" in str(bad.json()["config.path"])
    typo = admin.post(
        "/api/v1/connectors/",
        {"name": "h", "kind": "hudi", "config": {"path": str(table), "lineage": True}},
        format="json",
    )
    assert typo.status_code == 400 and "config.lineage" in typo.json(), typo.content
    made = admin.post(
        "/api/v1/connectors/",
        {"name": "h", "kind": "hudi", "config": {"path": str(table)}},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert (made.json()["kind"], made.json()["weight_unit"]) == ("hudi", "bytes")
    assert admin.post("/api/v1/connectors/h/discover/").json()["registered"] == 2
    locations = Asset.objects.filter(connector__name="h").order_by("id")
    assert [a.location.rsplit("@", 1)[1] for a in locations] == [
        "20250713010535797",
        "20250713010536861",
    ]


def test_the_dashboard_connector_form_offers_the_hudi_kind(client, role_users):
    client.force_login(role_users["admin"])
    page = client.get("/new/connector/").content.decode()
    assert '<option value="hudi">hudi</option>' in page


def test_a_pipelines_file_declares_a_hudi_connector_with_a_path_from_its_folder(tmp_path):
    from tidemark_cli.config import UsageError
    from tidemark_cli.pipeline_file import load

    file = tmp_path / "p.yaml"
    file.write_text(
        "version: 1\nconnectors:\n  - {name: trips, kind: hudi, config: {path: tables/trips}}\n"
    )
    [connector] = load(str(file)).connectors
    assert (connector["kind"], connector["config"]["path"]) == (
        "hudi",
        str(tmp_path / "tables/trips"),
    )
    file.write_text("version: 1\nconnectors:\n  - {name: trips, kind: hoodie}\n")
    with pytest.raises(UsageError, match=r"connectors\[0\]\.kind"):
        load(str(file))
