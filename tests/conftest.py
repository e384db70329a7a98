"""Shared fixtures: real PostgreSQL (a test database of its own per pytest process), named users."""

import fcntl
import getpass
import os
import tempfile

import pytest
from django.conf import settings as _settings
from hypothesis import HealthCheck
from hypothesis import settings as _hypothesis_settings

# Property tests run on a shared machine, often at load 10 or more: Hypothesis's timing checks
# (an example's deadline, "input generation is slow") would fail them for the machine's load,
# not for what they test. Their examples and shrinking are unchanged.
_hypothesis_settings.register_profile(
    "tidemark", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
_hypothesis_settings.load_profile("tidemark")


def _flush_retried_on_deadlock() -> None:
    """A transactional test ends with a TRUNCATE of every table (Django's flush), while the
    session's Celery worker may still be in a transaction of its own (a follow-up of the test's
    last batch): PostgreSQL then may find a deadlock and cancel the TRUNCATE, which failed the
    test's teardown. The TRUNCATE is the test harness's, not the product's: it is tried again."""
    import time

    from django.db import OperationalError
    from django.test import testcases

    teardown = testcases.TransactionTestCase._fixture_teardown

    def _fixture_teardown(self):
        for attempt in range(4):
            try:
                return teardown(self)
            except Exception as exc:  # flush wraps the error in a CommandError
                cause = exc if isinstance(exc, OperationalError) else exc.__cause__
                if attempt == 3 or "deadlock detected" not in str(cause):
                    raise
                time.sleep(0.5)

    testcases.TransactionTestCase._fixture_teardown = _fixture_teardown


_flush_retried_on_deadlock()


def _names_the_tests_may_use() -> None:
    """What this deployment (the test run) lets users name (docs/security.md): pytest's temp
    folders and the data folder as roots; the test variables (`TM_*` and a few others) as
    credentials; the loopback servers the tests start (moto, Tansu, any port) and the test
    PostgreSQL as endpoints. Set in os.environ so the worker and web subprocesses inherit them,
    and on the settings, which pytest-django loaded before this file."""
    temp_root = os.path.join(tempfile.gettempdir(), f"pytest-of-{getpass.getuser()}")
    os.makedirs(temp_root, exist_ok=True)
    roots = [os.path.realpath(temp_root), os.path.realpath(_settings.DATA_DIR)]
    credentials = ["TM_*", "WAREHOUSE_*", "KAFKA_USER", "KAFKA_PASS", "X"]
    database_host = _settings.DATABASES["default"].get("HOST") or "localhost"
    endpoints = [
        "http://127.0.0.1",
        "kafka://127.0.0.1",
        f"postgresql://{database_host}",
        "postgresql://localhost",
        "postgresql://127.0.0.1",
    ]
    os.environ["TIDEMARK_ALLOWED_ROOTS"] = ":".join(roots)
    os.environ["TIDEMARK_CREDENTIALS"] = ",".join(credentials)
    os.environ["TIDEMARK_ALLOWED_ENDPOINTS"] = ",".join(endpoints)
    _settings.TIDEMARK_ALLOWED_ROOTS = roots
    _settings.TIDEMARK_CREDENTIALS = credentials
    _settings.TIDEMARK_ALLOWED_ENDPOINTS = endpoints


_names_the_tests_may_use()

# Real Celery worker processes (tests/support/worker_fixtures.py): one per test session, shared by every
# module that asks for `celery_worker` (a module that star-imports them gets its own instead).
pytest_plugins = [
    "tests.support.worker_fixtures",
    "tests.support.server_fixtures",
    "tests.support.s3_fixtures",
    "tests.support.kafka_fixtures",
    # fixtures modules of several folders ask for by name (tests/README.md)
    "tests.support.sink_database",  # sink_dsn
    "tests.support.table_source",  # source_dsn
    "tests.support.cli_fixtures",  # api_server, admin, cli, workdir
    "tests.support.browser",  # browser
    "tests.support.admin_fixtures",  # admin_client_for, gappy
]


# Test databases are created and migrated one at a time on this machine: the baseline migration
# creates a role (`tidemark_reader`), which is the server's, not the database's, and two processes
# migrating at once (`make test` runs several) would both try to create it.
_DATABASE_SETUP_LOCK = os.path.join(tempfile.gettempdir(), "tidemark-test-database-setup.lock")
_database_setup_lock: list = []


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    """Give every pytest process its own test database, so parallel runs never collide; and take
    the setup lock, which `django_db_setup` (pytest-django's, which asks for this first) holds
    while it creates and migrates the database."""
    from django.conf import settings

    suffix = os.environ.get("TIDEMARK_TEST_DB_SUFFIX") or str(os.getpid())
    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = f"test_tidemark_{suffix}"
    lock = open(_DATABASE_SETUP_LOCK, "a")  # noqa: SIM115 - closed by django_db_setup below
    fcntl.flock(lock, fcntl.LOCK_EX)
    _database_setup_lock.append(lock)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's, then the setup lock released (a failed setup releases it when this
    process ends)."""
    while _database_setup_lock:
        _database_setup_lock.pop().close()  # closing the file releases its flock
    return django_db_setup


@pytest.fixture(scope="session", autouse=True)
def _close_stray_test_connections(django_db_setup, django_db_blocker):
    """At the end, end connections other threads left on this run's test database (the live
    server's, a worker's) so that pytest-django can drop it instead of leaving it behind."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        # the sinks' database of this run (tests/support/sink_database.py), if a test made one
        cursor.execute(
            f'DROP DATABASE IF EXISTS "{connection.settings_dict["NAME"]}_sinks" WITH (FORCE)'
        )


