"""Helpers shared by the benchmark scripts: the bench database, machine facts, markdown tables.

Convention (see bench/README.md): a benchmark is a script `bench/bench_<name>.py`. run_all.py runs
each one with the project's Python, from the repository root, and the script writes its section of
docs/benchmarks.md to `bench/out/<name>.md` (a `## ...` heading, then prose and tables), plus any
machine-readable figures it likes to `bench/out/<name>.json`. A script exits non-zero on failure.
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
OUT_DIR = Path(os.environ.get("BENCH_OUT_DIR", BENCH_DIR / "out"))
BENCH_DB = os.environ.get("BENCH_DB_NAME", "tidemark_bench")
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0", "false")


def setup_django_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("TIDEMARK_DEV", "1")


def allow(*, roots=(), credentials=(), endpoints=()) -> None:
    """Let this benchmark's objects name what it made (docs/security.md): its folders as roots,
    its variables as credentials, its loopback servers as endpoints; added to the settings of
    this process and to os.environ for the worker processes it starts."""
    from django.conf import settings

    for setting, values, sep in (
        ("TIDEMARK_ALLOWED_ROOTS", [os.path.realpath(r) for r in roots], ":"),
        ("TIDEMARK_CREDENTIALS", list(credentials), ","),
        ("TIDEMARK_ALLOWED_ENDPOINTS", list(endpoints), ","),
    ):
        merged = [*getattr(settings, setting), *values]
        setattr(settings, setting, merged)
        os.environ[setting] = sep.join(merged)


def base_database() -> dict:
    """The Django settings' database (DATABASE_URL, or the embedded server), before any change."""
    setup_django_path()
    from django.conf import settings

    return dict(settings.DATABASES["default"])


def psycopg2_params(db: dict, name: str | None = None) -> dict:
    """Keyword arguments for psycopg2.connect from a Django database dict."""
    params = {"dbname": name or db["NAME"], "user": db.get("USER") or None}
    if db.get("PASSWORD"):
        params["password"] = db["PASSWORD"]
    if db.get("HOST"):
        params["host"] = db["HOST"]
    if db.get("PORT"):
        params["port"] = str(db["PORT"])
    params.update({k: v for k, v in (db.get("OPTIONS") or {}).items() if isinstance(v, str | int)})
    return {k: v for k, v in params.items() if v is not None}


def recreate_database(db: dict, name: str) -> None:
    """Drop (if present) and create the dedicated bench database on the settings' server."""
    import psycopg2

    conn = psycopg2.connect(**psycopg2_params(db))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()


def drop_database(db: dict, name: str) -> None:
    import psycopg2

    conn = psycopg2.connect(**psycopg2_params(db))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        conn.close()


def database_url(db: dict, name: str) -> str:
    """A DATABASE_URL naming database `name` on the server of the Django database dict `db`."""
    auth = quote(db.get("USER") or "", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db.get("HOST") or ""
    if host.startswith("/"):
        return f"postgresql://{auth}@/{name}?host={quote(host, safe='')}"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{name}"


@contextmanager
def worker_database(name: str, *, prefix: str, env: dict | None = None) -> Iterator[tuple]:
    """The set-up every worker benchmark shares: a fresh database `name` on the settings' server
    with Tidemark migrated into it, a Celery queue of the bench's own, the temporary directory
    allowed as a root, and a work folder. This process's settings and os.environ (which the
    worker processes it starts read) point at them. Yields (work folder, the worker's environment
    with `env` added, queue); afterwards drops the database and the folder, unless BENCH_KEEP=1."""
    base = base_database()
    recreate_database(base, name)
    queue = f"tidemark-bench-{uuid.uuid4().hex[:8]}"
    os.environ["DATABASE_URL"] = database_url(base, name)
    os.environ["CELERY_QUEUE"] = queue
    import django
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = name
    allow(roots=[tempfile.gettempdir()])
    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections

    from controlplane.celery import app

    app.conf.CELERY_TASK_DEFAULT_QUEUE = queue
    if connection.settings_dict["NAME"] != name:
        raise RuntimeError(f"refusing to run on {connection.settings_dict['NAME']!r}")
    call_command("migrate", verbosity=0)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    worker_env = {
        **os.environ,
        "REDIS_URL": settings.REDIS_URL,
        "TIDEMARK_DEV": "1",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    try:
        yield work, worker_env, queue
    finally:
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
            connections.close_all()
            drop_database(base, name)


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "memory_gib": mem_gib,
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
    }


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"{rev}{' + uncommitted changes' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def table(headers: list[str], rows: list[list]) -> str:
    """A markdown table; numbers are shown as given (format them before)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


def write_section(name: str, markdown: str, figures: dict | None = None) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"{name}.md"
    path.write_text(markdown.rstrip() + "\n")
    if figures is not None:
        (OUT_DIR / f"{name}.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return path
