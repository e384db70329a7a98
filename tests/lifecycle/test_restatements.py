"""Restatements found by discovery: a file rewritten after registration is read again by every job
that committed it, its old rows replaced in the sink (each source row once), without a person.

Batches run in this process through the real lifecycle and fence on the session's SparkSession
(tests/lifecycle/test_exactly_once.py); the fence opens its own connection, so these tests commit."""

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inventory.models import (
    Asset,
    Backfill,
    Restatement,
    RestatementPolicy,
    RestatementStatus,
    Watermark,
)
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.jobs import job_create, job_update
from inventory.services.restatement_records import restatement_apply
from tests.support.api_support import token_client
from tests.support.files_job import drain, sink_rows

pytestmark = pytest.mark.django_db(transaction=True)


def _write(path, rows):
    keys, values = zip(*rows, strict=True)
    pq.write_table(
        pa.table({"key": pa.array(keys, pa.int64()), "v": pa.array(values, pa.string())}), path
    )
    past = time.time() - 600  # complete: older than any settle time
    os.utime(path, (past, past))


def test_a_file_rewritten_after_it_was_committed_is_restated_and_its_rows_replaced(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for item in range(4):
        _write(landing / f"{item:03d}.parquet", [(item * 10 + j, f"v{item}") for j in range(3)])
    connector = connector_create(name="rewritten-src", kind="files", config={"path": str(landing)})
    sink = {"kind": "files", "path": str(tmp_path / "sink")}
    job = job_create(
        name="rewritten", connector=connector, batch_weight=10**9, max_items=2, sink=sink
    )
    other = job_create(name="rewritten-later", connector=connector, batch_weight=10**9, max_items=2)
    assert discover(connector) == 4
    drain(spark, job)
    before = sink_rows(spark, sink)
    assert len(before) == 12
    position = Watermark.objects.get(job=job).position

    # file 1 is rewritten in place: one row changed, one gone, one new
    _write(landing / "001.parquet", [(10, "w1"), (11, "w1"), (19, "w1")])
    assert discover(connector) == 0  # nothing new to register: the change is a restatement
    restated = Backfill.objects.get(job=job)
    assert restated.created_by == "tidemark"
    assert "001.parquet" in restated.reason
    # the job that has committed nothing yet reads the new content when it gets there
    assert not Backfill.objects.filter(job=other).exists()
    changed = Asset.objects.get(location=str(landing / "001.parquet"))
    assert changed.extra["restated"] == [restated.pk]

    drain(spark, job)
    after = sink_rows(spark, sink)
    expected = sorted(
        [r for r in before if not 10 <= r[0] < 20] + [(10, "w1"), (11, "w1"), (19, "w1")]
    )
    assert after == expected  # each source row once, the rewritten file's old rows gone
    assert Watermark.objects.get(job=job).position == position

    discover(connector)  # restated once
    assert Backfill.objects.filter(job=job).count() == 1


def test_an_automatic_restatement_is_recorded_with_its_backfill(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for item in range(2):
        _write(landing / f"{item:03d}.parquet", [(item * 10, f"v{item}")])
    connector = connector_create(name="auto-src", kind="files", config={"path": str(landing)})
    sink = {"kind": "files", "path": str(tmp_path / "sink")}
    job = job_create(name="auto", connector=connector, batch_weight=10**9, max_items=1, sink=sink)
    assert job.restatements == RestatementPolicy.AUTOMATIC
    discover(connector)
    drain(spark, job)
    _write(landing / "000.parquet", [(0, "w0")])
    discover(connector)
    record = Restatement.objects.get(job=job)
    backfill = Backfill.objects.get(job=job)
    assert (record.status, record.cause, record.backfill_id) == (
        "applied",
        "changed_files",
        backfill.pk,
    )
    assert record.decided_by == "tidemark" and record.state == "rebuilding"
    assert record.detail["assets"][0]["location"].endswith("000.parquet")
    drain(spark, job)
    record.refresh_from_db()
    assert record.state == "done"


def test_a_proposed_job_waits_for_an_operator_who_applies_the_pinned_plan(
    spark, tmp_path, role_users
):
    landing = tmp_path / "landing"
    landing.mkdir()
    for item in range(4):
        _write(landing / f"{item:03d}.parquet", [(item * 10 + j, f"v{item}") for j in range(2)])
    connector = connector_create(name="proposed-src", kind="files", config={"path": str(landing)})
    sink = {"kind": "files", "path": str(tmp_path / "sink")}
    job = job_create(
        name="proposed",
        connector=connector,
        batch_weight=10**9,
        max_items=2,
        sink=sink,
        restatements="proposed",
    )
    discover(connector)
    drain(spark, job)
    before = sink_rows(spark, sink)

    _write(landing / "002.parquet", [(20, "w2"), (29, "w2")])
    discover(connector)
    # recorded, not run: the sink keeps its rows until someone decides
    assert not Backfill.objects.filter(job=job).exists()
    record = Restatement.objects.get(job=job)
    assert record.status == RestatementStatus.PROPOSED and record.cause == "changed_files"
    assert record.preview["batch_count"] == 1 and len(record.preview["fingerprint"]) == 16
    assert "002.parquet" in record.reason
    assert sink_rows(spark, sink) == before
    discover(connector)  # proposed once
    assert Restatement.objects.filter(job=job).count() == 1

    url = f"/api/v1/jobs/proposed/restatements/{record.pk}/apply/"
    listed = token_client(role_users["viewer"]).get("/api/v1/jobs/proposed/restatements/")
    assert listed.status_code == 200
    assert [(r["id"], r["state"]) for r in listed.json()["results"]] == [(record.pk, "proposed")]
    assert token_client(role_users["viewer"]).post(url, {}, format="json").status_code == 403
    applied = token_client(role_users["operator"]).post(url, {}, format="json")
    assert applied.status_code == 200, applied.content
    assert (
        applied.json()["state"] == "rebuilding" and applied.json()["decided_by"] == "operator-user"
    )
    backfill = Backfill.objects.get(job=job)
    assert backfill.pk == applied.json()["backfill"] and backfill.created_by == "operator-user"

    drain(spark, job)
    after = sink_rows(spark, sink)
    assert after == sorted([r for r in before if not 20 <= r[0] < 30] + [(20, "w2"), (29, "w2")])
    record.refresh_from_db()
    assert record.state == "done"
    again = token_client(role_users["operator"]).post(url, {}, format="json")
    assert again.status_code == 409 and "applied, not proposed" in again.json()["detail"]


def test_a_chain_below_a_proposed_job_follows_once_the_replay_is_applied(spark, tmp_path):
    from tests.support import job_chain as chain

    up = chain.upstream_job(tmp_path, "up-proposed", items=3)
    chain.drain(spark, up)
    middle_sink, bottom_sink = tmp_path / "middle", tmp_path / "bottom"
    middle = chain.downstream_job("mid-proposed", up, {"kind": "files", "path": str(middle_sink)})
    job_update(job=middle, restatements="proposed")
    bottom = chain.downstream_job(
        "bottom-auto", middle, {"kind": "files", "path": str(bottom_sink)}
    )
    chain.drain(spark, middle)
    chain.drain(spark, bottom)

    # an upstream backfill over item 1 republishes its rows as a new commit
    first = Asset.objects.filter(connector=up.connector).order_by("pk")[1].pk
    backfill_create(job=up, range_start=first, range_end=first, reason="fix", actor="a")
    chain.drain(spark, up)
    record = Restatement.objects.get(job=middle)
    assert (record.cause, record.status) == ("upstream", "proposed")
    assert record.detail["upstream_job"] == "up-proposed" and record.detail["commits"] == [2]
    assert not Backfill.objects.filter(job__in=[middle, bottom]).exists()
    chain.drain(spark, middle)  # the replacing commit arrives; the replaced one is still there
    assert chain.file_rows(spark, middle_sink) != chain.expected(range(3))

    restatement_apply(restatement=record, actor="operator")
    chain.drain(spark, middle)
    assert chain.file_rows(spark, middle_sink) == chain.expected(range(3))
    # the applied replay replaced the middle job's outputs: the automatic job below follows
    below = Restatement.objects.get(job=bottom)
    assert below.status == "applied" and below.backfill.created_by == "tidemark"
    chain.drain(spark, bottom)
    assert chain.file_rows(spark, bottom_sink) == chain.expected(range(3))
