"""The production web process, one spelling for everything that starts it (the demo, the tests;
the image and docker compose write the same command out)."""

import sys


def gunicorn_argv(*, bind: str, workers: int = 2) -> list[str]:
    """gunicorn serving the WSGI app; static files come from WhiteNoise inside it."""
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "controlplane.wsgi:application",
        "--bind",
        bind,
        "--workers",
        str(workers),
        "--access-logfile",
        "-",
    ]
