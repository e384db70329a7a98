"""Discovery's check for changed files, made at every look, reads only the flagged rows: the
partial index asset_changed_unrestated_idx holds exactly the assets flagged as changed after
registration and not yet restated, and the check's query is answered from it."""

import os
import time

import pytest
from django.db import connection

from inventory.models import Asset
from inventory.services import discovery, restatements
from inventory.services.assets import assets_register
from inventory.services.connectors import connector_create
from inventory.sql import gateway, query

pytestmark = pytest.mark.django_db

INDEX = "asset_changed_unrestated_idx"


def _connector(tmp_path, name, files=3_000):
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    connector = connector_create(name=name, kind="files", config={"path": str(folder)})
    items = [(f"{folder}/part-{n:05d}.parquet", 4, {"mtime_ns": n}) for n in range(files)]
    assets_register(connector=connector, items=items)
    return connector


def _ids(connector):
    return list(
        Asset.objects.filter(connector=connector).order_by("id").values_list("id", flat=True)
    )


def test_the_check_lists_flagged_assets_not_yet_restated_in_id_order(tmp_path):
    connector = _connector(tmp_path, "changed", files=20)
    other = _connector(tmp_path, "other", files=5)
    ids = _ids(connector)
    for pk in (ids[7], ids[2], ids[12]):
        assert gateway.asset_flag_changed(asset_id=pk, change={"size": 9, "mtime_ns": 1})
    gateway.asset_flag_changed(asset_id=_ids(other)[0], change={"size": 9, "mtime_ns": 1})
    gateway.restatement_files_restated(asset_ids=[ids[12]], backfill_ids=[])

    listed = list(restatements.changed_unrestated(connector))

    assert [pk for pk, _, _ in listed] == [ids[2], ids[7]]
    assert all(
        extra["changed_after_registration"] == {"size": 9, "mtime_ns": 1} for *_, extra in listed
    )


def test_the_index_is_partial_on_the_flag_and_not_restated():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = %s::regclass",
            [INDEX],
        )
        definition = cursor.fetchone()[0]
    assert "(connector_id, id) WHERE" in definition, definition
    assert "? 'changed_after_registration'" in definition, definition
    assert "NOT (extra ? 'restated'" in definition, definition


def test_the_look_s_check_reads_the_partial_index_not_the_connector_s_assets(tmp_path):
    connector = _connector(tmp_path, "planned")
    ids = _ids(connector)
    gateway.asset_flag_changed(asset_id=ids[100], change={"size": 1, "mtime_ns": 1})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE inventory_asset")

    plan = restatements.changed_unrestated(connector).explain()

    assert INDEX in plan, plan
    assert "Seq Scan" not in plan and "asset_connector_id_idx" not in plan, plan
    assert [pk for pk, _, _ in restatements.changed_unrestated(connector)] == [ids[100]]


def _changed(connector) -> bool:
    return gateway.assets_known_size(connector_id=connector.pk).changed


def test_the_look_s_first_statement_answers_the_check_from_the_partial_index(tmp_path):
    connector = _connector(tmp_path, "folded")
    other = _connector(tmp_path, "neighbour", files=5)
    ids = _ids(connector)
    gateway.asset_flag_changed(asset_id=_ids(other)[0], change={"size": 1, "mtime_ns": 1})
    assert not _changed(connector)  # another connector's flag is not this one's
    gateway.asset_flag_changed(asset_id=ids[100], change={"size": 1, "mtime_ns": 1})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE inventory_asset")
        cursor.execute("EXPLAIN " + query("assets_known_size"), {"connector": connector.pk})
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert INDEX in plan, plan
    assert "Seq Scan on inventory_asset" not in plan, plan
    assert _changed(connector)
    gateway.restatement_files_restated(asset_ids=[ids[100]], backfill_ids=[])
    assert not _changed(connector)  # restated: nothing left to restate


@pytest.fixture
def checks(monkeypatch):
    """The connectors whose look made the check for changed files to restate."""
    made = []
    real = restatements.changed_files_restate

    def spy(connector):
        made.append(connector.pk)
        return real(connector)

    monkeypatch.setattr(restatements, "changed_files_restate", spy)
    return made


def test_a_look_sends_the_check_only_when_its_first_statement_found_a_flag(tmp_path, checks):
    connector = _connector(tmp_path, "looked", files=20)
    ids = _ids(connector)
    assert discovery.discover(connector) == 0
    assert discovery.discover(connector) == 0
    assert checks == []  # nothing flagged: no statement beyond the look's first

    # flagged by another process between two looks: the next look restates it
    gateway.asset_flag_changed(asset_id=ids[3], change={"size": 1, "mtime_ns": 1})
    assert discovery.discover(connector) == 0
    assert checks == [connector.pk]
    assert restatements.RESTATED in Asset.objects.get(pk=ids[3]).extra
    assert discovery.discover(connector) == 0
    assert checks == [connector.pk]  # restated: the look after it asks nothing more


def test_a_file_the_recheck_flags_is_restated_by_the_same_look(tmp_path, checks):
    folder = tmp_path / "landing"
    folder.mkdir()
    data = folder / "orders.csv"
    data.write_bytes(b"x" * 8)
    past = time.time() - 600
    os.utime(data, (past, past))
    connector = connector_create(name="rewritten", kind="files", config={"path": str(folder)})
    assert discovery.discover(connector) == 1
    assert checks == []
    data.write_bytes(b"y" * 20)  # rewritten after its registration, within the recheck window
    os.utime(data, (past + 1, past + 1))

    assert discovery.discover(connector) == 0

    assert checks == [connector.pk]  # the look's first statement had found no flag
    extra = Asset.objects.get(connector=connector).extra
    assert extra["changed_after_registration"]["size"] == 20
    assert restatements.RESTATED in extra
