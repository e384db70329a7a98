"""The tests that read the project's code parse it through tests.support.python_ast.parse, and that
parse survives a finalizer that formats a traceback while the tree is being built (what failed a
guard test in CI on Python 3.11: a dead Spark gateway's py4j finalizer, run by a collection inside
ast.parse, logged an exception and its traceback parsed source of its own)."""

import gc
import re
import traceback
from pathlib import Path

from django.conf import settings

from tests.support.python_ast import parse

ROOT = Path(settings.BASE_DIR)
HELPER = "tests/support/python_ast.py"
DIRECT = re.compile(r"\bast\.parse\(|\bcompile\([^)]*PyCF_ONLY_AST")


def _lookup_fails():
    empty = {}
    return empty["first"] + empty["second"]  # a subscript: 3.11 parses this line for its carets


class _FormatsATraceback:
    """Garbage in a cycle whose finalizer formats a traceback, as py4j's logging one does."""

    def __init__(self):
        self.me = self

    def __del__(self):
        try:
            _lookup_fails()
        except KeyError:
            traceback.format_exc()


def test_parse_survives_a_finalizer_that_formats_a_traceback():
    source = (ROOT / "workers/spark/submit.py").read_text()
    expected = len(parse(source).body)
    threshold = gc.get_threshold()
    gc.set_threshold(50)  # a collection every few dozen allocations, inside the parse
    try:
        for _ in range(20):
            for _ in range(60):
                _FormatsATraceback()
            assert len(parse(source).body) == expected
    finally:
        gc.set_threshold(*threshold)
        gc.collect()


def test_no_test_parses_python_but_through_the_helper():
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in (HELPER, "tests/repo/test_python_ast.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if DIRECT.search(line):
                found.append(f"{relative}:{number}")
    assert found == []
