"""Discovery's check for changed files, made at every look, reads only the flagged rows: the
partial index asset_changed_unrestated_idx holds exactly the assets flagged as changed after
registration and not yet restated, and the check's query is answered from it."""

import pytest
from django.db import connection

from inventory.models import Asset
from inventory.services import restatements
from inventory.services.assets import assets_register
from inventory.services.connectors import connector_create
from inventory.sql import gateway

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
