"""A Hudi table's own metadata (`.hoodie/`) confined to the table directory. No Django here.

hudi-rs reads `.hoodie/hoodie.properties`, the timeline, the archived timeline and the metadata
table by their paths under the table directory, following links. A link there (or `.hoodie`
itself a link) leading outside the table would have Tidemark read another table's timeline,
or any file, from outside the allowed roots. So before the table is opened, on the control plane
and again on the worker, every link under `.hoodie/` must resolve inside the table directory;
otherwise the table is refused with the same message whether the outside file exists or not.
"""

import os

from workers.spark.errors import ReadError


def metadata_confined(path: str) -> None:
    """ReadError when `.hoodie` under the table directory `path`, or a link anywhere in it,
    resolves outside the table directory."""
    root = os.path.realpath(path)
    hoodie = os.path.join(path, ".hoodie")

    def check(link: str) -> None:
        resolved = os.path.realpath(link)
        if not resolved.startswith(root + os.sep):
            relative = os.path.relpath(link, path)
            raise ReadError(
                f"the Hudi table {path} cannot be read: its metadata ({relative}) is a link "
                "leading outside the table directory, which Tidemark never reads: refused"
            )

    if os.path.islink(hoodie):
        check(hoodie)
    for folder, directories, files in os.walk(hoodie, followlinks=False):
        for name in (*directories, *files):
            entry = os.path.join(folder, name)
            if os.path.islink(entry):
                check(entry)
