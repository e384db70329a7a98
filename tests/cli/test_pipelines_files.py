"""Pipelines files and the plan's comparison, without a server (pure logic); the whole path
against a server is tests/cli/test_commands.py."""

from types import SimpleNamespace

import pytest

from inventory.sources.identity import IDENTITY_KEYS
from tests.support.worker_fixtures import ROOT
from tidemark_cli import pipelines
from tidemark_cli.config import UsageError
from tidemark_cli.pipeline_file import load


def test_the_command_knows_the_same_identity_keys_as_the_server():
    assert pipelines.IDENTITY_KEYS == IDENTITY_KEYS


def test_the_example_file_follows_the_schema_and_its_paths_are_taken_from_its_folder():
    loaded = load(str(ROOT / "examples" / "pipelines.yaml"))
    assert loaded.connectors[0]["config"]["path"] == str(ROOT / "var" / "demo" / "landing")
    assert loaded.jobs[0]["sink"]["path"] == str(ROOT / "var" / "examples" / "customer-totals")
    assert loaded.jobs[0]["processor"] == "example_customer_totals"


def test_a_file_error_names_where_it_is(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("version: 1\njobs:\n  - {name: j, connector: c, batch_wieght: 5}\n")
    with pytest.raises(UsageError) as raised:
        load(str(bad))
    assert str(raised.value).startswith(f"{bad}: jobs[0]: ")
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "version: 1\nconnectors:\n  - {name: a, kind: files}\n  - {name: a, kind: files}\n"
    )
    with pytest.raises(UsageError, match=r"connectors\[1\]\.name: 'a' is declared twice"):
        load(str(twice))


def test_an_identity_change_needs_a_reset_only_while_jobs_read_the_connector():
    server = {"kind": "files", "config": {"path": "/a", "patterns": ["*"]}, "jobs": ["j"]}
    declared = {"name": "c", "kind": "files", "config": {"path": "/b", "patterns": ["*"]}}
    change = pipelines.connector_change(declared, server)
    assert change.action == "reset" and change.resets == ["config.path"]
    assert [(f.field, f.old, f.new) for f in change.fields] == [("config.path", "/a", "/b")]
    alone = pipelines.connector_change(declared, {**server, "jobs": []})
    assert alone.action == "change" and alone.resets == []
    assert alone.patch == {"config": declared["config"]}
    # the server gives the jobs' count: their names are asked only for a change that resets
    counted = {**server, "job_count": 2}
    del counted["jobs"]
    asked = []

    def jobs_of(name):
        asked.append(name)
        return ["j1", "j2"]

    change = pipelines.connector_change(declared, counted, jobs_of)
    assert change.action == "reset" and change.jobs == ["j1", "j2"] and asked == ["c"]
    same = {**declared, "config": server["config"]}
    assert pipelines.connector_change(same, counted, jobs_of).action == "unchanged"
    assert asked == ["c"]
    alone = pipelines.connector_change(declared, {**counted, "job_count": 0}, jobs_of)
    assert alone.action == "change" and asked == ["c"]


def test_a_job_compares_only_what_the_file_declares_and_refuses_fixed_fields():
    server = {"connector": "c", "watermark_type": "int", "params": {"x": 1}, "max_attempts": 9}
    same = pipelines.job_change({"name": "j", "connector": "c", "params": {"x": 1}}, server)
    assert same.action == "unchanged"
    moved = pipelines.job_change({"name": "j", "connector": "d", "params": {"x": 2}}, server)
    assert moved.fixed == ["connector"] and moved.patch == {"params": {"x": 2}}
    assert "tidemark jobs delete j" in moved.fields[0].note
    with pytest.raises(UsageError, match="connector cannot change after creation") as refused:
        pipelines._refuse([moved], allow_reset=True)
    assert "delete it with tidemark jobs delete j and apply again" in str(refused.value)


def test_a_plan_with_a_fixed_field_changed_exits_1_as_apply_would_refuse_it(monkeypatch, capsys):
    """A CI gate on `plan` must not pass a file `apply` refuses."""
    server = {"connector": "c", "watermark_type": "int"}
    moved = pipelines.job_change({"name": "j", "connector": "d"}, server)
    monkeypatch.setattr(pipelines, "load", lambda file: {})
    monkeypatch.setattr(pipelines, "make_plan", lambda api, declared, prune: [moved])
    monkeypatch.setattr(pipelines, "check_plan", lambda api, changes, reason: None)
    out = SimpleNamespace(json=False)
    with pytest.raises(UsageError, match=r"^job j: connector cannot change after creation"):
        pipelines.cmd_plan(None, out, SimpleNamespace(file="p.yaml", prune=None))
    shown = capsys.readouterr().out
    assert "change refused (fields fixed after creation)" in shown
    assert "1 refused (fields fixed after creation)." in shown


def test_connectors_come_before_their_jobs_and_upstream_jobs_before_job_output_connectors():
    def change(what, name, **declared):
        return pipelines.Change(what, name, "create", {"name": name, **declared})

    ordered = pipelines._in_order(
        [
            change("connector", "down", kind="job_output", config={"job": "up"}),
            change("job", "downjob", connector="down"),
            change("job", "up", connector="src"),
            change("connector", "src", kind="files"),
        ]
    )
    names = [c.name for c in ordered]
    assert names.index("src") < names.index("up") < names.index("down") < names.index("downjob")


def test_a_connector_comes_after_the_connectors_its_start_after_names():
    # the server refuses a start_after naming nothing yet, so a file declaring the follower first
    # creates what it names first, by name or by label
    def change(name, **declared):
        return pipelines.Change("connector", name, "create", {"name": name, **declared})

    ordered = pipelines._in_order(
        [
            change("live", kind="kafka", start_after="history"),
            change("audit", kind="files", start_after="loads"),
            change("history", kind="table"),
            change("nightly", kind="files", labels=["loads"]),
        ]
    )
    names = [c.name for c in ordered]
    assert names.index("history") < names.index("live")
    assert names.index("nightly") < names.index("audit")


