"""A pipelines file declares a job's freshness target; the schema refuses a bad one by its place,
and the plan compares it as any other job field (no server)."""

import pytest

from tidemark_cli import pipelines
from tidemark_cli.config import UsageError
from tidemark_cli.pipeline_file import load

FILE = """version: 1
jobs:
  - name: live
    connector: c
    batch_weight: 10
    freshness_target_seconds: {seconds}
    freshness_target_items: {items}
"""


def test_a_pipelines_file_declares_a_freshness_target(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(FILE.format(seconds=300, items="null"))
    (job,) = load(str(path)).jobs
    assert (job["freshness_target_seconds"], job["freshness_target_items"]) == (300, None)
    server = {
        "connector": "c",
        "batch_weight": 10,
        "freshness_target_seconds": 600,
        "freshness_target_items": None,
    }
    change = pipelines.job_change(job, server)
    assert change.action == "change"
    assert change.patch == {"freshness_target_seconds": 300}


@pytest.mark.parametrize(
    "seconds, items, where",
    [(0, 5, "freshness_target_seconds"), (60, -1, "freshness_target_items")],
)
def test_a_bad_freshness_target_is_refused_naming_where(tmp_path, seconds, items, where):
    path = tmp_path / "p.yaml"
    path.write_text(FILE.format(seconds=seconds, items=items))
    with pytest.raises(UsageError) as refused:
        load(str(path))
    assert f"jobs[0].{where}" in str(refused.value)
