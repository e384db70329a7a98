"""The small soak (marker `soak`): the product under every implemented fault kind, checked by a
checker that cannot pass a wrong run (bench/soak_checker.py, its own tests in
tests/soak/test_checker.py). `make soak` runs the large one (SOAK_FILES=2000).

Real discovery of every source kind (bench/soak_sources.py: files landing in a directory, objects
in the S3 test server, rows in a table of another PostgreSQL database, messages in the Kafka test
broker), real Celery prefork workers on warm SparkSessions, real sinks (files, Delta, Iceberg,
PostgreSQL append/upsert/coalesce; Delta and Iceberg read at every version), faults from
bench/bench_soak.py. Sizes from the environment: SOAK_FILES
(the files source feeds 6 jobs, one batch per file each; the other sources land one unit every 4
files, each into its own job), SOAK_FAULTS_PER_KIND.
"""

import json
import os
import uuid
import warnings

import pytest
from django.db import connection

import bench.soak_processors  # noqa: F401 - registers soak_tag here too (job validation)
import tests.chaos.processors  # noqa: F401 - the crash-before-commit hook's processors
from bench import bench_soak
from bench import soak_sources as ss
from inventory.services.outputs import control_plane_dsn
from tests.support.s3_fixtures import KEY_ENV, SECRET_ENV
from tests.support.sink_database import sink_database_dsn
from tests.support.worker_fixtures import WORKER_SINK_ENV, WorkerProcess

pytestmark = [
    pytest.mark.soak,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(int(os.environ.get("SOAK_TIMEOUT", "3600"))),
]

SOURCE_ENV = "TM_TEST_SOAK_SOURCE_DSN"
# which sinks each source feeds: the files source every sink kind, the others one each
FEEDS = {"files": bench_soak.MODES, "s3": ("upsert",), "table": ("append",), "kafka": ("files",)}


@pytest.fixture
def source_dsn():
    """A database of its own on the test server (never Tidemark's), for the table source."""
    name = f"tm_soak_{uuid.uuid4().hex[:10]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    yield control_plane_dsn(dbname=name)
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_the_soak_loses_duplicates_alters_and_leaves_stale_nothing(
    tmp_path,
    worker_env,
    private_queue,
    worker_log_dir,
    monkeypatch,
    s3_server,
    kafka_broker,
    source_dsn,
):
    monkeypatch.setenv(WORKER_SINK_ENV, sink_database_dsn())
    monkeypatch.setenv(SOURCE_ENV, source_dsn)
    settings = bench_soak.Settings(
        files=int(os.environ.get("SOAK_FILES", "40")),
        faults_per_kind=int(os.environ.get("SOAK_FAULTS_PER_KIND", "2")),
        timeout=float(os.environ.get("SOAK_TIMEOUT", "3600")) - 300,
    )
    env = {
        **worker_env,
        SOURCE_ENV: source_dsn,
        "CELERY_QUEUE": private_queue,
        "TIDEMARK_PROCESSOR_MODULES": bench_soak.PROCESSOR_MODULES,
        "TIDEMARK_CHAOS_HOOKS": "1",
        # shorter than a worker's task (a nudge works up to 60 s): a worker that starts
        # consuming restores the running tasks' messages, a real redelivery
        "CELERY_VISIBILITY_TIMEOUT": str(settings.visibility_timeout),
    }

    def start_worker(name, *, env_extra=None, wait_for_spark=True):
        worker = WorkerProcess(
            env={**env, **(env_extra or {})},
            queue=private_queue,
            name=name,
            log_dir=worker_log_dir,
            concurrency=1,
        )
        return worker.start(wait_for_spark=wait_for_spark)

    tag = f"soak_{uuid.uuid4().hex[:6]}"
    common = {"work": tmp_path, "tag": tag, "rows": settings.rows}
    others = {**common, "every": settings.every}
    # SOAK_SOURCES picks the sources (default all four, as .ci/run runs them)
    chosen = os.environ.get("SOAK_SOURCES", ",".join(FEEDS)).split(",")
    unknown = sorted(set(chosen) - set(FEEDS))
    assert not unknown, f"SOAK_SOURCES names unknown sources {unknown}; known: {sorted(FEEDS)}"
    sources = [
        ss.FilesSource(**common, modes=FEEDS["files"]),
        ss.S3Source(
            **others,
            modes=FEEDS["s3"],
            server=s3_server,
            bucket=tag.replace("_", "-"),
            key_env=KEY_ENV,
            secret_env=SECRET_ENV,
        ),
        ss.TableSource(**others, modes=FEEDS["table"], dsn=source_dsn, dsn_env=SOURCE_ENV),
        ss.KafkaSource(**others, modes=FEEDS["kafka"], broker=kafka_broker),
    ]
    sources = [source for source in sources if source.name in chosen]
    feeds = {name: FEEDS[name] for name in chosen}
    run, report, figures = bench_soak.soak(
        work=tmp_path,
        start_worker=start_worker,
        sink_env=WORKER_SINK_ENV,
        tag=tag,
        settings=settings,
        sources=sources,
        beat_env=env,
    )
    print("\nSOAK " + json.dumps(figures))

    assert report.ok, "\n".join(report.failures())
    # every fault kind really happened, or says loudly why it cannot here
    for kind, why in run.not_possible.items():
        warnings.warn(f"soak: the {kind} fault is NOT POSSIBLE here: {why}", stacklevel=1)
        print(f"SOAK NOT POSSIBLE HERE: {kind}: {why}")
    for kind in (*bench_soak.FAULT_KINDS, "crash_before_commit"):
        if kind not in run.not_possible:
            assert run.faults[kind] >= 1, f"no {kind} fault landed: {dict(run.faults)}"
    assert run.redeliveries_seen >= 1, "no message was delivered twice"
    assert figures["files"] >= settings.files
    # every source delivered rows into every sink it feeds, one batch per item and job
    per_source = figures["sources"]
    assert set(per_source) == set(feeds)
    for name, fed in feeds.items():
        delivered = per_source[name]
        assert delivered["units"] >= settings.files // settings.every, name
        assert delivered["items"] >= 1, name
        assert len(delivered["rows_seen"]) == len(fed), name
        assert all(seen > 0 for seen in delivered["rows_seen"].values()), (name, delivered)
    assert figures["batches"] == sum(
        len(feeds[name]) * delivered["items"] for name, delivered in per_source.items()
    )
    assert figures["failed_attempts"] >= run.faults["sigkill"]
    if "files" in feeds:
        # the table formats were read at every version: at least one per batch they committed
        for label in bench_soak.VERSIONED:
            sink = figures["check"]["sinks"][label]
            assert sink["versions"] >= per_source["files"]["items"], (label, sink)
    # backfills asked through the REST API rewrote committed batches (checked exactly-once above)
    assert figures["backfills_created"] >= 1 and figures["replaced"] >= 1, figures
    # an admin replayed every job through the REST API, and an operator backfilled each job of
    # the other sources (bench/soak_asks.py); the checker saw the superseded outputs replaced
    jobs = sum(len(fed) for fed in feeds.values())
    assert figures["replays_done"] == jobs and figures["superseded"] >= jobs, figures
    others = sum(len(fed) for name, fed in feeds.items() if name != "files")
    assert figures["source_backfills_done"] == others and not figures["asks_owed"], figures
    if "kafka" in feeds:
        # the Kafka job's key_value watermark was checked: per partition, the end of what it read
        kafka_job = figures["check"]["jobs"]["kafka-files"]
        assert kafka_job["prefix_value"] and kafka_job["value"] == kafka_job["prefix_value"]
