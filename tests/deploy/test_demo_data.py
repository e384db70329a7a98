"""The demo's order events are dated relative to when the demo runs, so a job that processed them
is minutes behind in source time (the dashboard's "caught up" and its time lag agree), not months
as with fixed dates."""

from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from inventory.management.commands._demo_orders import DAYS, day_one, write_orders
from tests.support.factories import ConnectorFactory, make_job


def test_day_one_is_the_demos_days_before_the_current_hour():
    now = datetime(2026, 12, 6, 4, 27, 13, tzinfo=UTC)
    assert day_one(now) == datetime(2026, 12, 2, 4, 27, tzinfo=UTC)
    assert DAYS == 4


def test_the_demos_events_end_just_before_now_and_none_lies_ahead(tmp_path):
    start = day_one()
    first = write_orders(tmp_path, first_day=1, days=3, start=start)
    later = write_orders(tmp_path, first_day=4, days=1, start=start, renames=True)
    assert len(first) == 6 and len(later) == 2
    assert len({p.name for p in first + later}) == 8  # every file its own name
    times = [t for p in first + later for t in pq.read_table(p)["event_time"].to_pylist()]
    now = datetime.now(UTC)
    newest, oldest = max(times), min(times)
    assert newest <= now  # no event in the future
    # the newest event is minutes old: a job that committed it is minutes behind
    assert now - newest < timedelta(minutes=5)
    assert now - oldest <= timedelta(days=DAYS, hours=1)
    # the first files are older than the ones that arrive later
    first_newest = max(t for p in first for t in pq.read_table(p)["event_time"].to_pylist())
    assert first_newest < min(t for p in later for t in pq.read_table(p)["event_time"].to_pylist())
    assert str(now.year) in later[-1].name


@pytest.mark.django_db
def test_a_users_job_on_a_demo_connector_stops_the_demo_with_one_line_naming_it():
    from django.core.management.base import CommandError

    from inventory.management.commands.demo import CONNECTOR, refuse_foreign_dependents

    connector = ConnectorFactory(name=CONNECTOR)
    make_job(connector=connector, name="demo-orders-hourly")  # the demo's own: no reason to stop
    refuse_foreign_dependents()
    make_job(connector=connector, name="my-copy")
    with pytest.raises(CommandError) as refused:
        refuse_foreign_dependents()
    message = str(refused.value)
    assert "\n" not in message
    assert "job my-copy use(s) the demo's pipeline" in message
    assert "tidemark jobs delete my-copy" in message
    # the way out that needs no running server comes first
    assert "TIDEMARK_DEMO_DELETE_DEPENDENTS=1 make demo" in message


@pytest.mark.django_db
def test_the_demo_deletes_a_users_dependents_when_asked_and_nothing_else():
    from django.core.management.base import CommandError

    from inventory.management.commands.demo import (
        CONNECTOR,
        delete_foreign_dependents,
        foreign_dependents,
    )
    from inventory.models import BatchStatus, Connector, ConnectorKind, Job
    from inventory.services import lifecycle
    from tests.support.factories import make_assets

    demo = ConnectorFactory(name=CONNECTOR)
    make_job(connector=demo, name="demo-orders-hourly")
    mine = make_job(connector=demo, name="my-copy", batch_weight=10, max_items=1)
    reader = ConnectorFactory(
        name="my-reader", kind=ConnectorKind.JOB_OUTPUT, config={"job": "demo-orders-hourly"}
    )
    make_job(connector=reader, name="my-downstream")
    unrelated = make_job(name="unrelated")
    make_assets(demo, [10])
    running = lifecycle.batch_acquire(job=mine, worker="w")
    said = []
    with pytest.raises(CommandError, match="cannot delete job my-copy: batch .* is running"):
        delete_foreign_dependents(said.append)
    assert Job.objects.filter(name="my-copy").exists()

    lifecycle.batch_cancel(batch_id=running.pk, actor="test")
    assert running.__class__.objects.get(pk=running.pk).status == BatchStatus.CANCELLED
    delete_foreign_dependents(said.append)
    assert said == [
        "deleted job my-copy, which used the demo's pipeline",
        "deleted connector my-reader and its job(s) my-downstream, which used the demo's pipeline",
    ]
    assert foreign_dependents() == []
    assert not Connector.objects.filter(name="my-reader").exists()
    assert set(Job.objects.values_list("name", flat=True)) == {"demo-orders-hourly", unrelated.name}
