"""The tests are filed by concern (tests/README.md): no test module directly under tests/, every
folder holding Python a package whose docstring says what goes there and which the README's table
names, no module under tests/ importing a test module (what tests share lives in tests/support/),
and every test file, test or test module the repository names (docs, Makefile, comments, strings)
exists where it is named."""

import ast
import re
import subprocess
from pathlib import Path

from django.conf import settings

from tests.support.python_ast import parse

ROOT = Path(settings.BASE_DIR)
TESTS = ROOT / "tests"
# applied migration files are never edited (inventory/sql/README.md): what they name stays as it was
NEVER_EDITED = ("inventory/sql/migrations/", "inventory/migrations/")
THIS = "tests/repo/test_tests_layout.py"  # its examples of stale references
# a path under tests/ ending in .py, with the test it names after `::` if any
TEST_PATH = re.compile(r"(?<![\w/.])(tests/[\w/]+\.py)(?:::(\w+))?")
# a dotted module under tests, imported or named in a string (a processor module, a plugin)
TEST_MODULE = re.compile(r"(?:(?<=from )|(?<=import )|(?<=[\"',]))tests(?:\.\w+)+")
TABLE_ROW = re.compile(r"^\| `(\w+)/` \|", re.MULTILINE)


def _tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
    ).stdout.decode()
    return [
        name
        for name in listed.split("\0")
        if name and name != THIS and not name.startswith(NEVER_EDITED)
    ]


def _texts():
    for name in _tracked():
        try:
            yield name, (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (screenshots), files deleted in the work tree


def _defined_names(path: Path) -> set[str]:
    tree = parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _module_resolves(dotted: str) -> bool:
    """Some prefix of `dotted` is a module or package of the checkout; what follows it may be
    an attribute (`tests.support.worker_processors.test_gate`)."""
    path = ROOT
    for part in dotted.split("."):
        if (path / part).is_dir():
            path = path / part
            continue
        return (path / f"{part}.py").is_file()
    return (path / "__init__.py").is_file()


def stale_references(name: str, text: str) -> list[str]:
    """The test paths, tests and test modules `text` (the file `name`) names that do not exist."""
    found = []
    for match in TEST_PATH.finditer(text):
        path, test = ROOT / match.group(1), match.group(2)
        if not path.is_file():
            found.append(f"{name}: {match.group(0)}")
        elif test and test not in _defined_names(path):
            found.append(f"{name}: {match.group(0)}")
    if name.endswith((".py", ".toml", "Makefile", ".cfg")):
        for match in TEST_MODULE.finditer(text):
            if not _module_resolves(match.group(0)):
                found.append(f"{name}: {match.group(0)}")
    return found


def _is_test_module(dotted: str) -> bool:
    """`dotted` is a test module of the checkout: tests/.../test_*.py."""
    parts = dotted.split(".")
    return (
        parts[0] == "tests"
        and parts[-1].startswith("test_")
        and ROOT.joinpath(*parts[:-1], f"{parts[-1]}.py").is_file()
    )


def imported_test_modules(name: str, text: str) -> list[str]:
    """The test modules that `text` (the file `name`, under tests/) imports, in any form and at
    any depth: `import tests.a.test_b`, `from tests.a.test_b import c`, `from tests.a import
    test_b`, and the relative forms."""
    found = []
    for node in ast.walk(parse(text)):
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = list(Path(name).parent.parts)
            if node.level > 1:
                package = package[: len(package) - (node.level - 1)]
            base = ".".join([*(package if node.level else []), *filter(None, [node.module])])
            named = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [f"{name}:{node.lineno}: {dotted}" for dotted in named if _is_test_module(dotted)]
    return found


def test_no_test_module_lies_directly_under_tests():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_every_folder_with_python_is_a_package_that_says_what_goes_there():
    found = []
    for folder in sorted(p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        if not any(folder.glob("*.py")):
            continue  # data (tests/sql/fixtures)
        init = folder / "__init__.py"
        if not init.is_file() or not ast.get_docstring(parse(init.read_text())):
            found.append(str(folder.relative_to(ROOT)))
    assert found == []


def test_the_readme_names_every_folder_and_no_other():
    listed = TABLE_ROW.findall((TESTS / "README.md").read_text(encoding="utf-8"))
    folders = sorted(
        p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
    )
    assert sorted(listed) == folders


def test_every_test_path_the_repository_names_exists():
    found = []
    for name, text in _texts():
        found += stale_references(name, text)
    assert found == []


def test_the_check_finds_a_stale_path_a_missing_test_and_a_stale_module():
    readme = "tests/README.md"
    assert stale_references(readme, "see tests/test_security_sql.py") == [
        f"{readme}: tests/test_security_sql.py"
    ]
    assert stale_references(readme, "tests/security/test_sql.py::test_nothing_of_that_name") != []
    assert (
        stale_references(
            readme, "tests/security/test_sql.py::test_editing_a_job_to_a_refused_query_is_a_400"
        )
        == []
    )
    assert stale_references("x.py", 'MODULES = "tests.worker_processors"') != []
    assert stale_references("x.py", 'MODULES = "tests.support.worker_processors.test_gate"') == []
    assert stale_references("x.py", "from tests.chaos.conftest import CHAOS_MODULES") == []
    assert stale_references("x.py", "import tests.worker_fixtures") != []
    assert stale_references("x.py", "tests.check_it(spark)  # a local name") == []


def test_no_module_under_tests_imports_a_test_module():
    """A helper or fixture two test modules share lives in tests/support/ (tests/README.md):
    importing it from a test module ties the two modules together and registers the other
    module's fixtures by accident."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        found += imported_test_modules(
            str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
        )
    assert found == []


def test_the_import_check_finds_a_test_module_in_every_form():
    name = "tests/sinks/test_new.py"
    for text in (
        "import tests.security.test_sql",
        "from tests.security.test_sql import helper",
        "from tests.security import test_sql",
        "def f():\n    from tests.security.test_sql import helper as h\n",
        "from ..security.test_sql import helper",
    ):
        assert imported_test_modules(name, text) != [], text
    assert imported_test_modules("tests/security/test_new.py", "from .test_sql import x") != []
    assert imported_test_modules("tests/security/test_new.py", "from . import test_sql") != []
    for text in (
        "from tests.support.files_job import drain",
        "from tests.support import files_job",
        "import tests.support.worker_processors",
        "from tests.chaos.conftest import drive",
        "from tests.support.factories import test_named_like_a_test",
        "from tests.security.test_not_a_module import x",
    ):
        assert imported_test_modules(name, text) == [], text
