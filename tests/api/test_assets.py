"""connectors/{name}/discover/ (look now) and connectors/{name}/assets/ (producers announce files),
and jobs/{name}/run/ discovering before it plans."""

import os
import threading

import pytest
from django.conf import settings
from django.db import connection

from inventory.models import Asset, Batch, ConnectorState
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory, make_job

pytestmark = pytest.mark.django_db


def _landing(tmp_path, name="landing"):
    folder = tmp_path / name
    folder.mkdir()
    return ConnectorFactory(name=name, config={"path": str(folder)}), folder


# ---- discover/ ---------------------------------------------------------------------------------


def test_discover_registers_files_that_landed_since_the_last_scan(role_users, tmp_path):
    connector, folder = _landing(tmp_path)
    api = token_client(role_users["operator"])
    (folder / "a.parquet").write_bytes(b"x" * 10)
    (folder / "b.csv").write_bytes(b"y" * 3)

    first = api.post(f"/api/v1/connectors/{connector.name}/discover/")
    assert first.status_code == 200, first.content
    assert first.json() == {"connector": connector.name, "registered": 2}
    assert sorted(Asset.objects.filter(connector=connector).values_list("weight", flat=True)) == [
        3,
        10,
    ]

    again = api.post(f"/api/v1/connectors/{connector.name}/discover/")
    assert again.json()["registered"] == 0
    (folder / "c.json").write_text("{}")
    assert api.post(f"/api/v1/connectors/{connector.name}/discover/").json()["registered"] == 1


def test_a_file_whose_location_cannot_be_stored_does_not_stop_the_others(
    role_users, tmp_path, caplog
):
    # a name that is not UTF-8 (Latin-1 "café") or a path longer than the unique index takes
    # made every discovery of the connector a 500: no file of it was registered any more
    connector, folder = _landing(tmp_path)
    (folder / "ok.json").write_text("{}")
    os.utime(folder / "ok.json", (1, 1))
    latin1 = os.path.join(os.fsencode(folder), b"caf\xe9.json")
    with open(latin1, "wb") as out:
        out.write(b"{}")
    os.utime(latin1, (1, 1))
    deep = folder.joinpath(*[c * 240 for c in "abcdefghijkl"])
    deep.mkdir(parents=True)
    (deep / "f.json").write_text("{}")
    os.utime(deep / "f.json", (1, 1))
    api = token_client(role_users["operator"])
    with caplog.at_level("WARNING"):
        response = api.post(f"/api/v1/connectors/{connector.name}/discover/")
    assert response.status_code == 200, response.content
    assert response.json()["registered"] == 1
    assert list(Asset.objects.filter(connector=connector).values_list("location", flat=True)) == [
        str(folder / "ok.json")
    ]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "caf\\udce9.json" in warned and "not UTF-8" in warned, warned
    assert "bytes" in warned and "f.json" in warned, warned


def test_discover_needs_the_operator_role(role_users, tmp_path):
    connector, folder = _landing(tmp_path)
    (folder / "a.parquet").write_bytes(b"x")
    assert token_client(None).post(
        f"/api/v1/connectors/{connector.name}/discover/"
    ).status_code in (
        401,
        403,
    )
    viewer = token_client(role_users["viewer"]).post(
        f"/api/v1/connectors/{connector.name}/discover/"
    )
    assert viewer.status_code == 403
    assert not Asset.objects.filter(connector=connector).exists()


def test_discover_of_a_paused_connector_or_a_vanished_directory_is_refused(role_users, tmp_path):
    connector, folder = _landing(tmp_path)
    api = token_client(role_users["operator"])
    connector.state = ConnectorState.PAUSED
    connector.save(update_fields=["state"])
    paused = api.post(f"/api/v1/connectors/{connector.name}/discover/")
    assert paused.status_code == 409 and "paused" in paused.content.decode()

    connector.state = ConnectorState.ACTIVE
    connector.save(update_fields=["state"])
    folder.rmdir()
    gone = api.post(f"/api/v1/connectors/{connector.name}/discover/")
    assert gone.status_code == 400
    assert "config.path" in gone.json()
    assert "does not exist" in str(gone.json()["config.path"])


