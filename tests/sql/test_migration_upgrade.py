"""A database migrated with the old migration chain (0001_initial ... 0028, main at caa5ddd) upgrades
cleanly to the baseline and what follows it, and ends with the same schema as a new database.

The old chain is gone from the tree; tests/sql/fixtures/schema_at_0028.sql is a dump of a database it
migrated (schema, plus the rows of django_migrations, content types, permissions and groups). Each
database here is a scratch database of its own next to the test database, migrated by
`manage.py migrate` in a subprocess, as an operator upgrading would run it.
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import pytest
from django.conf import settings
from django.db import connection

from tests.support.schema_catalog import catalog, differences

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "schema_at_0028.sql"
OLD_CHAIN = [
    "0001_initial",
    "0002_plan_function",
    "0003_roles",
    "0004_commit_functions",
    "0005_plpgsql_start",
    "0006_drop_unused_lookback",
    "0007_lock_order",
    "0008_exactly_once",
    "0009_maintenance_run",
    "0010_incremental_rewrites_whole",
    "0011_dashboard",
    "0012_sql_home",
    "0013_asset_index_no_jit",
    "0014_sources_core",
    "0015_one_dispatch",
    "0016_backfill_time_range",
    "0017_rates_indexes",
    "0018_refuse",
    "0020_sec_sql_reader_role",
    "0021_delta_publish_token",
    "0023_dash_batch_plural",
    "0024_watermark_boundaries",
    "0025_one_overlap_rule",
    "0026_restatements",
    "0027_prefix_sums_rates",
    "0028_reaper_never_starved",
]


def _connect(name: str):
    db = settings.DATABASES["default"]
    return psycopg2.connect(
        dbname=name,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
    )


@pytest.fixture
def scratch_databases():
    """Make empty databases on the test server; dropped afterwards."""
    made = []
    admin = _connect(connection.settings_dict["NAME"])
    admin.autocommit = True

    def make() -> str:
        name = f"tidemark_upgrade_{uuid.uuid4().hex[:12]}"
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return name

    yield make
    with admin.cursor() as cursor:
        for name in made:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def _migrate(name: str, *command: str) -> subprocess.Popen:
    """`manage.py migrate` (or `python <command>`) on database `name`, started."""
    url = urlsplit(settings.DATABASE_URL)
    env = {
        **os.environ,
        "DATABASE_URL": urlunsplit(url._replace(path=f"/{name}")),
        "REDIS_URL": settings.REDIS_URL,
    }
    return subprocess.Popen(
        [sys.executable, *(command or ("manage.py", "migrate", "--noinput"))],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finished(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output


def _state(name: str) -> dict:
    with _connect(name) as conn, conn.cursor() as cursor:
        snapshot = catalog(cursor, "public")
        cursor.execute("SELECT app, name FROM django_migrations")
        applied = set(cursor.fetchall())
        cursor.execute(
            """
            SELECT g.name, coalesce(array_agg(p.codename ORDER BY p.codename)
                                    FILTER (WHERE p.id IS NOT NULL), '{}')
            FROM auth_group AS g
            LEFT JOIN auth_group_permissions AS gp ON gp.group_id = g.id
            LEFT JOIN auth_permission AS p ON p.id = gp.permission_id
            GROUP BY g.name
            """
        )
        groups = dict(cursor.fetchall())
    conn.close()
    return {"catalog": snapshot, "applied": applied, "groups": groups}


@pytest.mark.django_db
def test_a_database_of_the_old_chain_upgrades_to_the_schema_of_a_new_one(scratch_databases):
    old, new = scratch_databases(), scratch_databases()
    with _connect(old) as conn, conn.cursor() as cursor:
        cursor.execute(FIXTURE.read_text())
    conn.close()
    before = _state(old)
    assert {("inventory", name) for name in OLD_CHAIN} <= before["applied"]
    assert ("inventory", "0001_baseline") not in before["applied"]

    upgrading, creating = _migrate(old), _migrate(new)
    upgrade_output, _ = _finished(upgrading), _finished(creating)

    upgraded, fresh = _state(old), _state(new)
    # the baseline was not run on the old database: it was recorded as applied
    assert "Applying inventory.0001_baseline" not in upgrade_output
    assert ("inventory", "0001_baseline") in upgraded["applied"]
    # every migration a new database ran counts as applied on the upgraded one
    assert fresh["applied"] <= upgraded["applied"]
    found = differences(upgraded["catalog"], fresh["catalog"])
    assert found == [], "\n".join(found)
    assert upgraded["groups"] == fresh["groups"]
    # what the old chain built is all there: the comparison above compared real schemas
    assert len(fresh["catalog"]["functions"]) >= 30
    assert len(fresh["catalog"]["triggers"]) >= 5


# every other app to its latest migration (none depends on inventory's) and inventory only to its
# baseline, in one plan as `migrate` makes it, then what runs after any `migrate`
_TO_THE_BASELINE = """
import django
from django.core.management.sql import emit_post_migrate_signal
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

django.setup()
executor = MigrationExecutor(connection)
targets = [
    node for node in executor.loader.graph.leaf_nodes() if node[0] != "inventory"
] + [("inventory", "0001_baseline")]
for migration, _ in executor.migration_plan(targets):
    print("Applying", migration.app_label + "." + migration.name)
executor.migrate(targets)
emit_post_migrate_signal(verbosity=0, interactive=False, db="default")
"""


@pytest.mark.django_db
def test_the_baseline_builds_exactly_what_the_old_chain_built(scratch_databases):
    old, new = scratch_databases(), scratch_databases()
    with _connect(old) as conn, conn.cursor() as cursor:
        cursor.execute(FIXTURE.read_text())
    conn.close()
    output = _finished(_migrate(new, "-c", _TO_THE_BASELINE))
    assert "Applying inventory.0001_baseline" in output
    built, expected = _state(new), _state(old)
    assert differences(built["catalog"], expected["catalog"]) == []
    assert built["groups"] == expected["groups"]
