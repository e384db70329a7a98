"""The `tidemark` command's output for people: `jobs list` with state and lag, `jobs show` and
`batches show` as key/value lines in human units (sizes, durations, times to the second), no JSON
in a table cell, whole alert messages, `watch` naming a blocker only when one holds the job; and
`-o json` for programs. Run in this process against the live server (the whole path through
gunicorn and a worker is tests/cli/test_commands.py)."""

import json
import re

import pytest
from rest_framework.authtoken.models import Token

from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job
from tidemark_cli import main as cli_main
from tidemark_cli import output
from tidemark_cli.resources import _progress_line

# a name long enough that its alert is longer than the 60 characters a cell was cut to
HELD = "held-by-a-dead-batch-of-a-job-with-a-rather-long-name"
# a time as `tidemark` prints it: local time to the second with its zone, no microseconds
TIME = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}( \S+)?"


@pytest.fixture
def tidemark(live_server, role_users, monkeypatch, capsys):
    token = Token.objects.create(user=role_users["admin"])
    monkeypatch.setenv("TIDEMARK_URL", live_server.url)
    monkeypatch.setenv("TIDEMARK_TOKEN", token.key)

    def run(*args) -> str:
        code = cli_main.main([str(a) for a in args])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        return captured.out

    return run


def _plant():
    behind = ConnectorFactory(name="landing", labels=["daily", "eu"])
    make_assets(behind, [2000, 3000])
    make_job(connector=behind, name="catching-up", batch_weight=10**6)
    stuck = ConnectorFactory(name="stuck-src")
    make_assets(stuck, [10])
    blocked = make_job(connector=stuck, name=HELD, batch_weight=10, max_attempts=1)
    dead = lifecycle.batch_acquire(job=blocked, worker="w")
    lifecycle.batch_fail(
        batch_id=dead.id,
        attempt=dead.attempt,
        error={"type": "ReadError", "message": "cannot read " + "very-long-file-name-" * 6},
    )
    return dead


@pytest.mark.django_db(transaction=True)
def test_jobs_list_shows_state_and_lag_and_json_keeps_the_api_shape(tidemark):
    _plant()
    listed = tidemark("jobs")
    header = listed.splitlines()[0].split()
    assert header[:4] == ["NAME", "CONNECTOR", "STATE", "LAG"]
    assert re.search(r"^catching-up\s+landing\s+catching up\s+2 items \(5\.0 kB\)", listed, re.M)
    assert re.search(rf"^{HELD}\s+stuck-src\s+blocked\s+1 item \(10 B\)", listed, re.M)
    rows = {r["name"]: r for r in json.loads(tidemark("jobs", "-o", "json"))}
    assert rows[HELD]["state"] == "blocked"
    assert rows["catching-up"]["lag"] == {"items": 2, "weight": 5000}
    assert rows["catching-up"]["time_lag_seconds"] is None


@pytest.mark.django_db(transaction=True)
def test_show_commands_print_key_values_in_human_units_without_json(tidemark):
    dead = _plant()
    shown = tidemark("jobs", "show", "catching-up")
    assert "{" not in shown and "[" not in shown, shown
    assert re.search(r"^batch_weight\s+1\.0 MB$", shown, re.M)
    assert re.search(r"^lease_seconds\s+2 min$", shown, re.M)
    assert re.search(rf"^created_at\s+{TIME}$", shown, re.M)
    assert re.search(r"^lag$\n^  items\s+2$\n^  weight\s+5\.0 kB$", shown, re.M), shown
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", shown)  # no microseconds

    job = make_job(connector=ConnectorFactory(name="done-src"), name="done")
    make_assets(job.connector, [10])
    ok = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(
        batch_id=ok.id, attempt=ok.attempt, result={"rows_out": 12, "bytes": 196608}
    )
    batch = tidemark("batches", "show", ok.id)
    assert re.search(r"^  bytes\s+197 kB$", batch, re.M), batch
    assert re.search(r"^  rows_out\s+12$", batch, re.M)
    assert re.search(rf"^finished_at\s+{TIME}$", batch, re.M)
    assert "196608" not in batch
    failed = tidemark("batches", "show", dead.id)
    assert "very-long-file-name-" * 6 in failed
    assert json.loads(tidemark("batches", "show", ok.id, "-o", "json"))["result"]["bytes"] == 196608