def test_run_of_a_files_job_discovers_first(
    role_users, tmp_path, django_capture_on_commit_callbacks
):
    connector, folder = _landing(tmp_path)
    job = make_job(connector=connector, name="eager", batch_weight=100, max_items=10)
    (folder / "just-landed.parquet").write_bytes(b"x" * 5)

    with django_capture_on_commit_callbacks(execute=False):
        response = token_client(role_users["operator"]).post(f"/api/v1/jobs/{job.name}/run/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert len(body["planned"]) == 1, body
    batch = Batch.objects.get(pk=body["planned"][0])
    asset = Asset.objects.get(connector=connector)
    assert asset.location.endswith("just-landed.parquet")
    assert batch.span.lower <= asset.pk < batch.span.upper


# ---- assets/ -----------------------------------------------------------------------------------


def test_a_producer_registers_files_in_the_order_given_idempotently(role_users):
    # relative locations lie inside the connector's directory
    connector = ConnectorFactory(name="announced", config={"path": str(settings.DATA_DIR / "in")})
    api = token_client(role_users["operator"])
    items = [
        {"location": "landing/2026/01/part-2.parquet", "weight": 200, "extra": {"etag": "b"}},
        {"location": "landing/2026/01/part-1.parquet", "weight": 100},
        {"location": "landing/2026/01/part-3.parquet"},
    ]
    first = api.post(
        f"/api/v1/connectors/{connector.name}/assets/", {"assets": items}, format="json"
    )
    assert first.status_code == 200, first.content
    body = first.json()
    assert (body["registered"], body["known"]) == (3, 0)
    ids = [entry["id"] for entry in body["assets"]]
    assert ids == sorted(ids)  # ids follow the order the producer gave
    assert [entry["location"] for entry in body["assets"]] == [i["location"] for i in items]
    # stored as discovery would find them: inside the connector's directory, absolute
    base = connector.config["path"]
    stored = {a.location: a for a in Asset.objects.filter(connector=connector)}
    assert stored[f"{base}/landing/2026/01/part-2.parquet"].extra == {"etag": "b"}
    assert stored[f"{base}/landing/2026/01/part-3.parquet"].weight == 1

    more = items + [{"location": "landing/2026/01/part-4.parquet", "weight": 7}]
    second = api.post(
        f"/api/v1/connectors/{connector.name}/assets/", {"assets": more}, format="json"
    )
    body = second.json()
    assert (body["registered"], body["known"]) == (1, 3)
    assert [entry["id"] for entry in body["assets"][:3]] == ids  # known locations keep their id
    assert body["assets"][3]["id"] > ids[-1]
    assert body["assets"][3]["id"] == ids[-1] + 1  # no id spent on the known locations
    assert Asset.objects.filter(connector=connector).count() == 4


def test_one_file_is_one_asset_however_its_location_is_spelled(role_users, tmp_path):
    # a producer announcing a file discovery registered (or itself announced) under another
    # spelling got a second id for it: the file was read twice and its rows written twice
    connector, folder = _landing(tmp_path)
    (folder / "a.parquet").write_bytes(b"x" * 10)
    api = token_client(role_users["operator"])
    assert api.post(f"/api/v1/connectors/{connector.name}/discover/").json()["registered"] == 1
    discovered = Asset.objects.get(connector=connector)
    url = f"/api/v1/connectors/{connector.name}/assets/"
    spellings = ["a.parquet", "./a.parquet", f"{folder}//a.parquet", "sub/../a.parquet"]
    for spelling in spellings:
        response = api.post(url, {"assets": [{"location": spelling}]}, format="json")
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["registered"], body["known"]) == (0, 1), (spelling, body)
        assert body["assets"] == [{"location": spelling, "id": discovered.pk}]
    new = api.post(url, {"assets": [{"location": "./b.parquet"}]}, format="json").json()
    again = api.post(url, {"assets": [{"location": "b.parquet"}]}, format="json").json()
    assert (again["registered"], again["known"]) == (0, 1)
    assert again["assets"][0]["id"] == new["assets"][0]["id"]
    both = api.post(
        url, {"assets": [{"location": "c.parquet"}, {"location": "./c.parquet"}]}, format="json"
    )
    assert both.status_code == 400 and "repeats" in str(both.json()["assets[1].location"])
    assert sorted(Asset.objects.filter(connector=connector).values_list("location", flat=True)) == [
        f"{folder}/a.parquet",
        f"{folder}/b.parquet",
    ]
    # a location stored as it was given, before announcements were stored canonically
    from inventory.services.assets import assets_register

    assets_register(connector=connector, items=[("old/x.parquet", 1, {})])
    legacy = Asset.objects.get(connector=connector, location="old/x.parquet")
    kept = api.post(url, {"assets": [{"location": "old/x.parquet"}]}, format="json").json()
    assert kept["known"] == 1 and kept["assets"][0]["id"] == legacy.pk


def test_a_location_too_long_for_the_index_is_a_400_not_a_500(role_users, tmp_path):
    # 3,800 characters that do not compress passed the length check (4,096) and broke the
    # unique index on (connector, location): "index row size exceeds btree maximum 2704"
    import random
    import string

    connector, folder = _landing(tmp_path)
    rng = random.Random(1)
    parts = ["".join(rng.choice(string.ascii_letters) for _ in range(200)) for _ in range(19)]
    url = f"/api/v1/connectors/{connector.name}/assets/"
    api = token_client(role_users["operator"])
    response = api.post(url, {"assets": [{"location": "/".join(parts)}]}, format="json")
    assert response.status_code == 400, response.content
    assert "bytes" in response.json()["assets[0].location"][0]
    # what fits, as stored (the connector's directory in front), is registered
    fits = "/".join(parts)[: 2000 - len(str(folder))]
    assert api.post(url, {"assets": [{"location": fits}]}, format="json").status_code == 200
    assert Asset.objects.filter(connector=connector).count() == 1


