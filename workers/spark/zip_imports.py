"""Keep a zip archive's directory between `importlib.invalidate_caches()` calls while the archive
is unchanged.

Every Python process Spark starts for us (an executor's task, and on the driver the planner of a
Python data source: `create_data_source`, `plan_data_source_read`) calls
`importlib.invalidate_caches()` at the start of every request (`pyspark.worker_util.
setup_spark_files`), reused process or not. Spark puts `pyspark.zip`, the py4j zip and the
spark-core jar first on those processes' path, so pyspark itself is imported from the zip, with
one `zipimporter` per package directory; on Python 3.11 each one's `invalidate_caches` re-reads
and re-parses its whole archive's directory (1,220 entries for pyspark.zip, 5,261 for the jar):
65-80 ms per request on this project's machine, three or four times per small batch
(docs/benchmarks.md, small_batches). None of these archives changes while a worker lives, so an
importer re-reads its directory only when its archive's size or modification time differs from
when it last read it; files added by `addPyFile` land beside them as plain files or new
archives, whose importers are new and read theirs.

This is CPython's gh-103200 (https://github.com/python/cpython/issues/103200, found on Spark's
workers): fixed in 3.12, where `invalidate_caches` only marks the directory stale, and not
backported to 3.11, the Python this project runs. On 3.12 and later `install` does nothing.

Installed when `workers.spark` is imported, so in every Python worker process that runs
Tidemark code (the planner processes import it by unpickling a data source class), from its
second request on.
"""

import os
import sys
import zipimport

_real_invalidate = getattr(zipimport.zipimporter, "invalidate_caches", None)


def _stamp(archive: str):
    try:
        status = os.stat(archive)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size)


def _invalidate_if_changed(self) -> None:
    stamp = _stamp(self.archive)
    if stamp is not None and getattr(self, "_tidemark_stamp", None) == stamp:
        return
    _real_invalidate(self)
    self._tidemark_stamp = stamp


def install() -> None:
    """Idempotent; nothing to do on Python 3.12+ (fixed there) or a zipimporter without
    `invalidate_caches`."""
    if _real_invalidate is not None and sys.version_info < (3, 12):
        zipimport.zipimporter.invalidate_caches = _invalidate_if_changed
