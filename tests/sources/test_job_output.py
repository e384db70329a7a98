"""`job_output` connectors: a job reads another job's commits, in commit order (chaining).

Batches run in this process through the real lifecycle (acquire, batch_spec, run_batch on the
session's SparkSession, succeed) unless a test says it uses the Celery worker; every publish goes
through the real fence, which opens its own connection, so these tests commit (transaction=True).
"""

import json
import threading
from datetime import timedelta
from pathlib import Path

import psycopg2
import pytest
from django.db import connection
from django.utils import timezone

from inventory import selectors
from inventory.models import Asset, Backfill, Batch, BatchStatus, Job, Watermark
from inventory.services import dispatch, lifecycle, outputs
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create, connector_reset, connector_update
from inventory.services.corrections import watermark_correct
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.jobs import job_create, job_delete
from inventory.sources import files
from tests.support.api_support import token_client
from tests.support.job_chain import (
    commit,
    downstream_job,
    drain,
    expected,
    file_rows,
    run,
    upstream_job,
)
from tests.support.sink_database import sink_cursor, sink_database_dsn
from tests.support.worker_fixtures import wait_until, write_orders
from workers import specs

pytestmark = pytest.mark.django_db(transaction=True)


# ---- helpers -------------------------------------------------------------------------------------


def table_rows(table: str) -> list[tuple[int, str]]:
    with sink_cursor() as cursor:
        cursor.execute(f'SELECT key, v FROM "{table}"')
        return sorted(cursor.fetchall())


def items_of(batch: Batch) -> list[str]:
    return specs.batch_spec(batch=Batch.objects.get(pk=batch.pk))["items"]


def commit_seqs(job) -> dict[int, int]:
    return dict(Batch.objects.filter(job=job).values_list("pk", "commit_seq"))


@pytest.fixture
def sink_dsn(monkeypatch):
    monkeypatch.setenv("TM_CHAIN_SINK_DSN", sink_database_dsn())
    return "TM_CHAIN_SINK_DSN"


# ---- commit order ----------------------------------------------------------------------------------


def test_a_chained_job_reads_each_upstream_commit_once_in_commit_order(spark, tmp_path):
    up = upstream_job(tmp_path, "up-order", items=3, max_concurrency=3)
    planned = [lifecycle.batch_acquire(job=up, worker="w") for _ in range(3)]
    assert [b.span.lower for b in planned] == sorted(b.span.lower for b in planned)
    results = {b.pk: run(spark, b) for b in planned}
    down_sink = tmp_path / "down-order"
    down = downstream_job("down-order", up, {"kind": "files", "path": str(down_sink)})

    first, second, third = planned
    commit(third, results[third.pk])  # the last one planned commits first
    assert drain(spark, down) and file_rows(spark, down_sink) == expected([2])
    commit(first, results[first.pk])
    commit(second, results[second.pk])
    drain(spark, down)

    assert [commit_seqs(up)[b.pk] for b in (third, first, second)] == [1, 2, 3]
    reads = Batch.objects.filter(job=down).order_by("span")
    assert [(b.span.lower, b.span.upper) for b in reads] == [(0, 2), (2, 3), (3, 4)]
    # each downstream batch read the upstream commit of its id: the commit order
    assert [items_of(b) for b in reads] == [[str(third.pk)], [str(first.pk)], [str(second.pk)]]
    spec = specs.batch_spec(batch=reads[0])
    assert spec["source"]["outputs"] == [
        {
            "batch_id": third.pk,
            "commit_seq": 1,
            "location": results[third.pk]["location"],
            "format": "parquet",
        }
    ]
    assert file_rows(spark, down_sink) == expected(range(3))
    assert Watermark.objects.get(job=down).value == 3


def test_a_downstream_job_lags_by_the_upstream_commits_it_has_not_committed(spark, tmp_path):
    up = upstream_job(tmp_path, "up-lag", items=3)
    down = downstream_job("down-lag", up, {"kind": "files", "path": str(tmp_path / "lag")})
    drain(spark, up, limit=2)
    assert selectors.jobs_lag([down])[down.pk].items == 2
    drain(spark, down)
    drain(spark, up)
    assert selectors.job_lag(job=Job.objects.get(pk=down.pk)).items == 1


