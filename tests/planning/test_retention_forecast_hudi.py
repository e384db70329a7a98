"""The retention-breach forecast of a job on a Hudi table: the cleaner keeps
`hoodie.cleaner.commits.retained` commits, so a job that still needs an instant more than that
many commits behind the newest is losing data now, and one within it is not, while no commit is
being written. On a sample table written by Spark with Hudi (tests/support/hudi_samples.py)."""

import pytest

from inventory.models import Asset
from inventory.services import discovery
from inventory.services.connectors import connector_create
from inventory.services.retention_forecast import retention_forecast_refresh
from inventory.sources.hudi import retention as hudi_retention
from tests.support.factories import make_job
from tests.support.hudi_samples import sample

pytestmark = pytest.mark.django_db


def _retain(table, commits: int) -> None:
    properties = table / ".hoodie" / "hoodie.properties"
    lines = [
        line
        for line in properties.read_text().splitlines()
        if not line.startswith("hoodie.cleaner.commits.retained=")
    ]
    properties.write_text("\n".join([*lines, f"hoodie.cleaner.commits.retained={commits}"]) + "\n")


def test_a_job_further_behind_than_the_cleaner_keeps_is_losing_data_and_one_within_is_not(
    tmp_path,
):
    table = sample(tmp_path, "sample_table/cow/v9_txns_simple_overwrite")
    connector = connector_create(name="trips", kind="hudi", config={"path": str(table)})
    assert discovery.discover(connector) >= 3
    instants = list(Asset.objects.filter(connector=connector).order_by("id"))
    job = make_job(connector=connector, name="hudi-reader", start_position=instants[0].pk)

    _retain(table, 1)
    assert hudi_retention.commits_retained(str(table)) == 1
    behind = retention_forecast_refresh(job=job)
    assert (behind.verdict, behind.margin_seconds) == ("at_risk", 0.0)
    [cleaner] = behind.inputs["streams"]
    assert cleaner["cleaner_commits_retained"] == 1
    assert cleaner["needed_instant"] == instants[0].extra["instant"]

    _retain(table, 1000)
    within = retention_forecast_refresh(job=job)
    # the sample's commits are long past: nothing is written now, so nothing more is cleaned
    assert within.verdict == "no_loss"
    assert within.message == "no loss forecast within 30 d at current rates"
