"""No row through the driver, on a cluster shape: a Spark standalone master and worker (separate
JVMs) run a Kafka batch and an object-store batch with `run_batch`, from a driver process of their
own. Every partition is read by a Python worker of the executor (its line in the executor's log
names the range or object and a pid that is not the driver's), the executors never had the S3
credentials in their environment (they came inside the data source), and the sink holds each row
once."""

import io
import json
import os
import re
import subprocess
import sys
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.s3_fixtures import KEY_ENV, SECRET_ENV
from tests.support.spark_cluster import standalone_cluster
from tests.support.worker_fixtures import ROOT, read_sink

_READ_LINE = re.compile(r"^tidemark read: (.+): (\d+) rows by pid (\d+) on ", re.MULTILINE)


def _spec(batch_id: int, source: dict, sink) -> dict:
    return {
        "job": "cluster-reads",
        "batch_id": batch_id,
        "kind": "incremental",
        "lower": 1,
        "upper": 2,
        "items": ["planned"],
        "format": source.get("format", "parquet"),
        "lineage": True,
        "processor": "passthrough",
        "params": {},
        "sink": {"kind": "files", "path": str(sink)},
        "source": source,
    }


def _executor_reads(work_dir) -> list[tuple[str, int, int]]:
    """(what, rows, pid) of each partition read, from the executors' logs."""
    found = []
    for log in work_dir.glob("app-*/*/stderr"):
        found += [(w, int(r), int(p)) for w, r, p in _READ_LINE.findall(log.read_text())]
    return found


def test_kafka_and_object_store_batches_are_read_by_executor_processes(
    tmp_path, kafka_broker, s3_server, s3_bucket
):
    topic = kafka_broker.create_topic(partitions=2)
    kafka_broker.produce(topic, [(p, f"m{n}".encode()) for p in (0, 1) for n in range(7)])
    for n in range(3):
        buffer = io.BytesIO()
        pq.write_table(
            pa.table({"order_id": pa.array(range(n * 10, n * 10 + 10), pa.int64())}), buffer
        )
        s3_server.client().put_object(
            Bucket=s3_bucket, Key=f"landing/{n}.parquet", Body=buffer.getvalue()
        )
    kafka = {
        "kind": "kafka",
        "bootstrap_servers": kafka_broker.bootstrap,
        "topic": topic,
        "slices": [{"partition": p, "start": 0, "end": 7} for p in (0, 1)],
        "read_timeout_seconds": 60,
        "partition_rows": 3,  # 7 offsets a partition: pieces of 3, 3 and 1
    }
    objects = {
        "kind": "object_store",
        "format": "parquet",
        "objects": [
            {"location": f"s3://{s3_bucket}/landing/{n}.parquet", "size": None} for n in range(3)
        ],
        "endpoint_url": s3_server.endpoint_url,
        "region": "us-east-1",
        "key_env": KEY_ENV,
        "secret_env": SECRET_ENV,
        "partition_bytes": 1,  # one object a partition
    }
    # the cluster's JVMs (and so its executors) never see the S3 credentials
    cluster_env = {k: v for k, v in os.environ.items() if k not in (KEY_ENV, SECRET_ENV)}
    # executors import the readers: a cluster's machines have the project installed (its image)
    cluster_env["PYTHONPATH"] = str(ROOT)
    with standalone_cluster(tmp_path, env=cluster_env) as cluster:
        request = {
            "master": cluster["master"],
            "specs": [
                _spec(1, kafka, tmp_path / "kafka-sink"),
                _spec(2, objects, tmp_path / "objects-sink"),
            ],
        }
        driver = subprocess.run(
            [sys.executable, "-m", "tests.support.cluster_driver"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
        assert driver.returncode == 0, driver.stderr[-4000:]
        reply = json.loads(driver.stdout.strip().splitlines()[-1])
        reads = _executor_reads(cluster["work_dir"])

    kafka_result, objects_result = reply["results"]
    assert kafka_result["rows_in"] == 14 and kafka_result["watermark"] == {"0": 7, "1": 7}
    assert objects_result["rows_in"] == 30

    # each partition of the plan was read once, by an executor's Python worker, not the driver
    assert sorted(what for what, _rows, _pid in reads) == sorted(
        [f"kafka {topic}/{p} [{s}, {e})" for p in (0, 1) for s, e in ((0, 3), (3, 6), (6, 7))]
        + [f"object s3://{s3_bucket}/landing/{n}.parquet" for n in range(3)]
    )
    assert sum(rows for _what, rows, _pid in reads) == 14 + 30
    assert reply["pid"] not in {pid for _what, _rows, pid in reads}
    assert "tidemark read:" not in driver.stderr

    # each row once in the sinks
    messages = Counter((r["partition"], r["offset"]) for r in read_sink(tmp_path / "kafka-sink"))
    assert messages == Counter({(p, o): 1 for p in (0, 1) for o in range(7)})
    rows = read_sink(tmp_path / "objects-sink")
    assert sorted(r["order_id"] for r in rows) == list(range(30))
    assert {r["_tm_source_file"] for r in rows} == {
        f"s3://{s3_bucket}/landing/{n}.parquet" for n in range(3)
    }
    assert {r["_tm_batch_id"] for r in rows} == {2}