@pytest.fixture(autouse=True)
def _token_failures_reset(request):
    """Bad API tokens sent by one test do not throttle the next one (inventory/api/
    authentication.py counts them per address in the cache; every test client is loopback)."""
    yield
    uses_services = request.node.get_closest_marker("django_db") or any(
        "server" in name or name in ("db", "transactional_db") for name in request.fixturenames
    )
    if uses_services:
        from inventory.api.authentication import token_failures_reset

        for address in ("127.0.0.1", "::1"):
            token_failures_reset(address)


@pytest.fixture(scope="session", autouse=True)
def cache_of_this_session():
    """The cache (Redis) may be shared with other test runs: this session's keys, also in the
    web and worker processes it starts, get a prefix of their own."""
    from django.conf import settings
    from django.core.cache import caches

    prefix = f"tidemark-test-{os.getpid()}"
    settings.CACHES["default"]["KEY_PREFIX"] = prefix
    os.environ["CACHE_KEY_PREFIX"] = prefix
    # this thread's cache is built before this fixture runs (it kept the prefix "tidemark", so the
    # pytest processes shared the API throttle's and the bad-token brake's counters: a 429 where a
    # test expected 403): give the built one the prefix too
    caches["default"].key_prefix = prefix
    return prefix


@pytest.fixture(scope="session", autouse=True)
def metrics_rendered_on_every_scrape():
    """/metrics reuses its exposition for a few seconds (api/metrics.py); tests change the data
    between scrapes, here and in the web server processes they start."""
    from django.conf import settings

    os.environ["TIDEMARK_METRICS_CACHE_SECONDS"] = "0"
    settings.METRICS_CACHE_SECONDS = 0


@pytest.fixture(scope="session", autouse=True)
def static_root(tmp_path_factory):
    """Static files collected once, as a deployment does: the manifest storage needs them to
    render any page, and WhiteNoise serves them (also to the web server subprocesses)."""
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    root = tmp_path_factory.mktemp("staticfiles")
    settings.STATIC_ROOT = root
    # with the production storage (hashed names and their manifest) whatever mode this process
    # runs in: the web servers the tests start serve it as production does
    production = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    with override_settings(STORAGES=production):
        call_command("collectstatic", interactive=False, verbosity=0)
    return root


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test session (local[2]), the same warm session workers use."""
    from tests.support.worker_fixtures import TEST_JVM_OPTIONS
    from workers.spark.session import get_session, stop_session

    session = get_session("local[2]", conf={"spark.driver.extraJavaOptions": TEST_JVM_OPTIONS})
    yield session
    stop_session()


@pytest.fixture
def role_users(db):
    """Named users, one per role (groups from migration 0001_baseline), plus one with no role."""
    from django.contrib.auth.models import Group, User

    from inventory.roles import role_groups_ensure

    role_groups_ensure()  # a transactional test before this one may have flushed them
    users = {}
    for role in ("viewer", "operator", "admin"):
        # no password: hashing one costs seconds; tests log in with tokens or force_login
        user = User.objects.create_user(username=f"{role}-user", password=None)
        user.is_staff = True  # may open the admin site; what they may do there follows the role
        user.save(update_fields=["is_staff"])
        user.groups.add(Group.objects.get(name=role))
        users[role] = user
    users["norole"] = User.objects.create_user(username="norole-user", password=None)
    return users


@pytest.fixture
def world(role_users):
    """The one small inventory that names something for every path parameter of the URLconf and
    every route of the API: a files connector with eight items of weight 40, its job (batches of
    two items, one attempt each), a dead batch over the first two items, a running one over the
    next two, and a backfill over the four items no batch covers (`first` to `last`: a backfill
    over a running batch's items is refused); with the named users of `role_users`."""
    from inventory.services import backfills, lifecycle
    from tests.support.api_support import make_inventory

    connector, job = make_inventory(weights=[40] * 8, max_attempts=1)
    dead = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=dead.pk, attempt=dead.attempt, error={"message": "x"})
    running = lifecycle.batch_acquire(job=job, worker="w")
    ids = sorted(connector.assets.values_list("id", flat=True))
    backfill = backfills.backfill_create(job=job, range_start=ids[4], range_end=ids[-1])
    return {
        "connector": connector,
        "job": job,
        "dead": dead,
        "running": running,
        "backfill": backfill,
        "first": ids[4],
        "last": ids[-1],
    }