def test_planning_never_passes_an_upstream_commit_still_in_flight(tmp_path):
    """Two upstream commits race on their own connections; the downstream job plans in between."""
    up = upstream_job(tmp_path, "up-race", items=2, max_concurrency=2)
    a, b = (lifecycle.batch_acquire(job=up, worker="w") for _ in range(2))
    down = downstream_job("down-race", up, {"kind": "files", "path": str(tmp_path / "d")})
    succeed = "SELECT commit_seq FROM tidemark_succeed(%s, %s, %s::jsonb, NULL)"
    result = json.dumps({"rows_out": 1, "location": str(tmp_path / "nowhere")})
    conn_a = psycopg2.connect(outputs.control_plane_dsn())
    conn_b = psycopg2.connect(outputs.control_plane_dsn())
    seqs = {}
    try:
        with conn_a.cursor() as cur:
            cur.execute(succeed, [a.pk, a.attempt, result])
            seqs["a"] = cur.fetchone()[0]  # numbered, not committed: the watermark lock is held

        def commit_b():
            with conn_b.cursor() as cur:
                cur.execute(succeed, [b.pk, b.attempt, result])
                seqs["b"] = cur.fetchone()[0]

        racer = threading.Thread(target=commit_b)
        racer.start()
        pid_b = conn_b.get_backend_pid()

        def b_waits_for_the_lock():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid_b]
                )
                row = cursor.fetchone()
            return row is not None and row[0] == "Lock"

        wait_until(b_waits_for_the_lock, timeout=10, message="b to wait for the watermark lock")
        assert lifecycle.batches_plan(job=down, limit=5) == []  # commit 1 is in flight

        conn_a.commit()
        racer.join(timeout=10)
        assert seqs == {"a": 1, "b": 2}  # b was numbered after a committed
        # b (commit 2) is numbered but not committed: planning stops after commit 1
        first = lifecycle.batches_plan(job=down, limit=5)
        assert [(x.span.lower, x.span.upper) for x in first] == [(0, 2)]

        conn_b.commit()
        second = lifecycle.batches_plan(job=down, limit=5)
        assert [(x.span.lower, x.span.upper) for x in second] == [(2, 3)]
    finally:
        conn_a.close()
        conn_b.close()


# ---- retries and replays upstream ------------------------------------------------------------------


