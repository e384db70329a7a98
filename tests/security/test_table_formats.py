"""What a hostile user may name through a `hudi` or `iceberg` connector or an Iceberg sink
(issue 46): paths outside the allowed roots or in Tidemark's own folders, links in a table's
metadata leading outside the table, a catalog that is not one, a catalog row pointing at a
metadata file anywhere, odd catalog names and table identifiers. Each is a 400 naming the field,
with the same message whether an outside file exists or not."""

import shutil
import sqlite3

import pytest

from inventory.services import discovery
from inventory.services.connectors import connector_create
from inventory.services.errors import InvalidInput
from inventory.services.job_config import job_validate_runtime
from tests.support.api_support import token_client
from tests.support.hudi_samples import sample
from tests.support.iceberg_lake import Lake, arrow_rows
from workers.spark.errors import ReadError
from workers.spark.hudi_files import metadata_confined

pytestmark = pytest.mark.django_db(transaction=True)


def _post(api, kind: str, config):
    return api.post(
        "/api/v1/connectors/", {"name": "hostile", "kind": kind, "config": config}, format="json"
    )


def _refused(response, field: str) -> str:
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    return str(response.json()[field])


# ---- hudi --------------------------------------------------------------------------------------


def test_links_in_a_hudi_tables_metadata_leading_outside_the_table_are_refused(
    role_users, tmp_path
):
    """`.hoodie` itself, hoodie.properties or a timeline file as a link to another table's (or
    any) file outside the table: hudi-rs would follow it, so the table is refused before it is
    opened, on save, on discovery and on the worker, whether the target exists or not."""
    api = token_client(role_users["admin"])
    elsewhere = sample(tmp_path / "elsewhere", "sample_table/cow/v8_nonpartitioned")

    linked_folder = tmp_path / "linked-folder"
    linked_folder.mkdir()
    (linked_folder / ".hoodie").symlink_to(elsewhere / ".hoodie")
    messages = [_refused(_post(api, "hudi", {"path": str(linked_folder)}), "config.path")]

    for target in (elsewhere / ".hoodie" / "hoodie.properties", tmp_path / "missing"):
        table = sample(tmp_path / f"props-{target.name}", "sample_table/cow/v8_nonpartitioned")
        props = table / ".hoodie" / "hoodie.properties"
        props.unlink()
        props.symlink_to(target)
        message = _refused(_post(api, "hudi", {"path": str(table)}), "config.path")
        messages.append(message.replace(str(table), "<table>"))
    assert all("link leading outside the table directory" in m for m in messages), messages
    assert messages[1] == messages[2]  # an existing target and a missing one alike

    # a link added to the timeline after the connector was saved: discovery and the worker
    table = sample(tmp_path / "later", "sample_table/cow/v8_nonpartitioned")
    connector = connector_create(name="later", kind="hudi", config={"path": str(table)})
    timeline = table / ".hoodie" / "timeline"
    instant = sorted(p for p in (elsewhere / ".hoodie" / "timeline").iterdir() if p.is_file())[0]
    (timeline / f"99{instant.name}").symlink_to(instant)
    with pytest.raises(InvalidInput) as refused:
        discovery.discover(connector)
    assert refused.value.field == "config.path"
    assert "outside the table directory" in refused.value.message
    with pytest.raises(ReadError, match="link leading outside the table directory"):
        metadata_confined(str(table))
    # a link that stays inside the table is fine
    (timeline / f"99{instant.name}").unlink()
    (table / ".hoodie" / "inside").symlink_to(table / ".hoodie" / "hoodie.properties")
    metadata_confined(str(table))
    assert discovery.discover(connector) == 2


