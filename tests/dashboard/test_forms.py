"""The job form offers what it accepts: connectors and processors as lists, the sink kinds as a
choice with examples that save as they are, and the batch weight typed in its unit."""

import re

import pytest
from django.test import Client

from inventory.forms_edit import SINK_EXAMPLES, WeightField, exact_size
from inventory.models import Job
from tests.support.factories import ConnectorFactory, make_job
from workers.spark.sinks import SINK_KEYS, check_sink

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(role_users) -> Client:
    client = Client()
    client.force_login(role_users["admin"])
    return client


def _datalist(html: str, field: str) -> list[str]:
    found = re.search(rf'<input[^>]*name="{field}"[^>]*list="([^"]+)"', html)
    assert found, f"no list for {field}"
    body = re.search(rf'<datalist id="{found.group(1)}">(.*?)</datalist>', html, re.S).group(1)
    return re.findall(r'<option value="([^"]*)">', body)


def test_the_job_form_lists_connectors_processors_and_sink_kinds(admin):
    ConnectorFactory(name="orders-landing")
    ConnectorFactory(name="clicks-landing")
    html = admin.get("/new/job/").content.decode()
    assert _datalist(html, "connector") == ["clicks-landing", "orders-landing"]
    processors = _datalist(html, "processor")
    assert "passthrough" in processors and "example_customer_totals" in processors
    kinds = re.search(r'<select name="sink_kind"[^>]*>(.*?)</select>', html, re.S).group(1)
    assert re.findall(r'<option value="(\w+)"', kinds) == ["files", "postgres", "delta", "iceberg"]
    assert "parquet" not in re.findall(r'"kind": "(\w+)"', html)  # no sink kind it refuses


@pytest.mark.parametrize("kind", sorted(SINK_EXAMPLES))
def test_every_sink_example_is_one_the_form_accepts(kind):
    example = {"kind": kind, **SINK_EXAMPLES[kind]}
    check_sink(example)  # raises on a sink the form would refuse
    assert set(example) <= set(SINK_KEYS[kind])


def test_a_job_is_created_with_a_sink_kind_and_a_weight_in_its_unit(admin, tmp_path):
    ConnectorFactory(name="landing")
    response = admin.post(
        "/new/job/",
        {
            "name": "sized",
            "connector": "landing",
            "processor": "passthrough",
            "watermark_type": "int",
            "start_position": 0,
            "sink_kind": "files",
            "sink": f'{{"path": "{tmp_path / "out"}", "format": "parquet"}}',
            "batch_weight": "50 MB",
            "max_items": 10,
            "max_attempts": 3,
            "retry_backoff_seconds": 30,
            "lease_seconds": 120,
            "max_concurrency": 1,
            "executor": "warm",
            "lookback": 0,
            "restatements": "automatic",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    job = Job.objects.get(name="sized")
    assert job.batch_weight == 50_000_000
    assert job.sink == {"kind": "files", "path": str(tmp_path / "out"), "format": "parquet"}
    edit = admin.get("/jobs/sized/edit/").content.decode()
    assert re.search(r'name="batch_weight" value="50 MB"', edit)
    assert re.search(r'<option value="files" selected>', edit)


def test_a_weight_in_the_wrong_unit_is_refused_beside_the_field(admin):
    topic = ConnectorFactory(name="clicks", kind="kafka", config={"topic": "clicks"})
    assert topic.weight_unit == "messages"
    make_job(connector=ConnectorFactory(name="other"), name="unrelated")
    body = {"name": "clicky", "connector": "clicks", "watermark_type": "int", "max_items": 5}
    refused = admin.post("/new/job/", {**body, "batch_weight": "5 MB"})
    assert refused.status_code == 400
    assert "counted in messages, not bytes" in refused.content.decode()
    nonsense = admin.post("/new/job/", {**body, "batch_weight": "lots"})
    assert "is not a weight" in nonsense.content.decode()
    assert not Job.objects.filter(name="clicky").exists()


def test_weights_parse_and_show_exactly():
    field = WeightField()
    assert field.clean("50 MB") == 50_000_000
    assert field.clean("1.5GB") == 1_500_000_000
    assert field.clean("512 kB") == 512_000
    assert field.clean("10,000 rows") == 10_000
    assert field.clean("196608") == 196_608
    assert exact_size(50_000_000) == "50 MB" and exact_size(196_608) == "196608"
    assert field.clean(exact_size(1_234_000)) == 1_234_000