def test_upstream_retries_and_replays_reach_an_upsert_sink_once(spark, tmp_path, sink_dsn):
    up = upstream_job(tmp_path, "up-retry", items=4)
    # attempt 1 publishes its output, then its worker is lost; attempt 2 replaces that output
    batch = lifecycle.batch_acquire(job=up, worker="lost")
    run(spark, batch)
    Batch.objects.filter(pk=batch.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    lifecycle.batches_reap_expired()
    retried = lifecycle.batch_acquire(job=up, worker="w")
    assert (retried.pk, retried.attempt) == (batch.pk, 2)
    commit(retried, run(spark, retried))
    drain(spark, up)

    table = "chain_upsert_sink"
    upsert = {"kind": "postgres", "dsn_env": sink_dsn, "table": table, "key": ["key"]}
    files_sink = tmp_path / "down-files"
    down_upsert = downstream_job("down-upsert", up, upsert, max_items=2)
    down_files = downstream_job("down-files", up, {"kind": "files", "path": str(files_sink)})
    drain(spark, down_upsert)
    drain(spark, down_files)
    assert table_rows(table) == expected(range(4))
    assert file_rows(spark, files_sink) == expected(range(4))

    # the upstream job replays its last two items: their outputs are replaced, and the new
    # batches are later commits (5, 6) that the downstream jobs read as new input
    done = Batch.objects.filter(job=up, status=BatchStatus.SUCCEEDED).order_by("span")
    watermark_correct(job=up, value=done[2].span.lower - 1, actor="a", reason="fix", replay=True)
    drain(spark, up)
    replaced = Batch.objects.filter(job=up, replaced_by__isnull=False)
    assert sorted(replaced.values_list("commit_seq", flat=True)) == [3, 4]
    assert sorted(Batch.objects.filter(job=up).values_list("commit_seq", flat=True)) == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    # the replaced commits 3 and 4 are restated downstream: each job that read them rebuilds
    # those outputs (a backfill by tidemark, before its incremental work), where they read as
    # nothing; their rows arrive with commits 5 and 6
    for down in (down_upsert, down_files):
        restated = list(Backfill.objects.filter(job=down).order_by("pk"))
        assert restated and {(b.created_by, b.priority) for b in restated} == {("tidemark", 1)}
        assert "replaced the output of commits 3" in restated[0].reason
    drain(spark, down_upsert)
    drain(spark, down_files)
    assert table_rows(table) == expected(range(4))
    assert file_rows(spark, files_sink) == expected(range(4))  # each row once, files too


# ---- replay and retention --------------------------------------------------------------------------


def test_a_replay_from_a_retained_commit_rereads_exactly_from_there(spark, tmp_path, role_users):
    up = upstream_job(tmp_path, "up-replay", items=6)
    sink = tmp_path / "down-replay"
    down = downstream_job(
        "down-replay", up, {"kind": "files", "path": str(sink)}, retention_commits=4
    )
    for _ in range(3):  # the chain keeps up: two upstream commits, then the downstream reads
        drain(spark, up, limit=2)
        drain(spark, down)
    by_seq = {seq: pk for pk, seq in commit_seqs(up).items()}

    watermark_correct(job=down, value=3, actor="a", reason="re-read 4..6", replay=True)
    again = drain(spark, down)
    assert [items_of(b) for b in again] == [[str(by_seq[n])] for n in (4, 5, 6)]
    assert file_rows(spark, sink) == expected(range(6))

    # retention_commits=4 keeps commits 3..6: a replay from commit 2 would read an expired one
    api = token_client(role_users["admin"])
    refused = api.post(
        f"/api/v1/jobs/{down.name}/watermark/",
        {"value": 1, "reason": "too far", "replay": True},
        format="json",
    )
    assert refused.status_code == 400
    message = refused.json()["value"]
    message = message[0] if isinstance(message, list) else message
    assert "commit 2 of job up-replay" in message and "retention_commits=4" in message
    assert Watermark.objects.get(job=down).position == 7  # nothing moved
    allowed = api.post(
        f"/api/v1/jobs/{down.name}/watermark/",
        {"value": 2, "reason": "oldest retained", "replay": True},
        format="json",
    )
    assert allowed.status_code == 200, allowed.content


def test_planning_or_reading_an_expired_commit_is_an_error_naming_the_retention(spark, tmp_path):
    up = upstream_job(tmp_path, "up-expired", items=5)
    drain(spark, up)
    sink = {"kind": "files", "path": str(tmp_path / "late")}
    late = downstream_job("down-late", up, sink, retention_commits=2)
    with pytest.raises(InvalidInput) as planning:
        dispatch.job_run(job=late)
    assert planning.value.field == "config.retention_commits"
    # the message is the source's own, first (tidemark_refuse), not a database error's text
    assert planning.value.message.startswith("commit 1 of job up-expired is expired")
    with pytest.raises(InvalidInput) as acquiring:  # an external client's acquire/ likewise
        lifecycle.batch_acquire(job=late, worker="client")
    assert acquiring.value.field == "config.retention_commits"
    assert acquiring.value.message.startswith("commit 1 of job up-expired is expired")
    assert not Batch.objects.filter(job=late).exists()

    # planned while retained, read after the upstream moved on: the batch's read is refused
    keeps = downstream_job(
        "down-keeps", up, dict(sink, path=str(tmp_path / "k")), retention_commits=5
    )
    planned = lifecycle.batches_plan(job=keeps, limit=1)
    assert [(b.span.lower, b.span.upper) for b in planned] == [(0, 2)]
    connector_update(connector=keeps.connector, config={"job": up.name, "retention_commits": 3})
    with pytest.raises(InvalidInput) as reading:
        specs.batch_spec(batch=Batch.objects.get(pk=planned[0].pk))
    assert reading.value.field == "config.retention_commits"
    assert "commit 1 of job up-expired" in reading.value.message
    # listing and counting expired commits is no error (the batch page, the lag)
    assert [i["item"] for i in selectors.batch_items(batch=planned[0])] == [
        str(Batch.objects.get(job=up, commit_seq=1).pk)
    ]
    assert selectors.job_lag(job=Job.objects.get(pk=keeps.pk)).items == 5


def test_retention_by_days_expires_commits_by_their_commit_time(spark, tmp_path):
    up = upstream_job(tmp_path, "up-days", items=2)
    drain(spark, up)
    old = Batch.objects.get(job=up, commit_seq=1)
    Batch.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=3))
    sink = {"kind": "files", "path": str(tmp_path / "days")}
    week = downstream_job("down-week", up, sink, retention_days=7)
    assert len(drain(spark, week)) == 2
    two_days = downstream_job(
        "down-2d", up, dict(sink, path=str(tmp_path / "d2")), retention_days=2
    )
    with pytest.raises(InvalidInput) as refused:
        lifecycle.batches_plan(job=two_days, limit=1)
    assert refused.value.field == "config.retention_days"
    assert "retention_days=2" in refused.value.message