def test_config_keys_the_server_derives_are_no_change_when_the_file_leaves_them_out():
    given = {"dsn_env": "SRC", "table": "t", "column": "id", "slice_rows": 5}
    stored = {**given, "column_type": "int", "watermark_column": "id"}
    server = {
        "kind": "table",
        "config": stored,
        "config_derived": {"column_type": "int", "watermark_column": "id"},
        "jobs": ["j"],
    }
    declared = {"name": "c", "kind": "table", "config": given}
    assert pipelines.connector_change(declared, server).action == "unchanged"
    # another key changes: the file's config is what is sent, the server derives the rest again
    bigger = {**given, "slice_rows": 50}
    change = pipelines.connector_change({**declared, "config": bigger}, server)
    assert [f.field for f in change.fields] == ["config.slice_rows"]
    assert change.patch == {"config": bigger}
    # without the server's word a stored key the file lacks is a change
    plain = pipelines.connector_change(declared, {**server, "config_derived": {}})
    assert {f.field for f in plain.fields} == {"config.column_type", "config.watermark_column"}


class _Server:
    """A stand-in for the API (pure logic): answers the dry-run probe as a server with or without
    dry runs does, and records every other call."""

    def __init__(self, *, dry_runs: bool):
        self.dry_runs = dry_runs
        self.calls = []

    def call(self, method, path, body=None, params=None):
        from tidemark_client import TidemarkError

        if (params or {}).get("dry_run") == "probe":
            if self.dry_runs:
                raise TidemarkError(400, {"dry_run": ["must be true or false"]})
            raise TidemarkError(400, {"name": ["This field is required."]})
        self.calls.append((method, path, params))
        return {}


def _new_connector():
    declared = {"name": "c", "kind": "files", "config": {"path": "/data"}}
    return pipelines.connector_change(declared, None)


def test_a_server_without_dry_runs_is_sent_no_write_by_plan():
    # such a server would take ?dry_run=true for a real create
    old = _Server(dry_runs=False)
    changes = [_new_connector()]
    pipelines.check_plan(old, changes, reason="r")
    assert old.calls == []
    assert "no dry runs" in changes[0].not_checked and not changes[0].refused


def test_a_server_with_dry_runs_is_asked_for_each_change_as_a_dry_run():
    new = _Server(dry_runs=True)
    job = pipelines.job_change({"name": "j", "connector": "c", "batch_weight": 5}, None)
    changes = [_new_connector(), job]
    pipelines.check_plan(new, changes, reason="r")
    assert new.calls == [("POST", "connectors/", {"dry_run": "true"})]
    assert job.not_checked == "checked when applied, after connector c is created"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a key given twice: YAML keeps the last one without a word, so a setting was lost
        (
            "version: 1\njobs:\n  - name: j\n    connector: c\n    batch_weight: 5\n"
            "    batch_weight: 7\n",
            r":6:5: batch_weight is given twice \(first on line 5\)",
        ),
        ("version: 1\nversion: 1\n", r":2:1: version is given twice \(first on line 1\)"),
        # values JSON has no word for: a traceback, or silently another value on the server
        (
            "version: 1\njobs:\n  - {name: j, connector: c, batch_weight: 5, params: "
            "{day: 2026-01-01}}\n",
            r"jobs\[0\]\.params\.day: 2026-01-01 is a YAML date; quote it",
        ),
        (
            "version: 1\njobs:\n  - {name: j, connector: c, batch_weight: 5, params: {x: .nan}}\n",
            r"jobs\[0\]\.params\.x: nan is not a JSON number",
        ),
        (
            "version: 1\njobs:\n  - {name: j, connector: c, batch_weight: 5, params: {1: x}}\n",
            r"jobs\[0\]\.params: the key 1 is not a string; quote it",
        ),
    ],
)
def test_what_yaml_would_lose_or_json_cannot_say_is_an_error_naming_where(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        load(str(path))


def test_a_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"\xff\xfeversion: 1\n")
    with pytest.raises(UsageError, match=r"p\.yaml is not UTF-8 text"):
        load(str(path))


def _nested_aliases(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return (
        "version: 1\njobs:\n  - name: j\n    connector: c\n    batch_weight: 5\n    params:\n"
        + ("".join(f"      {line}\n" for line in lines))
    )


def test_aliases_that_expand_past_a_million_values_are_one_line_at_once(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(_nested_aliases(9))  # 9**9 values written out: reading it would never end
    with pytest.raises(UsageError, match=r"p\.yaml:1:1: the file expands to [\d,]+ values"):
        load(str(path))
    path.write_text(
        "version: 1\njobs:\n  - &j {name: j, connector: c, batch_weight: 5, params: [*j]}\n"
    )
    with pytest.raises(UsageError, match="an alias refers to a value that contains it"):
        load(str(path))


def test_aliases_that_stay_small_are_read_as_written_out(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\nconnectors:\n  - name: c\n    kind: files\n    config: {path: ./in}\n"
        "jobs:\n  - &defaults {name: j1, connector: c, batch_weight: 5, params: {x: 1}}\n"
        "  - {name: j2, connector: c, batch_weight: 5, params: *p}\n".replace("{x: 1}", "&p {x: 1}")
    )
    pipelines_file = load(str(path))
    assert [j["params"] for j in pipelines_file.jobs] == [{"x": 1}, {"x": 1}]
    path.write_text(_nested_aliases(5))  # 9**5 = 59,049 values: allowed
    assert len(load(str(path)).jobs[0]["params"]["a4"]) == 9
