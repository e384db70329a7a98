"""bench_inventory's shape (sizes, budget, table names), its database and tables, the
pybatchintory venv, and small helpers the other inventory_* modules share."""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

ROWS = 100_000 if common.QUICK else 1_000_000
SMALL_BACKLOG = 10_000
BUDGET = 50_000  # weights 1..1000, mean ~500: ~100 items a batch
MAX_ITEMS = 1000
SECONDS = 2 if common.QUICK else 8  # per Tidemark / baseline run (split in ROUNDS slices)
PEER_SECONDS = 4 if common.QUICK else 15  # cap per pybatchintory run
SMALL_QUOTA = 50  # batches per job in the 10k-backlog runs
SMALL_JOBS = 16  # jobs per 10k-backlog slice (800 batches at most)
ROUNDS = 8  # Tidemark and the baseline, at both backlogs, alternate in this many rounds of slices
BACKLOGS = (ROWS, SMALL_BACKLOG)
SYSTEMS = ("tidemark", "tidemark_k", "floor", "sql", "pybatchintory", "pybatchintory_nocap")
# batches per call of the `tidemark_k` arm (batches_acquire + batches_succeed; issue 48's "k > 1 is
# extra": the targets hold at k = 1), run at the 1M backlog beside the others
K_PER_CALL = 8
PEER_SMALL_JOBS = 40  # jobs for pybatchintory's 10k-backlog run (2,000 batches at most)
PROFILE_BATCHES = 100 if common.QUICK else 300
CLIENT_COUNTS = (1, 4)
WARM_PAIRS = 8  # untimed acquire + succeed pairs per client session before its slice starts

META = "bench_meta"
SQL_BATCHES = "bench_sql_batch"
PEER_INVENTORY = "bench_pbi_inventory"
PEER_VENV = common.BENCH_DIR / ".venv-pybatchintory"
PEER_REQUIREMENTS = common.BENCH_DIR / "requirements-pybatchintory.txt"
PEER_DRIVER = common.BENCH_DIR / "pybatchintory_driver.py"

# Deterministic pseudo-random weights 1..1000 (Knuth's multiplicative hash of the uid).
WEIGHT_SQL = "1 + ((g * 2654435761) %% 4294967296) %% 1000"  # %% : used with bound params


def log(message: str) -> None:
    print(f"[bench_inventory {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---- setup --------------------------------------------------------------------------------------


def ensure_peer_venv() -> Path:
    """Create bench/.venv-pybatchintory from the pinned requirements when missing or outdated."""
    python = PEER_VENV / "bin" / "python"
    stamp = PEER_VENV / ".requirements"
    wanted = PEER_REQUIREMENTS.read_text()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    log(f"creating {PEER_VENV.relative_to(common.ROOT)} (pybatchintory 0.0.8, pydantic<2)")
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--clear", str(PEER_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-r", str(PEER_REQUIREMENTS)], check=True
    )
    stamp.write_text(wanted)
    return python


def peer_versions(python: Path) -> dict:
    out = subprocess.run(
        [str(python), str(PEER_DRIVER), "--versions"], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def prepare_database() -> dict:
    """Create the bench database on the settings' server, point Django at it, migrate."""
    base = common.base_database()
    common.recreate_database(base, common.BENCH_DB)
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = common.BENCH_DB
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return base


def create_tables() -> float:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {META}, {SQL_BATCHES}, {PEER_INVENTORY}")
        cur.execute(
            f"CREATE TABLE {META} (uid bigint NOT NULL, item text NOT NULL, weight integer NOT NULL)"
        )
        # Tidemark reads local meta tables as tidemark_reader (docs/security.md)
        cur.execute(f"GRANT SELECT ON {META} TO tidemark_reader")
        cur.execute(
            f"INSERT INTO {META} (uid, item, weight) "
            f"SELECT g, 'bench/part-' || lpad(g::text, 7, '0') || '.parquet', {WEIGHT_SQL} "
            "FROM generate_series(1, %s) AS g",
            [ROWS],
        )
        cur.execute(f"ALTER TABLE {META} ADD PRIMARY KEY (uid)")
        cur.execute(f"VACUUM ANALYZE {META}")
        cur.execute(
            f"""CREATE TABLE {SQL_BATCHES} (
                id bigserial PRIMARY KEY, job text NOT NULL, lo bigint NOT NULL, hi bigint NOT NULL,
                item_count integer NOT NULL, weight bigint NOT NULL,
                status text NOT NULL DEFAULT 'running', worker text NOT NULL,
                started_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
                UNIQUE (job, lo))"""
        )
        cur.execute(f"CREATE INDEX {SQL_BATCHES}_job_hi ON {SQL_BATCHES} (job, hi)")
    return time.perf_counter() - started


def create_connector():
    from inventory.services.connectors import connector_create

    return connector_create(
        name="bench-meta",
        kind="files",
        config={
            "meta_table": {
                "table": META,
                "uid_column": "uid",
                "item_column": "item",
                "weight_column": "weight",
            }
        },
    )


# ---- running clients ----------------------------------------------------------------------------


def summarize(seconds: list[float]) -> dict:
    if not seconds:
        return {"mean_ms": None, "p50_ms": None, "p95_ms": None}
    ordered = sorted(seconds)
    return {
        "mean_ms": 1000 * statistics.fmean(ordered),
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
    }