# ---- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, field",
    [
        ({}, "config.job"),
        ({"job": "no-such-job"}, "config.job"),
        ({"job": "up-valid", "retention_commits": 0}, "config.retention_commits"),
        ({"job": "up-valid", "retention_commits": "3"}, "config.retention_commits"),
        ({"job": "up-valid", "retention_commits": True}, "config.retention_commits"),
        ({"job": "up-valid", "retention_days": -1}, "config.retention_days"),
        ({"job": "up-valid", "retention_commits": 3, "retention_days": 1}, "config.retention_days"),
        ({"job": "up-valid", "path": "/tmp"}, "config.path"),
    ],
)
def test_bad_job_output_configs_are_a_400_naming_the_field(tmp_path, role_users, config, field):
    upstream_job(tmp_path, "up-valid", items=1)
    response = token_client(role_users["admin"]).post(
        "/api/v1/connectors/",
        {"name": "bad-chain", "kind": "job_output", "config": config},
        format="json",
    )
    assert response.status_code == 400
    assert field in response.json(), response.json()


def test_an_upstream_writing_to_postgres_is_refused_naming_config_job(tmp_path, role_users):
    upsert = {"kind": "postgres", "dsn_env": "X", "table": "t", "key": ["key"]}
    upstream_job(tmp_path, "up-pg", items=1, sink=upsert)
    response = token_client(role_users["admin"]).post(
        "/api/v1/connectors/",
        {"name": "reads-pg", "kind": "job_output", "config": {"job": "up-pg"}},
        format="json",
    )
    assert response.status_code == 400
    assert "PostgreSQL" in str(response.json()["config.job"])


def test_a_job_reading_its_own_output_is_refused_directly_and_indirectly(tmp_path):
    up = upstream_job(tmp_path, "up-cycle", items=1)
    sink = {"kind": "files", "path": str(tmp_path / "c")}
    b = downstream_job("b-cycle", up, sink)
    d = downstream_job("d-cycle", b, dict(sink, path=str(tmp_path / "d")))
    # b's connector re-pointed at b itself
    with pytest.raises(InvalidInput) as direct:
        connector_update(connector=b.connector, config={"job": "b-cycle"})
    assert direct.value.field == "config.job" and "b-cycle -> b-cycle" in direct.value.message
    # b's connector reset to read d, which reads b
    with pytest.raises(InvalidInput) as indirect:
        connector_reset(connector=b.connector, config={"job": d.name}, actor="a", reason="r")
    assert indirect.value.field == "config.job"
    assert "b-cycle -> d-cycle -> b-cycle" in indirect.value.message
    assert b.connector.__class__.objects.get(pk=b.connector.pk).config == {"job": "up-cycle"}


