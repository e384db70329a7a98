"""A Delta log names only files inside its table (issue 42, item 3).

Only the table's directory was confined: an `add` action's path `../../x.parquet` or
`file:///elsewhere/x.parquet` (absolute paths are legal in Delta logs) was read into the sink, and
the "was vacuumed" error told whether any path existed. Every file path a log names (add, remove,
cdc, a deletion vector at a path, a sidecar) is resolved (percent-decoding, `..`, symlinks) and
confined before anything is read or looked for (workers/spark/delta_log.py); the batch fails
naming the version and the action, with the same words whether the outside file exists or not.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from inventory.models import BatchStatus
from inventory.services import discovery, lifecycle
from inventory.services.connectors import connector_create
from inventory.services.jobs import job_create
from tests.support.api_support import token_client
from tests.support.factories import execute_refused_before_spark
from workers import specs
from workers.spark.delta_log import OutsideTable, confine_actions
from workers.spark.errors import ReadError
from workers.spark.sources import delta as delta_reader

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "outside-secret-row"


def _rows(keys, v="x"):
    return pa.table(
        {"key": pa.array(keys, pa.int64()), "v": pa.array([v] * len(keys), pa.string())}
    )


@pytest.fixture
def table_and_outside(tmp_path):
    """A two-version table `t`, a Parquet file of the same columns beside it (`outside/x.parquet`)
    and a symlink inside the table to that folder."""
    table = tmp_path / "t"
    write_deltalake(str(table), _rows([1, 2]))
    write_deltalake(str(table), _rows([3]), mode="append")
    outside = tmp_path / "outside"
    outside.mkdir()
    pq.write_table(_rows([99], SECRET), outside / "x.parquet")
    (table / "link").symlink_to(outside)
    return table, outside


def _log(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version:020d}.json"


def _repoint_add(table: Path, version: int, path: str) -> None:
    """What a writer of the table's folder can do: edit an add action's path in the log."""
    entry = _log(table, version)
    actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
    for action in actions:
        if "add" in action:
            action["add"]["path"] = path
    entry.write_text("".join(json.dumps(a) + "\n" for a in actions))


def _job(name, table, out):
    connector = connector_create(name=f"{name}-src", kind="delta", config={"path": str(table)})
    discovery.discover(connector)
    return job_create(
        name=name,
        connector=connector,
        batch_weight=10**12,
        max_items=5,
        sink={"kind": "delta", "path": str(out)},
        max_attempts=1,
    )


def _escapes(outside: Path) -> list[str]:
    return [
        "../outside/x.parquet",
        f"../../{outside.parent.name}/outside/x.parquet",
        f"file://{outside}/x.parquet",
        f"file:{outside}/x.parquet",
        f"file://localhost{outside}/x.parquet",
        "%2E%2E/outside/x.parquet",
        "%2e%2e%2foutside%2fx.parquet",
        "link/x.parquet",
        f"{outside}/x.parquet",
        f"file://otherhost{outside}/x.parquet",
        "s3://bucket/x.parquet",
        "hdfs://127.0.0.2:8020/x.parquet",
    ]


def test_an_add_action_naming_a_file_outside_the_table_fails_the_batch_naming_it(
    table_and_outside, tmp_path, role_users
):
    table, outside = table_and_outside
    for index, escape in enumerate(_escapes(outside)):
        _repoint_add(table, 1, escape)
        job = _job(f"escape-{index}", table, tmp_path / f"out-{index}")
        (batch,) = lifecycle.batches_plan(job=job, limit=1)
        stored = execute_refused_before_spark(batch)
        assert stored.status == BatchStatus.DEAD, escape
        message = stored.error["message"]
        assert "version 1 of the Delta table" in message, (escape, message)
        assert "its add action names a file outside the table's directory" in message, escape
        assert SECRET not in json.dumps(stored.error)
    shown = token_client(role_users["viewer"]).get(f"/api/v1/batches/{stored.pk}/")
    assert "outside the table's directory" in shown.content.decode()


def test_the_error_is_the_same_whether_the_outside_file_exists_or_not(table_and_outside, tmp_path):
    table, outside = table_and_outside
    messages = []
    for index, escape in enumerate(("../outside/x.parquet", "../outside/missing.parquet")):
        _repoint_add(table, 1, escape)
        job = _job(f"oracle-{index}", table, tmp_path / f"out-{index}")
        (batch,) = lifecycle.batches_plan(job=job, limit=1)
        messages.append(execute_refused_before_spark(batch).error["message"])
    assert messages[0] == messages[1]
    assert "vacuumed" not in messages[0]


def test_the_worker_confines_a_spec_before_looking_for_its_files(spark, table_and_outside):
    """A spec built elsewhere (or by an older control plane) is checked again on the Spark side:
    an outside file is never read, and whether it exists is never told."""
    table, outside = table_and_outside
    source = {
        "kind": "delta",
        "path": str(table),
        "versions": [1],
        "columns": [{"name": "key", "type": "long"}, {"name": "v", "type": "string"}],
        "partition_columns": [],
    }
    errors = []
    for path in (f"{outside}/x.parquet", f"{outside}/missing.parquet", "/etc/passwd", "x"):
        spec = {"source": {**source, "files": [{"path": path, "version": 1}]}}
        with pytest.raises(OutsideTable) as refused:
            delta_reader.read(spark, spec)
        errors.append(str(refused.value))
    assert len(set(errors)) == 1 and "outside the table's directory" in errors[0]
    # inside the table, a missing file is still the vacuumed error naming its version
    spec = {"source": {**source, "files": [{"path": f"{table}/gone.parquet", "version": 1}]}}
    with pytest.raises(ReadError, match="version 1 of the Delta table .* was vacuumed"):
        delta_reader.read(spark, spec)


def test_a_table_file_whose_name_holds_glob_characters_is_read_as_named(spark, tmp_path):
    """Spark globs `{...}`, `[...]`, `*` and `?` in a path: a logged name holding them is read
    as that one file, never as a pattern matching others."""
    table = tmp_path / "t"
    write_deltalake(str(table), _rows([1]))
    (data,) = [p for p in table.iterdir() if p.suffix == ".parquet"]
    renamed = table / "star*.parquet"
    data.rename(renamed)
    pq.write_table(_rows([7], SECRET), table / "starX.parquet")  # what the glob also matched
    _repoint_add(table, 0, "star%2A.parquet")
    job = _job("globbed", table, tmp_path / "out")
    batch = lifecycle.batch_acquire(job=job, worker="w")
    df = delta_reader.read(spark, specs.batch_spec(batch=batch))
    assert sorted(tuple(r) for r in df.collect()) == [(1, "x")]


@pytest.mark.parametrize(
    "action",
    [
        {"remove": {"path": "../outside/x.parquet", "dataChange": True}},
        {"cdc": {"path": "../../etc/passwd", "dataChange": False}},
        {"sidecar": {"path": "file:///etc/passwd"}},
        {
            "add": {
                "path": "inside.parquet",
                "deletionVector": {"storageType": "p", "pathOrInlineDv": "file:///etc/passwd"},
            }
        },
        {"remove": {"path": "../x", "deletionVector": {"storageType": "p", "pathOrInlineDv": 7}}},
    ],
)
def test_every_file_path_a_commit_names_is_confined(tmp_path, action):
    table = tmp_path / "t"
    table.mkdir()
    with pytest.raises(OutsideTable) as refused:
        confine_actions(str(table), [{"commitInfo": {}}, action], version=4)
    (kind,) = action
    assert f"version 4 of the Delta table {table}" in str(refused.value)
    assert f"its {kind}" in str(refused.value)
    # the same actions with paths inside the table pass
    inside = {
        "add": {"path": "day=1/a%20b.parquet", "deletionVector": {"storageType": "u"}},
        "remove": {"path": f"file://{table}/old.parquet"},
        "cdc": {"path": "_change_data/c.parquet"},
    }
    confine_actions(str(table), [{k: v} for k, v in inside.items()], version=4)


def test_a_later_version_removing_an_outside_path_fails_the_batch_naming_it(
    table_and_outside, tmp_path
):
    table, _ = table_and_outside
    _log(table, 2).write_text(
        json.dumps({"remove": {"path": "../outside/x.parquet", "dataChange": True}})
        + "\n"
        + json.dumps({"commitInfo": {"operation": "DELETE"}})
        + "\n"
    )
    job = _job("removed-outside", table, tmp_path / "out")
    (batch,) = lifecycle.batches_plan(job=job, limit=1)
    stored = execute_refused_before_spark(batch)
    assert "version 2 of the Delta table" in stored.error["message"]
    assert "its remove action names a file outside" in stored.error["message"]


def test_an_added_file_with_a_deletion_vector_fails_its_batch_naming_the_version(
    table_and_outside, tmp_path
):
    """Read as plain Parquet, the file's deleted rows would come back."""
    table, _ = table_and_outside
    entry = _log(table, 1)
    actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
    for action in actions:
        if "add" in action:
            action["add"]["deletionVector"] = {
                "storageType": "u",
                "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                "offset": 1,
                "sizeInBytes": 36,
                "cardinality": 1,
            }
    entry.write_text("".join(json.dumps(a) + "\n" for a in actions))
    job = _job("deletion-vector", table, tmp_path / "out")
    (batch,) = lifecycle.batches_plan(job=job, limit=1)
    stored = execute_refused_before_spark(batch)
    assert "version 1 of the Delta table" in stored.error["message"]
    assert "deletion vector, which Tidemark cannot read" in stored.error["message"]
