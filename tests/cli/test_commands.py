"""The `tidemark` command as a user runs it: a subprocess against the production web server
(gunicorn) on this session's database, with a real worker where a job must run.

The pipelines file used is examples/pipelines.yaml itself, copied into a folder of this test's own
under the data folder, so its relative paths (../var/demo/landing, ../var/examples/...) lead to
this test's files and not to a demo's.
"""

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_fixtures import Cli, one_line_error
from tests.support.worker_fixtures import ROOT, read_sink, wait_until, write_orders

JOB = "example-customer-totals"
CONNECTOR = "example-orders"


@pytest.mark.django_db(transaction=True)
def test_login_stores_a_token_readable_by_the_user_only(cli, admin, tmp_path):
    from rest_framework.authtoken.models import Token

    done = cli.login()
    assert "logged in" in done.stdout
    config = tmp_path / "config" / "tidemark" / "config.json"
    assert (config.stat().st_mode & 0o777) == 0o600
    stored = json.loads(config.read_text())
    assert stored["default_url"] == cli.url
    assert stored["servers"][cli.url]["token"] == Token.objects.get(user=admin).key
    # the stored token is used without --url
    assert cli.json("connectors") == []

    wrong = cli.run(
        "login",
        "--url",
        cli.url,
        "--username",
        "cli-admin",
        "--password-stdin",
        input="not the password\n",
        ok=False,
    )
    assert "Unable to log in" in one_line_error(wrong)

    bad_token = cli.run("login", "--url", cli.url, "--token", "0" * 40, ok=False)
    assert "Invalid token" in one_line_error(bad_token)
    # a token is only sent to the server it came from
    elsewhere = cli.run("--url", "http://127.0.0.1:9", "jobs", ok=False)
    assert "not logged in to http://127.0.0.1:9" in one_line_error(elsewhere)


@pytest.mark.django_db(transaction=True)
def test_apply_creates_the_example_pipeline_and_a_second_apply_changes_nothing(
    cli, admin, workdir, celery_worker
):
    from inventory.models import Connector, Job

    cli.login()
    landing = workdir / "var" / "demo" / "landing"
    write_orders(landing / "orders-1.parquet", first_id=1, count=40)
    write_orders(landing / "orders-2.parquet", first_id=41, count=40)
    pipelines = workdir / "examples" / "pipelines.yaml"

    plan = cli.run("plan", "-f", pipelines).stdout
    assert f"+ connector {CONNECTOR}: create" in plan
    assert f"+ job {JOB}: create" in plan
    assert "Plan: 2 to create, 0 to change, 0 to reset, 0 unchanged." in plan

    applied = cli.run("apply", "-f", pipelines).stdout
    assert f"created connector {CONNECTOR}" in applied
    assert f"created job {JOB}" in applied
    connector = Connector.objects.get(name=CONNECTOR)
    assert connector.config["path"] == str(landing)  # relative to the file, not to the cwd
    job = Job.objects.get(name=JOB)
    assert job.processor == "example_customer_totals"
    assert job.sink["path"] == str(workdir / "var" / "examples" / "customer-totals")

    again = cli.run("apply", "-f", pipelines).stdout
    assert "No changes" in again
    assert cli.json("plan", "-f", pipelines)["summary"] == {
        "create": 0,
        "change": 0,
        "reset": 0,
        "unchanged": 2,
        "delete": 0,
    }

    # `tidemark jobs` shows the job; a run goes through a real worker, which finds the
    # processor through the example package's entry point
    jobs = cli.run("jobs").stdout
    assert JOB in jobs and "example_customer_totals" in jobs
    cli.run("jobs", "run", JOB)

    def settled():
        rows = cli.json("batches", "--job", JOB)
        if any(r["status"] in ("dead", "failed") for r in rows):
            pytest.fail(f"a batch failed: {cli.run('batches', 'show', rows[0]['id']).stdout}")
        return rows and all(r["status"] == "succeeded" for r in rows) and rows

    wait_until(settled, timeout=180, message="the example job's batches to commit")
    totals = {r["customer_id"]: r for r in read_sink(Path(job.sink["path"]))}
    expected: dict[int, list] = {}
    for order in range(1, 81):
        amount = float(order % 50) + 0.5
        if amount >= 10:
            expected.setdefault(order % 7, []).append(amount)
    assert {c: (r["orders"], r["total"]) for c, r in totals.items()} == {
        c: (len(a), round(sum(a), 2)) for c, a in expected.items()
    }

    preview = cli.run("backfill", "preview", "--job", JOB, "--range", 1, 10**9).stdout
    assert f"backfill of job {JOB}" in preview and "2 item(s)" in preview
    plan_json = cli.json("backfill", "preview", "--job", JOB, "--range", 1, 10**9)
    assert plan_json["total_items"] == 2 and plan_json["batch_count"] == 1

    # a change of a plain setting is applied; one of the source identity needs --allow-reset
    text = pipelines.read_text()
    pipelines.write_text(text.replace("min_amount: 10", "min_amount: 20"))
    plan = cli.run("plan", "-f", pipelines).stdout
    assert f"~ job {JOB}: change" in plan and "params.min_amount: 10 -> 20" in plan
    assert f"changed job {JOB}: params.min_amount" in cli.run("apply", "-f", pipelines).stdout
    assert Job.objects.get(name=JOB).params == {"min_amount": 20}

    (workdir / "var" / "demo" / "other").mkdir()
    pipelines.write_text(pipelines.read_text().replace("../var/demo/landing", "../var/demo/other"))
    plan = cli.run("plan", "-f", pipelines).stdout
    assert f"! connector {CONNECTOR}: change that needs a reset" in plan
    assert f'config.path: "{landing}"' in plan and f"jobs {JOB} start over" in plan
    refused = cli.run("apply", "-f", pipelines, ok=False)
    line = one_line_error(refused)
    assert "config.path" in line and "--allow-reset" in line
    assert Connector.objects.get(name=CONNECTOR).config["path"] == str(landing)
    reset = cli.run("apply", "-f", pipelines, "--allow-reset", "--reason", "moved").stdout
    assert f"reset connector {CONNECTOR}" in reset
    assert Connector.objects.get(name=CONNECTOR).config["path"].endswith("/var/demo/other")
    assert "No changes" in cli.run("apply", "-f", pipelines).stdout