def test_a_read_upstream_job_is_not_deleted_and_a_new_job_may_not_read_itself(tmp_path):
    up = upstream_job(tmp_path, "up-del", items=1)
    sink = {"kind": "files", "path": str(tmp_path / "x")}
    down = downstream_job("down-del", up, sink)
    with pytest.raises(Conflict) as refused:
        job_delete(job=up)
    assert "down-del-src" in str(refused.value)
    # a job deleted before this check existed leaves its name free: a new job of that name on
    # the connector reading it would read itself
    Job.objects.filter(pk=up.pk).delete()
    with pytest.raises(InvalidInput) as itself:
        job_create(name="up-del", connector=down.connector, batch_weight=1, sink=sink)
    assert itself.value.field == "connector" and "cannot read itself" in itself.value.message
    # ... or, two hops down, read its own output through down-del
    second = connector_create(name="reads-down", kind="job_output", config={"job": "down-del"})
    with pytest.raises(InvalidInput) as indirect:
        job_create(name="up-del", connector=second, batch_weight=1, sink=sink)
    assert "up-del -> down-del -> up-del" in indirect.value.message


def test_the_upstream_job_changes_under_existing_jobs_only_by_a_reset(tmp_path):
    up = upstream_job(tmp_path, "up-ident", items=1)
    other = upstream_job(tmp_path, "up-other", items=1)
    down = downstream_job("down-ident", up, {"kind": "files", "path": str(tmp_path / "i")})
    with pytest.raises(InvalidInput) as moved:
        connector_update(connector=down.connector, config={"job": other.name})
    assert moved.value.field == "config.job" and "reset" in moved.value.message
    connector_update(connector=down.connector, config={"job": up.name, "retention_commits": 9})
    reset = connector_reset(
        connector=down.connector, config={"job": other.name}, actor="a", reason="new upstream"
    )
    assert reset.config == {"job": other.name}


# ---- end to end ------------------------------------------------------------------------------------


def test_a_chain_flows_through_a_real_worker_without_waiting_for_beat(tmp_path, celery_worker):
    landing, up_sink, down_sink = tmp_path / "landing", tmp_path / "up", tmp_path / "down"
    for n in range(3):
        write_orders(landing / f"orders-{n}.parquet", first_id=n * 100, count=10, day=n + 1)
    source = connector_create(name="e2e-orders", kind="files", config={"path": str(landing)})
    assert files.directory_discover(connector=source) == 3
    up = job_create(
        name="e2e-up",
        connector=source,
        batch_weight=10**9,
        max_items=1,
        sink={"kind": "files", "path": str(up_sink)},
    )
    down = downstream_job("e2e-down", up, {"kind": "files", "path": str(down_sink)}, max_items=2)

    dispatch.job_run(job=up)  # only the upstream job is run: its commits run the downstream job

    def settled():
        busy = Batch.objects.filter(status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING])
        done = Watermark.objects.get(job=down).position == 4
        return done and not busy.filter(job__in=[up, down]).exists()

    try:
        wait_until(settled, timeout=120, message="the downstream job to read all three commits")
    except BaseException:
        states = Batch.objects.filter(job__in=[up, down]).values_list(
            "job__name", "span", "status", "commit_seq", "error"
        )
        print(list(states), celery_worker.log()[-6000:])
        raise
    import pyarrow.dataset as ds

    rows = ds.dataset(down_sink, format="parquet", partitioning="hive").to_table().to_pylist()
    assert sorted(r["order_id"] for r in rows) == sorted(
        n * 100 + i for n in range(3) for i in range(10)
    )
    assert all(b.status == BatchStatus.SUCCEEDED for b in Batch.objects.filter(job=down))


