"""Tidemark settings: one module, typed environment variables, embedded services when none are given."""

from datetime import timedelta
from pathlib import Path

import dj_database_url

from controlplane import embedded
from controlplane.env import (
    READ_NAMES,
    ConfigError,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
# Development mode (the Makefile sets it): a fixed SECRET_KEY and plain HTTP are allowed.
DEV = env_bool("TIDEMARK_DEV", False)
DATA_DIR = Path(env_str("TIDEMARK_DATA_DIR", str(BASE_DIR / "var"))).resolve()

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and not DEV:
        raise ConfigError(
            "SECRET_KEY is not set (set it, or DEBUG=true / TIDEMARK_DEV=true for development)"
        )
    SECRET_KEY = "tidemark-development-only-not-secret"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    # lockout of repeated login failures; its attempts and logs are in the admin
    "axes",
    "inventory",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every response: own scripts and styles only, no inline script
    "controlplane.middleware.ContentSecurityPolicyMiddleware",
    # NUL characters in query strings: 400 on the API, dropped on pages (never a 500)
    "controlplane.middleware.NulInQueryMiddleware",
    # 413 for bodies over DATA_UPLOAD_MAX_MEMORY_SIZE, before any parser reads them
    "controlplane.middleware.RequestSizeLimitMiddleware",
    # static files in every mode (demo, image, compose), compressed and with hashed names
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # last: answers 429 to a locked-out login (docs/security.md, Logins)
    "axes.middleware.AxesMiddleware",
]

# --- Logins (docs/security.md) ------------------------------------------------------------------
# django-axes counts failed logins (/accounts/login/, /admin/login/) per user and, separately, per
# client address; past the limit both are locked out for the cool-off (429).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("TIDEMARK_LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("TIDEMARK_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True  # every failure, with its address, in the admin
AXES_VERBOSE = False  # no banner on stdout at every start of every process (the lockouts still log)
# the client address is REMOTE_ADDR (behind a reverse proxy: every client is the proxy's
# address; see docs/security.md)
# bad API tokens: past this many per address within the window (seconds), 429 for the window
TIDEMARK_TOKEN_FAILURE_LIMIT = env_int("TIDEMARK_TOKEN_FAILURE_LIMIT", 20, minimum=1)
TIDEMARK_TOKEN_FAILURE_WINDOW = env_int("TIDEMARK_TOKEN_FAILURE_WINDOW", 900, minimum=1)

# Largest request body accepted (bytes); bigger ones get 413 (controlplane/middleware.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("TIDEMARK_MAX_REQUEST_BYTES", 10 * 1024 * 1024, minimum=1024)

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Services: the given servers, or embedded ones under DATA_DIR -------------------------------
DATABASE_URL = env_str("DATABASE_URL") or embedded.postgres_url(DATA_DIR)
# Connections are kept between requests (DB_CONN_MAX_AGE); a kept one is checked before a request
# uses it, so the first request after a PostgreSQL restart reconnects instead of failing (500).
_db = dj_database_url.parse(
    DATABASE_URL,
    conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0),
    conn_health_checks=True,
)
if _db.get("ENGINE") != "django.db.backends.postgresql":
    raise ConfigError(f"DATABASE_URL must point at PostgreSQL, got engine {_db.get('ENGINE')!r}")
# A unix-socket URL (`...@/db?host=/dir`, the embedded server's form) puts the socket directory in
# OPTIONS; keep it in HOST, where every reader of the settings (and libpq) looks for it.
if not _db.get("HOST") and _db.get("OPTIONS", {}).get("host"):
    _db["HOST"] = _db["OPTIONS"].pop("host")
# A process frozen inside a transaction (SIGSTOP, a debugger, a dead network) would hold its row
# locks, a job's among them, until it ends: the server closes such a session after this long.
_idle_seconds = env_int("DB_IDLE_IN_TRANSACTION_TIMEOUT", 300, minimum=0)
if _idle_seconds:
    _options = _db.setdefault("OPTIONS", {})
    _options["options"] = (
        _options.get("options", "") + f" -c idle_in_transaction_session_timeout={_idle_seconds}s"
    ).strip()
DATABASES = {"default": _db}

REDIS_URL = env_str("REDIS_URL") or embedded.redis_url(DATA_DIR)


def _cache_url(url: str) -> str:
    # kombu spells a unix socket `redis+socket:///path`; redis-py (the cache) `unix:///path`
    return "unix://" + url[len("redis+socket://") :] if url.startswith("redis+socket://") else url


