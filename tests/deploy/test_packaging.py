"""`make` installs the project and the example processor package in editable mode without
setuptools' warning box ("Please be careful with folders in your working directory with the same
name as your package"), which it prints for its import-hook strategy: both projects declare their
top-level layout (package-dir), so setuptools picks a plain .pth file on the project's folder."""

import subprocess
import sys

import pytest

from tests.support.worker_fixtures import ROOT

# what pip's build backend decides for `pip install -e`, asked of the installed setuptools
STRATEGY = """
import os
from setuptools.command.editable_wheel import editable_wheel
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

dist = apply_configuration(Distribution(), "pyproject.toml")
command = editable_wheel(dist)
command.ensure_finalized()
strategy = command._select_strategy(dist.get_name(), "py3-none-any", "build/lib")
print(type(strategy).__name__, *[os.fspath(p) for p in getattr(strategy, "path_entries", [])])
"""


@pytest.mark.parametrize("project", [ROOT, ROOT / "examples" / "tidemark-example-processors"])
def test_an_editable_install_is_a_pth_file_on_the_project_folder(project):
    done = subprocess.run(
        [sys.executable, "-c", STRATEGY],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    name, *paths = done.stdout.split()
    assert name == "_StaticPth", done.stdout  # not _TopLevelFinder, whose exit warns
    assert [str(project.joinpath(p).resolve()) for p in paths] == [str(project.resolve())]
