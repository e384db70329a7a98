"""Where a Delta table's rows are after compactions: the lineage of its data files. No Django.

A data-changing commit (`add` or `remove` with `dataChange: true`: an append, a delete, an
update, an overwrite, an upstream Tidemark replay) adds or removes rows. A compaction (`OPTIMIZE`,
Z-order, by delta-rs, Spark or any other writer: `dataChange: false`) moves the rows of the files
it removes into the files it adds, partition by partition, without changing them. So a file a
compaction added holds the rows of the files of its partition that the same commit removed, and,
transitively, of the versions that added those.

- `origins`: the registered versions whose rows a data-changing removal takes away, traced through
  compactions; used by discovery to restate them.
- `dead_files`: which of the files some versions added hold no live row any more (removed by a
  data-changing commit, directly or after being compacted); used to read a restated version.

A compaction that wrote several files of one partition and of which a later commit removes only
some cannot be traced: which rows of which version went into which of its files is not in the
log. That case is an `Untraceable` error, never a guess: reading the removing version would
double the rows its rewrite carries, reading the compacted versions would lose the rows still in
the other files.
"""

import json
from collections.abc import Callable


class Untraceable(Exception):
    """A removal whose rows cannot be traced to the versions that added them."""


def _data_change(action: dict, default: bool) -> bool:
    return bool(action.get("dataChange", default))


def _partition(action: dict) -> str:
    return json.dumps(action.get("partitionValues") or {}, sort_keys=True)


def data_added(actions: list[dict]) -> list[dict]:
    return [a["add"] for a in actions if "add" in a and _data_change(a["add"], True)]


def data_removed(actions: list[dict]) -> set[str]:
    return {
        a["remove"]["path"] for a in actions if "remove" in a and _data_change(a["remove"], False)
    }


def compacted(actions: list[dict]) -> dict[str, list[str]]:
    """The files a commit added without a data change, each with the files of its partition that
    the commit removed without one (whose rows it now holds); {} for any other commit."""
    inputs: dict[str, list[str]] = {}
    outputs: dict[str, list[str]] = {}
    for action in actions:
        if "remove" in action and not _data_change(action["remove"], False):
            inputs.setdefault(_partition(action["remove"]), []).append(action["remove"]["path"])
        elif "add" in action and not _data_change(action["add"], True):
            outputs.setdefault(_partition(action["add"]), []).append(action["add"]["path"])
    return {
        path: inputs.get(partition, []) for partition, paths in outputs.items() for path in paths
    }


def _siblings(actions: list[dict], path: str) -> list[str]:
    """The files the compaction that added `path` wrote in the same partition, `path` included."""
    partition = next(
        _partition(a["add"]) for a in actions if "add" in a and a["add"]["path"] == path
    )
    return [
        a["add"]["path"]
        for a in actions
        if "add" in a and not _data_change(a["add"], True) and _partition(a["add"]) == partition
    ]


def origins(
    removed: dict[str, int],
    *,
    start: int,
    actions_of: Callable[[int], list[dict]],
    gone: Callable[[int, int], None],
) -> tuple[dict[int, set[int]], dict[int, str]]:
    """For data files removed by data-changing commits (`removed`: file -> the version removing
    it), the versions whose rows they held, read from the log backwards from version `start`:
    a file a compaction wrote stands for the files it compacted.

    Returns ({removing version: {versions whose rows it took away}}, {removing version: why its
    removal cannot be traced}). `actions_of(version)` reads a version's commit and raises when the
    log no longer holds it; then `gone(version, files still wanted)` is called and the walk stops
    (what was found so far stands)."""
    wanted = dict(removed)
    removed_at = dict(removed)  # every data-changing removal seen: file -> its version
    found: dict[int, set[int]] = {}
    untraceable: dict[int, str] = {}
    for version in range(start, -1, -1):
        if not wanted:
            break
        try:
            actions = actions_of(version)
        except Exception:  # noqa: BLE001 - the caller's reader names why
            gone(version, len(wanted))
            break
        for path in data_removed(actions):
            removed_at.setdefault(path, version)
        for add in data_added(actions):
            by = wanted.pop(add["path"], None)
            if by is not None and version < by:
                found.setdefault(by, set()).add(version)
        for output, inputs in compacted(actions).items():
            by = wanted.pop(output, None)
            if by is None:
                continue
            left = [
                s
                for s in _siblings(actions, output)
                if s != output and removed_at.get(s, by + 1) > by
            ]
            if left:
                untraceable.setdefault(
                    by,
                    f"version {by} removes a file that the compaction of version {version} "
                    f"wrote together with {len(left)} other file(s) still in the table, so the "
                    f"rows it took away cannot be traced to the versions that added them",
                )
                continue
            for source in inputs:
                wanted.setdefault(source, by)
    return found, untraceable


def dead_files(paths: list[str], later: list[list[dict]]) -> set[str]:
    """Which of `paths` (files some versions added) no longer hold a live row, given the commits
    after them (`later`, in version order): removed by a data-changing commit, or compacted into
    files that all were. Raises Untraceable for a file compacted into several files of which only
    some were removed since."""
    removed: set[str] = set()
    into: dict[str, list[str]] = {}  # a compacted file -> the files of its compaction
    for actions in later:
        removed |= data_removed(actions)
        outputs: dict[str, list[str]] = {}
        for output, inputs in compacted(actions).items():
            for source in inputs:
                outputs.setdefault(source, []).append(output)
        for source, written in outputs.items():
            into.setdefault(source, written)

    def dead(path: str) -> bool:
        if path in removed:
            return True
        written = into.get(path)
        if not written:
            return False
        states = {dead(output) for output in written}
        if states == {True, False}:
            raise Untraceable(
                f"file {path} was compacted into {len(written)} files of which only some were "
                "removed since: which of its rows are still live cannot be traced"
            )
        return states == {True}

    return {path for path in paths if dead(path)}
