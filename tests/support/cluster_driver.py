"""A driver process for tests/spark/test_cluster_reads.py: runs batch specs (read from stdin as JSON:
{"master", "specs": [...]}) with `run_batch` in a SparkSession on the given standalone master, and
prints {"pid": this driver's pid, "results": [...]} as JSON. A process of its own because the test
session's one SparkSession is local and a process has one SparkContext."""

import json
import os
import sys

from workers.spark.run import run_batch
from workers.spark.session import get_session


def main() -> None:
    request = json.load(sys.stdin)
    spark = get_session(
        master=request["master"],
        conf={
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.cores.max": "1",
        },
        app_name="tidemark-cluster-reads",
    )
    try:
        results = [run_batch(spark, spec) for spec in request["specs"]]
    finally:
        spark.stop()
    print(json.dumps({"pid": os.getpid(), "results": results}))


if __name__ == "__main__":
    main()