@pytest.mark.django_db(transaction=True)
def test_errors_are_one_line_with_a_non_zero_exit(cli, admin, workdir):
    cli.login()
    missing = cli.run("jobs", "show", "nope", ok=False)
    assert one_line_error(missing) == "error: there is no job named 'nope'"

    pipelines = workdir / "examples" / "pipelines.yaml"
    pipelines.write_text(
        pipelines.read_text().replace("batch_weight: 50000000", "batch_weight: -1")
    )
    bad = cli.run("plan", "-f", pipelines, ok=False)
    assert one_line_error(bad) == (
        f"error: {pipelines}: jobs[0].batch_weight: -1 is less than the minimum of 1"
    )
    pipelines.write_text("version: 1\njobs: [\n")
    assert f"error: {pipelines}:3:1:" in one_line_error(cli.run("plan", "-f", pipelines, ok=False))

    # the API's 400 names the field
    pipelines.write_text(
        "version: 1\nconnectors:\n  - name: c1\n    kind: files\n"
        "    config: {path: ../var/demo/landing, password: hunter2}\n"
    )
    refused = one_line_error(cli.run("apply", "-f", pipelines, ok=False))
    assert refused.startswith("error: connector c1: config.password: ")
    assert "hunter2" not in refused

    # plan has the server dry-run each change (?dry_run=true), so it shows what would be refused;
    # apply then writes nothing, not even the changes that would have passed
    from inventory.models import Connector

    pipelines.write_text(
        "version: 1\nconnectors:\n"
        "  - {name: c2, kind: files, config: {path: ../var/demo/landing}}\n"
        "  - {name: c3, kind: files, config: {path: ../var/demo/landing, patern: '*.csv'}}\n"
        "jobs:\n  - {name: j2, connector: c2, processor: passthrough, batch_weight: 10}\n"
    )
    planned = cli.run("plan", "-f", pipelines, ok=False)
    assert planned.returncode == 1
    assert "refused by the server: config.patern: is not a files" in planned.stdout
    assert "(checked when applied, after connector c2 is created)" in planned.stdout
    assert "1 refused by the server." in planned.stdout
    assert one_line_error(planned).startswith("error: connector c3: config.patern: ")
    applied = one_line_error(cli.run("apply", "-f", pipelines, ok=False))
    assert applied.startswith("error: connector c3: config.patern: ")
    assert applied.endswith("; nothing applied")
    assert not Connector.objects.filter(name__in=["c2", "c3"]).exists()

    nothing = cli.run("--url", "http://127.0.0.1:9", "--output", "json", "alerts", ok=False)
    assert "error:" in one_line_error(nothing)
    assert json.loads(cli.run("alerts", "-o", "json").stdout)["count"] >= 0