def test_an_upstream_backfill_is_restated_two_levels_down_each_row_once(spark, tmp_path):
    up = upstream_job(tmp_path, "up-two", items=4)
    drain(spark, up)
    middle_sink = tmp_path / "middle"
    middle = downstream_job("middle", up, {"kind": "files", "path": str(middle_sink)}, max_items=2)
    bottom_sink = tmp_path / "bottom"
    bottom = downstream_job("bottom", middle, {"kind": "files", "path": str(bottom_sink)})
    drain(spark, middle)
    drain(spark, bottom)
    assert file_rows(spark, bottom_sink) == expected(range(4))

    # a backfill upstream over items 1..2 republishes their rows as new commits
    first = Asset.objects.filter(connector=up.connector).order_by("pk")[1].pk
    backfill_create(job=up, range_start=first, range_end=first + 1, reason="fix", actor="a")
    drain(spark, up)
    assert Backfill.objects.filter(job=middle, created_by="tidemark").exists()
    drain(spark, middle)  # the rebuild first (priority 1), then the new commits
    assert file_rows(spark, middle_sink) == expected(range(4))
    # the middle job's rebuild replaced its own outputs: the bottom job follows, unasked
    assert Backfill.objects.filter(job=bottom, created_by="tidemark").exists()
    drain(spark, bottom)
    assert file_rows(spark, bottom_sink) == expected(range(4))
    assert not Backfill.objects.filter(created_by="tidemark").exclude(status="completed").exists()


def test_an_upstream_replay_and_backfill_leave_every_sink_kind_two_levels_down_each_row_once(
    spark, tmp_path, sink_dsn
):
    """Issue 19's done-when: below a middle job, one bottom job per sink kind (files, Delta,
    PostgreSQL append, upsert, coalesce); an upstream replay and then an upstream backfill are
    restated down both levels without a person, and every sink holds each source row once."""
    from deltalake import DeltaTable

    up = upstream_job(tmp_path, "up-kinds", items=4)
    drain(spark, up)
    middle_sink = tmp_path / "middle-kinds"
    middle = downstream_job("mid-kinds", up, {"kind": "files", "path": str(middle_sink)})
    delta_path = tmp_path / "bottom-delta"
    sinks = {
        "files": {"kind": "files", "path": str(tmp_path / "bottom-files")},
        "delta": {"kind": "delta", "path": str(delta_path)},
        "append": {
            "kind": "postgres",
            "dsn_env": sink_dsn,
            "table": "kinds_append",
            "mode": "append",
        },
        "upsert": {
            "kind": "postgres",
            "dsn_env": sink_dsn,
            "table": "kinds_upsert",
            "key": ["key"],
        },
        "coalesce": {
            "kind": "postgres",
            "dsn_env": sink_dsn,
            "table": "kinds_coalesce",
            "key": ["key"],
            "mode": "coalesce",
        },
    }
    bottoms = {kind: downstream_job(f"bottom-{kind}", middle, sink) for kind, sink in sinks.items()}

    def readers() -> dict[str, list]:
        delta = DeltaTable(str(delta_path)).to_pyarrow_table()
        return {
            "files": file_rows(spark, Path(sinks["files"]["path"])),
            "delta": sorted(zip(delta["key"].to_pylist(), delta["v"].to_pylist(), strict=True)),
            "append": table_rows("kinds_append"),
            "upsert": table_rows("kinds_upsert"),
            "coalesce": table_rows("kinds_coalesce"),
        }

    def settle():
        # each level drains after the one above it; restatement backfills run first (priority 1)
        for _ in range(3):
            drain(spark, up)
            drain(spark, middle)
            for job in bottoms.values():
                drain(spark, job)

    settle()
    assert readers() == {kind: expected(range(4)) for kind in sinks}

    # an upstream replay of its last two items
    done = Batch.objects.filter(job=up, status=BatchStatus.SUCCEEDED).order_by("span")
    watermark_correct(job=up, value=done[2].span.lower - 1, actor="a", reason="fix", replay=True)
    settle()
    for job in (middle, *bottoms.values()):
        assert Backfill.objects.filter(job=job, created_by="tidemark").exists(), job.name
    assert readers() == {kind: expected(range(4)) for kind in sinks}

    # then an upstream backfill over its second item
    before = Backfill.objects.filter(created_by="tidemark").count()
    second = Asset.objects.filter(connector=up.connector).order_by("pk")[1].pk
    backfill_create(job=up, range_start=second, range_end=second, reason="fix", actor="a")
    settle()
    assert Backfill.objects.filter(created_by="tidemark").count() >= before + 1 + len(bottoms)
    assert readers() == {kind: expected(range(4)) for kind in sinks}
    assert not Backfill.objects.filter(created_by="tidemark").exclude(status="completed").exists()
