"""The small soak (marker `soak`): the product under every implemented fault kind, checked by a
checker that cannot pass a wrong run (bench/soak_checker.py, its own tests in
tests/test_soak_checker.py). `make soak` runs the large one (SOAK_FILES=2000).

Real discovery of files landing in a directory, real Celery prefork workers on warm
SparkSessions, real sinks (files, Delta, PostgreSQL append/upsert/coalesce), faults from
bench/bench_soak.py. Sizes from the environment: SOAK_FILES (batches = 5 x files),
SOAK_FAULTS_PER_KIND.
"""

import json
import os
import uuid
import warnings

import pytest

import bench.soak_processors  # noqa: F401 - registers soak_tag here too (job validation)
import tests.chaos.processors  # noqa: F401 - the crash-before-commit hook's processors
from bench import bench_soak
from tests.sink_database import sink_database_dsn
from tests.worker_fixtures import WORKER_SINK_ENV, WorkerProcess

pytestmark = [
    pytest.mark.soak,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(int(os.environ.get("SOAK_TIMEOUT", "3600"))),
]


def test_the_soak_loses_duplicates_alters_and_leaves_stale_nothing(
    tmp_path, worker_env, private_queue, worker_log_dir, monkeypatch
):
    monkeypatch.setenv(WORKER_SINK_ENV, sink_database_dsn())
    settings = bench_soak.Settings(
        files=int(os.environ.get("SOAK_FILES", "40")),
        faults_per_kind=int(os.environ.get("SOAK_FAULTS_PER_KIND", "2")),
        timeout=float(os.environ.get("SOAK_TIMEOUT", "3600")) - 300,
    )
    env = {
        **worker_env,
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

    run, report, figures = bench_soak.soak(
        work=tmp_path,
        start_worker=start_worker,
        sink_env=WORKER_SINK_ENV,
        tag=f"soak_{uuid.uuid4().hex[:6]}",
        settings=settings,
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
    assert figures["batches"] == len(bench_soak.MODES) * figures["files"]
    assert figures["failed_attempts"] >= run.faults["sigkill"]