@pytest.mark.django_db(transaction=True)
def test_watch_follows_a_job_until_interrupted_and_processor_run_shows_a_sample(
    cli, admin, workdir
):
    cli.login()
    landing = workdir / "var" / "demo" / "landing"
    write_orders(landing / "orders-1.parquet", first_id=1, count=30)
    cli.run("apply", "-f", workdir / "examples" / "pipelines.yaml")
    cli.run("connectors", "discover", CONNECTOR)

    watch = subprocess.Popen(
        cli.argv("jobs", "watch", JOB, "--interval", "0.5"),
        cwd=ROOT,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = watch.stdout.readline()
        assert f"{JOB}  watermark " in first and " lag " in first
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()

    # one run only: a SparkSession of its own takes a while on a busy machine
    ran = cli.run(
        "processor",
        "run",
        "example_customer_totals",
        "--connector",
        CONNECTOR,
        "--sample",
        1,
        "--rows",
        3,
        "--params",
        '{"min_amount": 10}',
        timeout=900,
    )
    shown = ran.stdout
    # quiet without -v: none of the JVM's startup lines nor Spark's log, only what it does
    assert ran.stderr.splitlines() == ["starting Spark (local[*]) ..."], ran.stderr
    assert f"processor example_customer_totals on 1 item(s) of connector {CONNECTOR}" in shown
    schema = shown.split("schema:\n", 1)[1].split("\n\n", 1)[0]
    assert schema.splitlines() == [
        "  customer_id: long",
        "  orders: long not null",
        "  total: double",
    ]
    rows = shown.split("first 3 row(s):\n", 1)[1].splitlines()
    assert rows[0].split() == ["CUSTOMER_ID", "ORDERS", "TOTAL"]
    # orders 10..30 of the file have amounts of at least 10: customer 0 has orders 14, 21, 28
    assert rows[1].split() == ["0", "3", str(round(14.5 + 21.5 + 28.5, 2))]
    assert len(rows) == 4
    unknown = cli.run("processor", "run", "nope", "--connector", CONNECTOR, ok=False)
    assert "unknown processor 'nope'" in one_line_error(unknown)


@pytest.fixture
def answering():
    """A local HTTP server answering every request with the (status, content type, body) the
    test sets, as a proxy, a login wall or a wrong URL would."""
    import http.server
    import threading

    answer = {"status": 200, "type": "text/html", "body": b"<html>Sign in</html>"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(answer["status"])
            self.send_header("Content-Type", answer["type"])
            self.end_headers()
            self.wfile.write(answer["body"])

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", answer
    server.shutdown()


def test_an_answer_that_is_not_json_is_one_line_naming_the_server(answering, tmp_path):
    url, answer = answering
    cli = Cli(url, tmp_path / "config")
    cli.env["TIDEMARK_TOKEN"] = "abc"
    for status in (200, 201):
        answer["status"] = status
        line = one_line_error(cli.run("--url", url, "jobs", ok=False))
        assert line == (
            f"error: {url} did not answer with JSON (HTTP {status}, text/html: "
            "<html>Sign in</html>); is it a Tidemark server?"
        ), line


def test_a_token_with_whitespace_or_control_characters_is_one_line(answering, tmp_path):
    url, _ = answering
    cli = Cli(url, tmp_path / "config")
    for token in ("abc\ndef", "abc\x07", "ab c"):
        cli.env["TIDEMARK_TOKEN"] = token
        line = one_line_error(cli.run("--url", url, "jobs", ok=False))
        assert line == "error: TIDEMARK_TOKEN holds whitespace or control characters", line
    # a trailing newline (a token kept in a file, read with $(cat ...) on Windows line ends) is
    # what people paste: leading and trailing whitespace is dropped
    cli.env["TIDEMARK_TOKEN"] = " abc \n"
    line = one_line_error(cli.run("--url", url, "jobs", ok=False))
    assert "did not answer with JSON" in line


@pytest.mark.parametrize(
    "args",
    [
        # a negative --limit cut rows off the end of the list (rows[:-5]) without a word, 0 was a
        # 400 naming page_size, which the user never gave; a negative --interval a traceback
        ("batches", "--limit", "-1"),
        ("connectors", "items", "x", "--limit", "-5"),
        ("watermark", "history", "j", "--limit", "0"),
        ("backfills", "--limit", "0"),
        ("jobs", "watch", "j", "--interval", "-1"),
        ("jobs", "watch", "j", "--interval", "0"),
    ],
)
def test_a_count_or_interval_below_one_is_a_usage_error(tmp_path, args):
    cli = Cli("http://127.0.0.1:9", tmp_path / "config")
    done = cli.run(*args, ok=False)
    assert done.returncode == 2, done.stderr
    assert "must be" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "stored",
    [
        # a config file edited by hand: each was a traceback
        {"default_url": 7},
        {"default_url": "http://127.0.0.1:9", "servers": {"http://127.0.0.1:9": "a-token"}},
        {"default_url": "http://127.0.0.1:9", "servers": 5},
    ],
)
def test_a_config_file_of_the_wrong_shape_is_one_line_naming_it(tmp_path, stored):
    cli = Cli("http://127.0.0.1:9", tmp_path / "config")
    path = tmp_path / "config" / "tidemark" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(stored))
    line = one_line_error(cli.run("jobs", ok=False))
    assert line.startswith(f"error: {path}: "), line
    assert "tidemark login" in line, line
