"""Nothing in the repository sends a reader outside it: the design lives in docs/design.md, and no
tracked file (code, comments, docs, templates, tests) names a design document or a folder beside
the checkout that a clone from a forge would not have."""

import re
import subprocess
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
OUTSIDE = re.compile(r"\.\./shared|DESIGN\.md|/work/(shared|main|wt)\b")
# applied migration files are never edited (inventory/sql/README.md); the baseline's comment says
# "DESIGN.md", which docs/design.md says is its old name
NEVER_EDITED = {"inventory/sql/migrations/0001_baseline.sql"}
THIS = "tests/repo/test_references.py"
# tests that read test data kept beside the checkout (the sample tables of ../shared/data): their
# fixture's path is where the data is, not a page sent to a reader
TEST_DATA = {"tests/sources/test_hudi.py", "tests/support/hudi_samples.py"}
TEST_DATA_PATH = re.compile(r"\.\./shared\b")


def _tracked() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout.decode()
        return [name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):  # an export without .git: walk it
        skip = {".git", ".venv", "var", "node_modules", "__pycache__"}
        return [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]


def test_no_tracked_file_refers_outside_the_repository():
    found = []
    for name in _tracked():
        if name in NEVER_EDITED or name == THIS:
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (screenshots), files deleted in the work tree
        for number, line in enumerate(text.splitlines(), 1):
            if name in TEST_DATA and TEST_DATA_PATH.search(line) and "DESIGN" not in line:
                continue
            if OUTSIDE.search(line):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert found == []


def test_the_design_is_in_the_repository_and_the_readme_links_it():
    design = (ROOT / "docs" / "design.md").read_text()
    for heading in ("## Concepts", "## Invariants", "## Public contract"):
        assert heading in design
    assert "(docs/design.md)" in (ROOT / "README.md").read_text()


def test_the_check_catches_a_reference_outside():
    assert OUTSIDE.search("see ../shared/DESIGN.md")
    assert OUTSIDE.search("(DESIGN.md, invariant 10)")
    assert not OUTSIDE.search("(docs/design.md, invariant 10)")