@pytest.mark.parametrize(
    ("payload", "field", "reason"),
    [
        ({}, "assets", "required"),
        ({"assets": []}, "assets", "non-empty"),
        ({"assets": [{"location": "a", "weight": 1}, "b"]}, "assets[1]", "object"),
        (
            {"assets": [{"location": "a"}, {"location": "b", "weight": -3}]},
            "assets[1].weight",
            "between 0",
        ),
        ({"assets": [{"location": "a", "weight": "12"}]}, "assets[0].weight", "integer"),
        ({"assets": [{"location": "a", "weight": True}]}, "assets[0].weight", "integer"),
        ({"assets": [{"location": ""}]}, "assets[0].location", "non-empty"),
        ({"assets": [{"weight": 4}]}, "assets[0].location", "non-empty"),
        ({"assets": [{"location": "a"}, {"location": "a"}]}, "assets[1].location", "repeats"),
        ({"assets": [{"location": "a", "extra": [1]}]}, "assets[0].extra", "object"),
        ({"assets": [{"location": "a", "size": 3}]}, "assets[0].size", "unknown key; an asset"),
        # shown on pages and printed by the CLI as they are
        (
            {"assets": [{"location": "a"}, {"location": "h\x1b[31m.parquet"}]},
            "assets[1].location",
            "U+001B",
        ),
        ({"assets": [{"location": "g\u202egnp.parquet"}]}, "assets[0].location", "U+202E"),
        ({"assets": [{"location": "sub/"}]}, "assets[0].location", "directory"),
    ],
)
def test_a_bad_element_is_a_400_naming_it_and_registers_nothing(role_users, payload, field, reason):
    connector = ConnectorFactory(name="strict")
    response = token_client(role_users["operator"]).post(
        f"/api/v1/connectors/{connector.name}/assets/", payload, format="json"
    )
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert reason in str(errors[field])
    assert not Asset.objects.filter(connector=connector).exists()


def test_registering_needs_the_operator_role_and_a_directory_connector(role_users):
    connector = ConnectorFactory(name="guarded")
    body = {"assets": [{"location": "x.parquet", "weight": 1}]}
    viewer = token_client(role_users["viewer"])
    assert (
        viewer.post(f"/api/v1/connectors/{connector.name}/assets/", body, format="json").status_code
        == 403
    )
    anonymous = token_client(None)
    assert anonymous.post(
        f"/api/v1/connectors/{connector.name}/assets/", body, format="json"
    ).status_code in (
        401,
        403,
    )
    assert not Asset.objects.filter(connector=connector).exists()

    operator = token_client(role_users["operator"])
    assert operator.post("/api/v1/connectors/nope/assets/", body, format="json").status_code == 404
    connector.state = ConnectorState.COMPLETED
    connector.save(update_fields=["state"])
    closed = operator.post(f"/api/v1/connectors/{connector.name}/assets/", body, format="json")
    assert closed.status_code == 409 and "completed" in closed.content.decode()


@pytest.mark.django_db(transaction=True)
def test_concurrent_producers_get_ids_in_visibility_order(role_users):
    """Four producers announce at once while a reader resumes after the highest id it has seen
    (as a job resumes after its watermark): the reader must end up having seen every asset."""
    connector = ConnectorFactory(name="busy")
    operator = role_users["operator"]
    producers, per_producer, chunk = 4, 15, 3
    seen: set[int] = set()
    done = threading.Event()
    errors: list = []

    def produce(n: int):
        try:
            api = token_client(operator)
            for k in range(per_producer):
                items = [{"location": f"p{n}/f{k}-{j}", "weight": 1} for j in range(chunk)]
                response = api.post(
                    f"/api/v1/connectors/{connector.name}/assets/", {"assets": items}, format="json"
                )
                assert response.status_code == 200, response.content
        except BaseException as exc:  # reported in the test thread
            errors.append(exc)
        finally:
            connection.close()

    def read():
        last = 0
        try:
            while True:
                finished = done.is_set()
                fresh = list(
                    Asset.objects.filter(connector=connector, pk__gt=last)
                    .order_by("pk")
                    .values_list("pk", flat=True)
                )
                if fresh:
                    seen.update(fresh)
                    last = fresh[-1]
                if finished:
                    return
        finally:
            connection.close()

    reader = threading.Thread(target=read)
    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()

    assert not errors, errors
    everything = set(Asset.objects.filter(connector=connector).values_list("pk", flat=True))
    assert len(everything) == producers * per_producer * chunk
    assert everything - seen == set()  # nothing committed behind the reader's back


def test_run_still_plans_registered_files_when_discovery_fails_and_says_why(
    role_users, tmp_path, django_capture_on_commit_callbacks
):
    connector, folder = _landing(tmp_path)
    job = make_job(connector=connector, name="resilient", batch_weight=100, max_items=10)
    (folder / "early.parquet").write_bytes(b"x" * 5)
    token_client(role_users["operator"]).post(f"/api/v1/connectors/{connector.name}/discover/")
    (folder / "early.parquet").unlink()
    folder.rmdir()

    with django_capture_on_commit_callbacks(execute=False):
        body = token_client(role_users["operator"]).post(f"/api/v1/jobs/{job.name}/run/").json()
    assert len(body["planned"]) == 1
    assert "discovery failed" in body["reason"] and "does not exist" in body["reason"]
