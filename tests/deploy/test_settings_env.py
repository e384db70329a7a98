"""Settings fail loudly on bad environment values, naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.env import ConfigError, env_bool, env_int, env_str

ROOT = Path(__file__).resolve().parents[2]


def test_a_bad_boolean_or_integer_names_the_variable(monkeypatch):
    monkeypatch.setenv("TM_FLAG", "maybe")
    with pytest.raises(ConfigError, match="TM_FLAG='maybe'"):
        env_bool("TM_FLAG", False)
    monkeypatch.setenv("TM_N", "ten")
    with pytest.raises(ConfigError, match="TM_N='ten': expected an integer"):
        env_int("TM_N", 1)
    monkeypatch.setenv("TM_N", "0")
    with pytest.raises(ConfigError, match="at least 1"):
        env_int("TM_N", 1, minimum=1)


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cr3t\n")
    monkeypatch.setenv("TM_KEY_FILE", str(secret))
    assert env_str("TM_KEY") == "s3cr3t"
    monkeypatch.setenv("TM_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="TM_KEY_FILE"):
        env_str("TM_KEY")


@pytest.mark.parametrize(
    "variables, message",
    [
        ({"TIDEMARK_DEV": "", "DEBUG": "", "SECRET_KEY": ""}, "SECRET_KEY is not set"),
        ({"SPARK_CONF": "spark.a=1,oops"}, "SPARK_CONF: 'oops' is not key=value"),
        ({"DATABASE_URL": "mysql://u@localhost/db"}, "DATABASE_URL must point at PostgreSQL"),
        ({"TIDEMARK_ALLOWED_ENDPOINTS": "minio:9000"}, "is not scheme://host[:port]"),
        ({"TIDEMARK_ALLOWED_ENDPOINTS": "https://minio/x"}, "is not scheme://host[:port]"),
        ({"TIDEMARK_ALLOWED_ROOTS": "/"}, "must be an absolute directory, not /"),
    ],
)
def test_the_settings_refuse_to_start_with_a_bad_value(variables, message):
    env = {**os.environ, "TIDEMARK_DEV": "1", **variables}
    env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; "
            "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'controlplane.settings'); django.setup()",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert message in done.stderr
