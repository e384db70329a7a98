"""What a fresh Python data source planner process imports: the registered source class
unpickled and planned in a subprocess the way pyspark.sql.worker's modules do it
(`_planner_imports`), with the plans of the object store source (`OBJECT_PLAN`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark.cloudpickle as cloudpickle

import workers.spark  # noqa: F401  (installs zip_imports)
from workers.spark.python_sources import source_class

HEAVY = ("pyarrow", "confluent_kafka", "pandas", "hudi")
ROOT = Path(workers.spark.__file__).resolve().parents[2]
CREATE = "pyspark.sql.worker.create_data_source"
PLAN = "pyspark.sql.worker.plan_data_source_read"

# what a planner process does with the registered class, as pyspark.sql.worker's modules do it
# (their daemon has imported the worker module before it forks the process)
PLANNER = """
import importlib, sys
importlib.import_module(WORKER)
import pyspark.cloudpickle as cloudpickle
from pyspark.sql.datasource import CaseInsensitiveDict

before = {name for name in HEAVY if name in sys.modules}
cls = cloudpickle.loads(sys.stdin.buffer.read())
source = cls(options=CaseInsensitiveDict(OPTIONS))
schema = source.schema()
partitions = source.reader(schema).partitions()
print(json.dumps({
    "before": sorted(before),
    "added": sorted(name for name in HEAVY if name in sys.modules and name not in before),
    "partitions": len(partitions),
    "name": cls.name(),
}))
"""
OBJECT_PLAN = {
    "source": {},
    "format": "parquet",
    "options": {},
    "lineage": False,
    "schema": {
        "type": "struct",
        "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
    },
    "groups": [["s3://bucket/a.parquet"], ["s3://bucket/b.parquet", "s3://bucket/c.parquet"]],
}


def _planner_imports(base, plan: dict, worker: str, *, path: tuple[str, ...] = ()) -> dict:
    cls = source_class(base, {"TM_KEY": "not-a-secret"}, f"tidemark_{base.name()}_1", 1)
    code = (
        f"import json\nHEAVY = {HEAVY!r}\nWORKER = {worker!r}\n"
        f"OPTIONS = {{'plan': {json.dumps(plan)!r}}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code + PLANNER],
        input=cloudpickle.dumps(cls),
        capture_output=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT)])},
    )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)
