"""The Python daemon of Tidemark's Spark executors (`spark.python.daemon.module`, session.py).

Spark starts one daemon per executor (`python -m <this module> pyspark.worker`) and forks a Python
worker from it for each task, reusing an idle worker for a minute (`spark.python.worker.reuse`)
and closing it after that (not configurable). A worker forked afresh, the first task's or one after
a minute without batches, paid for its imports and its archives' directories at its first
request: pyarrow (~90 ms here), which every reader of Tidemark's Python data sources imports, and
one full re-read of pyspark.zip's and the jar's directories at `importlib.invalidate_caches()`
(65-80 ms on Python 3.11: zip_imports.py says why).

This daemon does both once, before it forks: it installs zip_imports (importing `workers.spark`
does) and reads the archives' directories, so every worker it forks inherits importers that know
their archives are unchanged; and it imports pyarrow, which the workers then share. Then it is
pyspark's own daemon, unchanged (`pyspark.daemon.manager`).

The driver's data-source planner processes use Spark's default daemon module whatever the setting
says, so their first request after an idle minute still pays (docs/benchmarks.md).
"""

import importlib

import workers.spark  # noqa: F401 - installs zip_imports in this process, before any fork

# every zipimporter on the path reads its archive's directory now and keeps it while the archive
# is unchanged: the workers forked below start from that, not from a re-read
importlib.invalidate_caches()

try:  # shared by every forked worker (the sources' readers); a Python without it still runs
    import pyarrow  # noqa: E402, F401
except ImportError:
    pass
from pyspark import daemon  # noqa: E402 - reads its worker module from sys.argv when imported

if __name__ == "__main__":
    daemon.manager()
