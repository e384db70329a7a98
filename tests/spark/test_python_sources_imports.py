"""What the driver's Python data source planner processes pay for, per request: Spark runs
`create_data_source` and `plan_data_source_read` in Python processes of their own (reused between
requests for a minute, then started again), which unpickle the registered data source class and
so import its module. That module imports neither pyarrow, confluent_kafka nor hudi (only the
executors' `read` needs them), and every such process keeps its zip archives' directories
between requests (`workers/spark/zip_imports.py`). Why: docs/benchmarks.md, small_batches."""

import importlib
import json
import sys
import textwrap
import zipfile
import zipimport

import pytest

import workers.spark  # noqa: F401  (installs zip_imports)
from tests.support.python_source_imports import CREATE, OBJECT_PLAN, PLAN, _planner_imports
from workers.spark.sources.hudi import HudiSource
from workers.spark.sources.kafka_source import KafkaSource
from workers.spark.sources.object_store_source import ObjectStoreSource

HUDI_PLAN = {
    "path": "/data/t",
    "reads": ["20260101000000000"],
    "slices": [
        {"instant": "20260101000000000", "base": f"p/{n}.parquet", "logs": []} for n in range(4)
    ],
    "schema": json.dumps(OBJECT_PLAN["schema"]),
}
KAFKA_PLAN = {
    "source": {"bootstrap_servers": "127.0.0.1:9", "topic": "orders"},
    "ranges": [[0, 0, 10], [1, 5, 7], [0, 10, 12]],
    "timeout": 5,
}


@pytest.mark.parametrize("worker", [CREATE, PLAN])
@pytest.mark.parametrize(
    ("base", "plan", "partitions"),
    [(ObjectStoreSource, OBJECT_PLAN, 2), (KafkaSource, KAFKA_PLAN, 3), (HudiSource, HUDI_PLAN, 4)],
)
def test_a_planner_process_unpickles_and_plans_a_source_without_pyarrow_or_kafka(
    base, plan, partitions, worker
):
    found = _planner_imports(base, plan, worker)
    # create_data_source's process has none of them, so what it gains this source's module cost
    # it; plan_data_source_read's imports pyarrow itself, once, in its daemon
    assert found["before"] == ([] if worker == CREATE else ["pyarrow"])
    assert found["added"] == [], f"the planner process imported {found['added']}"
    assert found["partitions"] == partitions
    assert found["name"] == f"tidemark_{base.name()}_1"


def test_the_planner_check_sees_a_heavy_import(tmp_path, monkeypatch):
    # a data source module that imports pyarrow at its top is caught by the check above
    (tmp_path / "tm_heavy_source.py").write_text(
        textwrap.dedent(
            """
            import pyarrow  # noqa: F401
            from workers.spark.sources.object_store_source import ObjectStoreSource

            class HeavySource(ObjectStoreSource):
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    heavy = importlib.import_module("tm_heavy_source").HeavySource
    # the base by reference, as the registered class pickles it: the process imports its module
    found = _planner_imports(heavy, OBJECT_PLAN, CREATE, path=(str(tmp_path),))
    assert found["added"] == ["pyarrow"]


def _zip(path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, body in modules.items():
            archive.writestr(f"{name}.py", body)


def test_an_unchanged_zip_is_not_read_again_when_caches_are_invalidated(tmp_path, monkeypatch):
    archive = tmp_path / "code.zip"
    _zip(archive, {"tm_zipped_a": "A = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.delitem(sys.modules, "tm_zipped_a", raising=False)
    assert importlib.import_module("tm_zipped_a").A == 1
    reads = []
    real = zipimport._read_directory
    monkeypatch.setattr(zipimport, "_read_directory", lambda path: reads.append(path) or real(path))
    importlib.invalidate_caches()  # an importer not seen before reads once, as before
    reads.clear()
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert str(archive) not in reads, "an unchanged archive's directory was read again"


def test_a_changed_zip_is_read_again_when_caches_are_invalidated(tmp_path, monkeypatch):
    archive = tmp_path / "code.zip"
    _zip(archive, {"tm_zipped_b": "B = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    for name in ("tm_zipped_b", "tm_zipped_c"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert importlib.import_module("tm_zipped_b").B == 1
    importlib.invalidate_caches()
    _zip(archive, {"tm_zipped_b": "B = 1\n", "tm_zipped_c": "C = 2\n"})
    importlib.invalidate_caches()
    assert importlib.import_module("tm_zipped_c").C == 2