@pytest.mark.django_db(transaction=True)
def test_connectors_and_alerts_have_no_json_in_cells_and_nothing_cut_short(tidemark):
    _plant()
    connectors = tidemark("connectors")
    row = r"^landing\s+files\s+active\s+daily, eu\s+-\s+1$"  # its one job, counted
    assert re.search(row, connectors, re.M), connectors
    assert '["' not in connectors
    alerts = tidemark("alerts")
    messages = [a["message"] for a in json.loads(tidemark("alerts", "-o", "json"))["alerts"]]
    assert any(len(m) > 60 and HELD in m for m in messages)
    for message in messages:
        assert message in alerts  # whole, on its line


@pytest.mark.django_db(transaction=True)
def test_item_listings_show_weights_in_their_connectors_unit(tidemark):
    dead = _plant()  # landing's files weigh 2000 and 3000 bytes; stuck-src's one 10
    items = tidemark("connectors", "items", "landing").splitlines()
    assert items[0].split() == ["ID", "ITEM", "WEIGHT", "DISCOVERED_AT"]
    assert sorted(re.findall(r"\b\d\.\d kB\b", "\n".join(items[1:]))) == ["2.0 kB", "3.0 kB"]
    assert "10 B" in tidemark("batches", "items", dead.id)
    raw = json.loads(tidemark("-o", "json", "connectors", "items", "landing"))
    assert sorted(r["weight"] for r in raw) == [2000, 3000]


def test_a_cell_shows_what_a_terminal_would_obey_as_its_escape():
    # a file named by whoever writes into a landing directory reaches operators' terminals
    assert output.cell("h\x1b[31m.parquet") == "h\\x1b[31m.parquet"
    assert output.cell("g\u202egnp.exe") == "g\\u202egnp.exe"
    assert output.cell("bell\x07") == "bell\\x07"
    assert output.cell("caf\u00e9 \u0641\u0627\u06cc\u0644\u200c\u0647\u0627") == (
        "caf\u00e9 \u0641\u0627\u06cc\u0644\u200c\u0647\u0627"
    )


def test_a_table_header_is_one_word_a_column(capsys):
    output.table(
        [{"id": 1, "progress": {"batches_done": 2, "percent": 50.0}}],
        ["id", "progress.batches_done", "progress.percent"],
    )
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "PROGRESS_BATCHES_DONE", "PROGRESS_PERCENT"]
    assert len(row.split()) == 3


def test_watch_names_a_blocker_only_when_the_batch_needs_a_person():
    state = {
        "job": "j",
        "paused": False,
        "watermark_position": 3,
        "lag": {"items": 2, "weight": 2000},
        "weight_unit": "bytes",
        "batch_counts": {"running": 1},
    }
    running = _progress_line({**state, "blocked_by": {"id": 7, "status": "running"}})
    assert "blocked" not in running and "batch 7 running" in running
    assert "lag 2 items (2.0 kB)" in running
    dead = _progress_line({**state, "blocked_by": {"id": 7, "status": "dead"}})
    assert "blocked by batch 7 (dead)" in dead


def test_cells_and_times_in_human_form():
    assert output.cell(["a", "b"]) == "a, b"
    assert output.cell({"x": 1, "y": [2, 3]}) == "x=1, y=2, 3"
    assert output.cell("x" * 200) == "x" * 200
    assert re.fullmatch(TIME, output.cell("2026-12-06T04:12:33.123456Z"))
    assert output.human("bytes", 196608) == "197 kB"
    assert output.human("lease_seconds", 120) == "2 min"
    assert output.human("weight", 3, "rows") == "3 rows"


@pytest.mark.django_db(transaction=True)
def test_backfill_preview_rows_start_at_their_first_item(tidemark):
    connector = ConnectorFactory(name="later")
    ids = [a.id for a in make_assets(connector, [10] * 4)]
    make_job(connector=connector, name="from-zero", batch_weight=20, max_items=2)
    preview = tidemark("backfill", "preview", "--job", "from-zero", "--range", 0, ids[-1])
    rows = preview.split("FIRST_ITEM", 1)[1].splitlines()[1:]
    assert [row.split()[:3] for row in rows] == [
        [str(ids[0]), str(ids[1]), "2"],
        [str(ids[2]), str(ids[3]), "2"],
    ]
    plan = json.loads(
        tidemark("backfill", "preview", "--job", "from-zero", "--range", 0, ids[-1], "-o", "json")
    )
    assert plan["batches"][0]["range_start"] == 0  # the range asked for, before the first item
    assert plan["batches"][0]["first_item"] == ids[0]
