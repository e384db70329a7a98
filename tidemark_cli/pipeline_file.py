"""Reading a pipelines file: YAML, checked against pipelines.schema.json, relative paths taken
from the file's folder. Every problem is a UsageError of one line naming where it is."""

import datetime
import json
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from tidemark_cli.config import UsageError


@dataclass
class Pipelines:
    path: Path
    connectors: list[dict]
    jobs: list[dict]


def schema() -> dict:
    return json.loads(resources.files("tidemark_cli").joinpath("pipelines.schema.json").read_text())


class _Loader(yaml.SafeLoader):
    """YAML as safe_load reads it, except that a key given twice in one mapping is an error:
    YAML itself keeps the last one without a word, so a setting written first would be lost."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                ident = (key_node.tag, key_node.value)
                if ident in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"{key_node.value} is given twice (first on line {seen[ident] + 1})",
                        key_node.start_mark,
                    )
                seen[ident] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def get_single_data(self):
        node = self.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_VALUES:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"the file expands to {size:,} values through its aliases (at most "
                f"{MAX_VALUES:,}): write the repeated parts out, or use fewer nested aliases",
                node.start_mark,
            )
        return self.construct_document(node)


# a pipelines file of 1,000 jobs holds some 50,000 values; aliases nested a few levels deep
# multiply (nine aliases of nine aliases ... is 9**9 values), which no run could read
MAX_VALUES = 1_000_000


def _expanded_size(root) -> int:
    """How many values the document holds once every alias is written out: counted over the
    node graph, each shared node once (an alias is a second reference to the same node)."""
    sizes: dict[int, int] = {}
    pending: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if not children_done and id(node) in pending:
            raise yaml.constructor.ConstructorError(
                None, None, "an alias refers to a value that contains it", node.start_mark
            )
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = (
            [v for pair in node.value for v in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
        )
        if children_done:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            pending.discard(id(node))
        else:
            pending.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def load(path: str) -> Pipelines:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise UsageError(f"{where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if data is None:
        raise UsageError(f"{path} is empty; it needs at least `version: 1`")
    _check_json(path, data, [])
    _check_schema(path, data)
    _check_unique(path, data)
    folder = file.resolve().parent
    connectors = [_with_local_path(c, "config", folder) for c in data.get("connectors") or []]
    jobs = [_with_local_path(j, "sink", folder) for j in data.get("jobs") or []]
    return Pipelines(path=file, connectors=connectors, jobs=jobs)


def _check_json(path: str, value, where: list) -> None:
    """What the file says is sent as JSON: a YAML value JSON has no form for (a date, NaN, a key
    that is not a string) would be a traceback, or silently become another value."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise UsageError(
                    f"{path}: {json_path(where)}: the key {key} is not a string; quote it"
                )
            _check_json(path, inner, [*where, key])
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            _check_json(path, inner, [*where, index])
    elif isinstance(value, datetime.date):
        raise UsageError(
            f"{path}: {json_path(where)}: {value} is a YAML date; quote it to give it as text"
        )
    elif isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{path}: {json_path(where)}: {value} is not a JSON number")
    elif value is not None and not isinstance(value, str | int | float):
        raise UsageError(
            f"{path}: {json_path(where)}: a YAML {type(value).__name__} has no JSON form"
        )


def _check_schema(path: str, data) -> None:
    validator = jsonschema.Draft202012Validator(schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise UsageError(f"{path}: {json_path(error.absolute_path)}: {error.message}")


def json_path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _check_unique(path: str, data: dict) -> None:
    for section in ("connectors", "jobs"):
        seen = set()
        for index, entry in enumerate(data.get(section) or []):
            if entry["name"] in seen:
                raise UsageError(
                    f"{path}: {section}[{index}].name: {entry['name']!r} is declared twice"
                )
            seen.add(entry["name"])


def _with_local_path(entry: dict, field: str, folder: Path) -> dict:
    """A relative `path` (a connector's directory, a files sink) is read from the file's folder,
    so a file kept next to its data works from any working directory."""
    value = entry.get(field)
    if not isinstance(value, dict):
        return entry
    local = value.get("path")
    if not isinstance(local, str) or not local or "://" in local or os.path.isabs(local):
        return entry
    return {**entry, field: {**value, "path": os.path.normpath(folder / local)}}
