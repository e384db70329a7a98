"""A Spark standalone cluster for tests: a master and one worker, separate JVMs started from the
pyspark distribution (`bin/spark-class`) on loopback ports, ready when the master reports the
worker alive (its JSON status page), stopped at the end."""

import contextlib
import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pyspark
import pytest

from controlplane.loopback import free_port
from tests.support.server_fixtures import stop_process
from tests.support.worker_fixtures import wait_until


@contextlib.contextmanager
def standalone_cluster(directory: Path, *, cores: int = 1, env: dict | None = None):
    """Yields {"master": spark://..., "state": () -> the master's JSON status, "work_dir": the
    worker's directory (executors' logs under app-*/<executor id>/)}. `env` is the JVMs' whole
    environment (default: this process's)."""
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, ui, worker_ui = free_port(), free_port(), free_port()
    work_dir = directory / "spark-work"
    env = {
        **(os.environ if env is None else env),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_WORKER_DIR": str(work_dir),
        "SPARK_LOG_DIR": str(directory / "spark-logs"),
    }
    daemons = (
        (
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
            + ["--webui-port", str(ui)],
        ),
        (
            "worker",
            ["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}"]
            + ["--cores", str(cores), "--memory", "1g", "--host", "127.0.0.1"]
            + ["--webui-port", str(worker_ui)],
        ),
    )
    procs = []

    def state():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as response:
                return json.load(response)
        except OSError:
            return None

    try:
        for name, args in daemons:
            with open(directory / f"spark-{name}.log", "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [str(spark_class), *args],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        wait_until(
            lambda: (state() or {}).get("aliveworkers", 0) >= 1,
            timeout=120,
            message="the standalone master with one worker",
        )
        yield {"master": f"spark://127.0.0.1:{port}", "state": state, "work_dir": work_dir}
    finally:
        for proc in procs:
            stop_process(proc)


@pytest.fixture
def spark_standalone(tmp_path):
    """A Spark standalone master and one worker (1 core, 1 GB) on 127.0.0.1."""
    with standalone_cluster(tmp_path) as cluster:
        yield cluster