# One cache for every web process (the API throttle's counters live here: with a per-process
# cache, each gunicorn worker would grant a token client the full rate again). It shares the
# broker's Redis database, so its clear() deletes only its own keys (controlplane/cache.py).
CACHES = {
    "default": {
        "BACKEND": "controlplane.cache.PrefixedRedisCache",
        "LOCATION": _cache_url(REDIS_URL),
        "KEY_PREFIX": env_str("CACHE_KEY_PREFIX", "tidemark"),
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# `manage.py collectstatic` fills it (the demo and the image do); WhiteNoise serves it.
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(DATA_DIR / "staticfiles"))).resolve()
# Development (DEBUG / TIDEMARK_DEV) serves the files where they lie, found by the staticfiles
# finders, so `runserver` needs no `collectstatic`; production serves the collected, hashed and
# compressed copies (the manifest storage refuses a file that was not collected).
STATIC_FROM_SOURCE = env_bool("TIDEMARK_STATIC_FROM_SOURCE", DEBUG or DEV)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if STATIC_FROM_SOURCE
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = WHITENOISE_AUTOREFRESH = STATIC_FROM_SOURCE

# --- HTTPS and cookies -------------------------------------------------------------------------
# On by default outside development: `manage.py check --deploy` passes with no extra settings.
# Behind a proxy that terminates TLS, set TIDEMARK_PROXY_SSL_HEADER=true (it must set
# X-Forwarded-Proto and strip it from clients).
HTTPS = env_bool("TIDEMARK_HTTPS", not (DEBUG or DEV))
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
if env_bool("TIDEMARK_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# --- API (inventory/api) -----------------------------------------------------------------------
# Every endpoint needs a logged-in user (session or token); roles in inventory/roles.py.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # first, so an anonymous request gets 401 with a WWW-Authenticate header
        "inventory.api.authentication.ThrottledTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "inventory.api.permissions.HasRole",
        "inventory.api.permissions.DryRunWhereOffered",
    ],
    # drf-spectacular's generator; each body described by its own docstring, lists with their
    # bounds (inventory/api/schema.py)
    "DEFAULT_SCHEMA_CLASS": "inventory.api.schema.TidemarkAutoSchema",
    # JSON only, a NUL anywhere in it refused naming the field (inventory/api/parsers.py)
    # JSON bodies only: a form-encoded or multipart body cannot carry the nested config,
    # params and sink, which such parsers dropped silently; any other type is a 415 saying so
    "DEFAULT_PARSER_CLASSES": ["inventory.api.parsers.StrictJSONParser"],
    # page numbers, a page size, and a 400 naming a bad paging value (inventory/api/paging.py)
    "DEFAULT_PAGINATION_CLASS": "inventory.api.paging.Numbered",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "inventory.api.exceptions.exception_handler",
    # token clients only (scripts, external processors); sessions are not throttled
    "DEFAULT_THROTTLE_CLASSES": ["inventory.api.throttling.TokenScopedRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "read": env_str("API_RATE_READ", "1200/min"),
        "write": env_str("API_RATE_WRITE", "300/min"),
        "processing": env_str("API_RATE_PROCESSING", "6000/min"),
        # password attempts at auth/token/, per client address
        "login": env_str("API_RATE_LOGIN", "10/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tidemark API",
    "DESCRIPTION": "Incremental and backfill batch processing: connectors, jobs, batches, "
    "watermarks, backfills. Roles: viewer reads; operator runs and processes; admin corrects.",
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    # the schema and the docs need a role, like every read of the API
    "SERVE_PERMISSIONS": ["inventory.api.permissions.HasRole"],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        name: f"inventory.models.{name}"
        for name in (
            "ConnectorKind",
            "ConnectorState",
            "BatchKind",
            "BatchStatus",
            "BackfillStatus",
            "WatermarkType",
            "WatermarkSource",
        )
    },
    # Swagger UI from the drf-spectacular-sidecar package: no CDN needed
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
# /metrics accepts `Authorization: Bearer <METRICS_TOKEN>` (for Prometheus) or a logged-in user.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# a process serves the same exposition for this many seconds (0: render on every scrape)
METRICS_CACHE_SECONDS = env_int("TIDEMARK_METRICS_CACHE_SECONDS", 5, minimum=0)
# a job whose retention-breach forecast is nearer than this shows in the overview's alert strip
RETENTION_WARN_SECONDS = env_int("TIDEMARK_RETENTION_WARN_SECONDS", 86_400, minimum=0)
# which per-job series /metrics writes: `lean` (the default: lag items and seconds, the last
# watermark move, failed and dead batches per job; the rest by state and kind) or `full` (also
# every per-job family of before: open batches by kind and status, attempts, watermark position,
# lag weight, blocked)
METRICS_PER_JOB = env_choice("TIDEMARK_METRICS_PER_JOB", "lean", ("lean", "full"))

# --- Celery ------------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# With `--pool=prefork`, a new child that has not reported in after this many seconds is killed
# and replaced (Celery's default, 4 s, is often too short on a busy machine: each kill costs a
# child, and with it a SparkSession's start)
CELERY_WORKER_PROC_ALIVE_TIMEOUT = env_int("CELERY_WORKER_PROC_ALIVE_TIMEOUT", 30, minimum=1)
# django-celery-beat's, surviving an entry celery cannot compute (controlplane/beat.py)
CELERY_BEAT_SCHEDULER = "controlplane.beat:Scheduler"
CELERY_TIMEZONE = TIME_ZONE
# One queue name per deployment (tests use their own so other workers on a shared Redis never
# take their tasks).
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "tidemark")
# Redis hands an unacknowledged (acks_late) message to another worker after the visibility
# timeout; by default not before a batch's hard time limit has passed. A message is only a nudge
# ("job J may have work"), so a redelivery while its batch runs finds nothing to take (the batch
# is leased): a shorter timeout is safe, and the chaos suite uses one to redeliver for real.
TIDEMARK_BATCH_TIME_LIMIT = env_int("TIDEMARK_BATCH_TIME_LIMIT", 3600, minimum=10)
CELERY_VISIBILITY_TIMEOUT = env_int(
    "CELERY_VISIBILITY_TIMEOUT", TIDEMARK_BATCH_TIME_LIMIT + 600, minimum=1
)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}
# A worker process runs at most this many batches at once on its one warm SparkSession
# (workers/spark/slots.py); run it as `celery worker --pool=threads --concurrency=<the same>`.
# Not set as CELERY_WORKER_POOL: Celery lets that override an explicit `--pool=prefork`.
TIDEMARK_BATCHES_PER_WORKER = env_int("TIDEMARK_BATCHES_PER_WORKER", 4, minimum=1)

