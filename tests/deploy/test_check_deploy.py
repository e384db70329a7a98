"""`manage.py check --deploy` passes with production settings: no DEBUG, no development mode,
a real secret key; HTTPS cookies and HSTS come on by default outside development."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check(extra: dict) -> subprocess.CompletedProcess:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("TIDEMARK_DEV", "DEBUG", "TIDEMARK_HTTPS")
    }
    env.update(
        SECRET_KEY=secrets.token_urlsafe(50),
        DATABASE_URL="postgres://tidemark@db.invalid/tidemark",  # check --deploy does not connect
        REDIS_URL="redis://redis.invalid:6379/0",
        ALLOWED_HOSTS="tidemark.example.com",
        **extra,
    )
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_passes_with_production_settings():
    done = _check({"SECURE_HSTS_PRELOAD": "true"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_check_deploy_complains_when_https_is_turned_off():
    done = _check({"TIDEMARK_HTTPS": "false"})
    assert done.returncode != 0
    assert "SESSION_COOKIE_SECURE" in done.stdout + done.stderr
