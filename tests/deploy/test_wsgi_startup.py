"""The WSGI entry loads the application, its URL patterns and their views, then freezes what it
loaded out of the cyclic collector's reach (controlplane/wsgi.py)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, sys
before = gc.get_freeze_count()
import controlplane.wsgi
print(before, gc.get_freeze_count(), "inventory.views.overview" in sys.modules,
      "inventory.api.metrics" in sys.modules)
"""


def test_the_wsgi_entry_freezes_the_loaded_application_views_included():
    env = {**os.environ, "TIDEMARK_DEV": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, after, views, metrics = done.stdout.split()
    assert int(before) == 0 and int(after) > 10_000
    assert views == metrics == "True"