# --- Spark -------------------------------------------------------------------------------------
SPARK_MASTER = env_str("SPARK_MASTER", "local[*]")
SPARK_CONF = {}
for _item in env_list("SPARK_CONF", []):
    _key, _sep, _value = _item.partition("=")
    if not _sep or not _key.strip():
        raise ConfigError(f"SPARK_CONF: {_item!r} is not key=value (e.g. spark.executor.memory=2g)")
    SPARK_CONF[_key.strip()] = _value.strip()

# --- Tidemark ----------------------------------------------------------------------------------
TIDEMARK_LEASE_SECONDS = env_int("TIDEMARK_LEASE_SECONDS", 120, minimum=1)
# Extra modules that register processors (imported by workers, spark-submit runs and job validation).
TIDEMARK_PROCESSOR_MODULES = env_list("TIDEMARK_PROCESSOR_MODULES", [])

# --- What a user may name (docs/security.md) -------------------------------------------
# Environment variables a connector's or job's `*_env` key may name (comma-separated; `PREFIX*`
# allows every name with that prefix). Tidemark's own settings are never allowed, even if listed.
TIDEMARK_CREDENTIALS = env_list("TIDEMARK_CREDENTIALS", [])
# Where a credential may be sent: `scheme://host[:port]` (no port: any port), e.g.
# `https://minio.internal:9000,postgresql://warehouse.internal:5432,kafka://broker.internal`;
# `postgresql:///run/postgresql` allows a unix-socket directory. Public defaults need no entry.
TIDEMARK_ALLOWED_ENDPOINTS = env_list("TIDEMARK_ALLOWED_ENDPOINTS", [])
for _entry in TIDEMARK_ALLOWED_ENDPOINTS:
    _scheme, _sep, _rest = _entry.partition("://")
    if not (_sep and _scheme and _rest) or "@" in _rest or ("/" in _rest and _rest[0] != "/"):
        raise ConfigError(
            f"TIDEMARK_ALLOWED_ENDPOINTS: {_entry!r} is not scheme://host[:port] "
            "(or postgresql:///socket/dir)"
        )
# Directories under which files sources, files sinks and registered assets may lie (colon-separated).
TIDEMARK_ALLOWED_ROOTS = [
    str(Path(item).resolve())
    for item in (env_str("TIDEMARK_ALLOWED_ROOTS", "") or str(DATA_DIR)).split(":")
    if item.strip()
]
for _root in TIDEMARK_ALLOWED_ROOTS:
    if not Path(_root).is_absolute() or _root == "/":
        raise ConfigError(f"TIDEMARK_ALLOWED_ROOTS: {_root!r} must be an absolute directory, not /")
# The embedded PostgreSQL's and Redis's folders (in the data folder, the default root): never a
# files source, sink or asset, whatever TIDEMARK_ALLOWED_ROOTS says (docs/design.md, invariant 10).
TIDEMARK_OWN_DIRECTORIES = [str(path.resolve()) for path in embedded.own_directories(DATA_DIR)]
# A directory walk (discovery of a local directory) stops with an error past these.
TIDEMARK_WALK_MAX_DEPTH = env_int("TIDEMARK_WALK_MAX_DEPTH", 32, minimum=1)
TIDEMARK_WALK_MAX_ENTRIES = env_int("TIDEMARK_WALK_MAX_ENTRIES", 1_000_000, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # configured credentials never reach a log line (inventory/services/secrets.py)
    "filters": {"redact": {"()": "inventory.services.secrets.RedactingFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["redact"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# Every variable read above: Tidemark's own configuration, never a user's credential.
TIDEMARK_OWN_ENV_NAMES = frozenset(READ_NAMES)