def test_a_hudi_path_in_tidemarks_own_folders_outside_the_roots_or_not_a_table_is_a_400(
    role_users, tmp_path, settings
):
    api = token_client(role_users["admin"])
    own = tmp_path / "data" / "pg"
    settings.TIDEMARK_OWN_DIRECTORIES = [str(own)]
    table = sample(tmp_path, "sample_table/cow/v8_nonpartitioned")
    shutil.copytree(table, own)
    for path, says in [
        (str(own), "Tidemark's own"),
        ("/etc", "outside the directories"),
        (str(table) + "/..", "not a Hudi table"),
        (str(table / ".hoodie"), "not a Hudi table"),
        ("relative/table", "absolute directory"),
        (7, "absolute directory"),
    ]:
        assert says in _refused(_post(api, "hudi", {"path": path}), "config.path"), path
    for archived in ("FAIL", ["fail"], None):
        _refused(_post(api, "hudi", {"path": str(table), "archived": archived}), "config.archived")


# ---- iceberg -----------------------------------------------------------------------------------


def test_an_iceberg_catalog_file_in_tidemarks_own_folders_or_not_a_catalog_is_a_400(
    role_users, tmp_path, settings
):
    api = token_client(role_users["admin"])
    lake = Lake(tmp_path / "lake")
    lake.table.append(arrow_rows([1]))
    own = tmp_path / "data" / "pg"
    settings.TIDEMARK_OWN_DIRECTORIES = [str(own)]
    own.mkdir(parents=True)
    shutil.copy(tmp_path / "lake" / "catalog.db", own / "catalog.db")
    (tmp_path / "link.db").symlink_to(own / "catalog.db")
    (tmp_path / "text.db").write_text("not a database")
    sqlite3.connect(tmp_path / "empty.db").close()
    for uri, field, says in [
        (f"sqlite:///{own}/catalog.db", "config.catalog_uri", "Tidemark's own"),
        (f"sqlite:///{tmp_path}/link.db", "config.catalog_uri", "Tidemark's own"),
        (f"sqlite:///{tmp_path}/text.db", "config.catalog_uri", "not a usable Iceberg catalog"),
        (f"sqlite:///{tmp_path}/lake", "config.catalog_uri", "not a catalog file"),
        (f"sqlite:///{tmp_path}/lake/catalog.db?mode=ro", "config.catalog_uri", "absolute"),
        (f"sqlite:///{tmp_path}/empty.db", "config.table", "has no table ns.t"),
    ]:
        response = _post(api, "iceberg", {**lake.config, "catalog_uri": uri})
        message = _refused(response, field)
        assert says in message, (uri, message)
        assert "\n" not in response.json()[field][0]  # one line, for the CLI too
    # an Iceberg sink's catalog file or warehouse there neither (it would create them)
    sink = {
        "kind": "iceberg",
        "catalog_uri": f"sqlite:///{tmp_path}/sink/catalog.db",
        "warehouse": str(tmp_path / "sink" / "warehouse"),
        "table": "out.t",
    }
    job_validate_runtime(sink=sink)
    for key, value in [
        ("catalog_uri", f"sqlite:///{own}/sink.db"),
        ("catalog_uri", f"sqlite:///{tmp_path}/link.db"),
        ("warehouse", str(own / "warehouse")),
    ]:
        with pytest.raises(InvalidInput) as refused:
            job_validate_runtime(sink={**sink, key: value})
        assert refused.value.field == f"sink.{key}"
        assert "Tidemark's own" in refused.value.message
    assert not (own / "sink.db").exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("catalog_name", "na me"),
        ("catalog_name", "x'y"),
        ("catalog_name", "ü"),
        ("catalog_name", "tidemark\n"),
        ("catalog_name", "a" * 64),
        ("catalog_name", None),
        ("table", "ns.t.x"),
        ("table", "ns..t"),
        ("table", ".t"),
        ("table", "ns.t\n"),
        ("table", "ns.ü"),
        ("table", "ns/x.t"),
        ("table", "ns.t; drop table x"),
        ("table", ["ns", "t"]),
        ("table", "NS.t"),  # an identifier, but not this catalog's
        ("expired", "FAIL"),
        ("expired", ["fail"]),
        ("warehouse", "/etc"),
        ("warehouse", 5),
    ],
)
def test_odd_iceberg_catalog_names_and_table_identifiers_are_a_400_naming_the_key(
    role_users, tmp_path, key, value
):
    api = token_client(role_users["admin"])
    lake = Lake(tmp_path / "lake")
    _refused(_post(api, "iceberg", {**lake.config, key: value}), f"config.{key}")


