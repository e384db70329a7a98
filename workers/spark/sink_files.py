"""The file operations of the files sink (exists, rename, delete, glob), on a local directory
or through Hadoop's FileSystem for any other URI.

A local sink (a path or a `file:` URI) is handled with `os` calls: a batch's publish is a few
renames and deletes, and through Hadoop each of them is several round trips to the driver's JVM
(building `Path` objects, the call, the reply), which cost more than the renames themselves. Any
other scheme (hdfs:, s3a:, ...) goes through the FileSystem Spark was configured with.
"""

import glob
import os
import shutil


def local_path(uri: str) -> str | None:
    """The local path of `uri` (a path or a `file:` URI), None for any other scheme."""
    if uri.startswith("file:"):
        return "/" + uri[len("file:") :].lstrip("/")
    return uri if uri.startswith("/") else None


def sink_files(spark, path: str):
    """The operations for the sink directory `path` and everything below it."""
    if local_path(path) is not None:
        return LocalFiles()
    return HadoopFiles(spark, path)


class LocalFiles:
    # a directory's rename is one step: a reader or a killed writer sees it whole on one side
    atomic_renames = True

    def exists(self, uri: str) -> bool:
        return os.path.lexists(local_path(uri))

    def rename(self, source: str, target: str) -> bool:
        """Whether `source` now is `target` (False, as Hadoop says, when `target` exists)."""
        src, dst = local_path(source), local_path(target)
        if os.path.lexists(dst):
            return False
        try:
            os.rename(src, dst)
        except OSError:
            return False
        return True

    def delete(self, uri: str) -> None:
        """`uri` and everything under it; nothing if it is not there."""
        path = local_path(uri)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

    def matching(self, pattern: str) -> list[str]:
        """The names (last path segment) of the entries matching the glob `pattern`."""
        return [os.path.basename(p) for p in glob.glob(local_path(pattern))]

    def delete_if_empty(self, uri: str) -> None:
        try:
            os.rmdir(local_path(uri))
        except OSError:
            pass  # not there, or another batch's write has just put something in it


# file systems whose directory rename is one step (HDFS's is a namespace operation); an object
# store's (s3a:, gs:, abfs:, ...) copies file by file, so a writer killed mid-rename leaves part
# on each side
_ATOMIC_RENAME_SCHEMES = ("file", "hdfs", "viewfs")


class HadoopFiles:
    def __init__(self, spark, path: str):
        self._path = spark._jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(path).getFileSystem(spark._jsc.hadoopConfiguration())
        self.atomic_renames = str(self._fs.getScheme()).lower() in _ATOMIC_RENAME_SCHEMES

    def exists(self, uri: str) -> bool:
        return bool(self._fs.exists(self._path(uri)))

    def rename(self, source: str, target: str) -> bool:
        """Whether `source` now is `target`; False when `target` exists (Hadoop's rename would
        move `source` into an existing directory, as the local one refuses)."""
        destination = self._path(target)
        if self._fs.exists(destination):
            return False
        return bool(self._fs.rename(self._path(source), destination))

    def delete(self, uri: str) -> None:
        self._fs.delete(self._path(uri), True)

    def matching(self, pattern: str) -> list[str]:
        return [
            status.getPath().getName() for status in self._fs.globStatus(self._path(pattern)) or []
        ]

    def delete_if_empty(self, uri: str) -> None:
        try:
            directory = self._path(uri)
            if self._fs.exists(directory) and len(self._fs.listStatus(directory)) == 0:
                self._fs.delete(directory, False)
        except Exception:  # noqa: BLE001 - another batch's write may have just put something there
            pass

    def data_bytes(self, uri: str) -> int:
        """Size of the data files under `uri`, without checksums and markers."""
        total = 0
        files = self._fs.listFiles(self._path(uri), True)
        while files.hasNext():
            status = files.next()
            if not status.getPath().getName().startswith((".", "_")):
                total += status.getLen()
        return total