def test_a_catalog_row_pointing_at_a_metadata_file_outside_the_table_is_refused_unread(
    role_users, tmp_path
):
    """The catalog's row holds the metadata file's location, which anyone who can write the
    catalog may set: another table's metadata outside the allowed roots or outside the table,
    a file on an object store. It is refused before pyiceberg opens it, the same message
    whether the file exists or not."""
    api = token_client(role_users["admin"])
    lake = Lake(tmp_path / "lake")
    lake.table.append(arrow_rows([1]))
    catalog = tmp_path / "lake" / "catalog.db"

    def point(location: str) -> str:
        with sqlite3.connect(catalog) as db:
            db.execute("UPDATE iceberg_tables SET metadata_location = ?", [location])
        return _refused(_post(api, "iceberg", lake.config), "config.table")

    real = lake.table.metadata_location
    outside = [point("/etc/hostname"), point("/etc/no-such.metadata.json")]
    assert all("outside the directories" in m for m in outside), outside
    assert outside[0].replace("hostname", "x") == outside[1].replace("no-such.metadata.json", "x")
    # inside the allowed roots but outside the table's location: a copy of its metadata (or
    # any file) elsewhere, which the table's own location does not hold
    copy = tmp_path / "elsewhere" / "v9.metadata.json"
    copy.parent.mkdir()
    shutil.copy(real.removeprefix("file://"), copy)
    assert "its metadata names a file outside the table's location" in point(str(copy))
    assert "not a local file" in point("s3://bucket/t/metadata/v1.metadata.json")
    # (another table's metadata file, in its own location, is that table, which the config may
    # name anyway)
    with sqlite3.connect(catalog) as db:
        db.execute("UPDATE iceberg_tables SET metadata_location = ?", [real])
    assert _post(api, "iceberg", lake.config).status_code == 201


def test_viewers_and_operators_cannot_create_or_feed_a_table_format_connector(role_users, tmp_path):
    """Creating a connector is an admin's; an operator may discover, never announce items (a
    forged instant or snapshot would be read as the table's); a viewer changes nothing."""
    table = sample(tmp_path, "sample_table/cow/v8_nonpartitioned")
    lake = Lake(tmp_path / "lake")
    lake.table.append(arrow_rows([1]))
    for role in ("viewer", "operator"):
        api = token_client(role_users[role])
        assert _post(api, "hudi", {"path": str(table)}).status_code == 403, role
        assert _post(api, "iceberg", lake.config).status_code == 403, role
    admin = token_client(role_users["admin"])
    for kind, config in (("hudi", {"path": str(table)}), ("iceberg", lake.config)):
        made = admin.post(
            "/api/v1/connectors/", {"name": kind, "kind": kind, "config": config}, format="json"
        )
        assert made.status_code == 201, made.content
        operator = token_client(role_users["operator"])
        assert operator.post(f"/api/v1/connectors/{kind}/discover/").status_code == 200
        item = {"location": f"{kind}@1", "weight": 1, "extra": {"instant": "1", "snapshot": 1}}
        forged = operator.post(
            f"/api/v1/connectors/{kind}/assets/", {"assets": [item]}, format="json"
        )
        assert forged.status_code == 400 and "kind" in forged.json(), forged.content
        viewer = token_client(role_users["viewer"])
        assert viewer.post(f"/api/v1/connectors/{kind}/discover/").status_code == 403
