"""Forward corrections that cannot drop data: past the last known item only when the request says
the range is to be skipped, and then the range is recorded and shown with the items that arrive
in it (gap report, the watermark's lag, the job page)."""

import re

import pytest
from django.core.cache import cache

from inventory.models import Batch, BatchStatus, Watermark
from inventory.services import lifecycle
from inventory.services.errors import InvalidInput
from tests.support.api_support import make_inventory, token_client
from tests.support.factories import AssetFactory

pytestmark = pytest.mark.django_db


def _commit(job, n: int) -> None:
    for _ in range(n):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)


def _last_item(connector) -> int:
    return connector.assets.order_by("-id").values_list("id", flat=True).first()


def test_a_forward_correction_past_the_last_item_is_a_400_naming_the_value_and_the_item(
    role_users,
):
    connector, job = make_inventory(weights=[40] * 4, batch_weight=40, max_items=1)
    _commit(job, 1)
    last = _last_item(connector)
    api = token_client(role_users["admin"])
    url = f"/api/v1/jobs/{job.name}/watermark/"
    before = Watermark.objects.get(job=job).position

    for value in (last + 100, 2**62):
        refused = api.post(url, {"value": value, "reason": "skip ahead"}, format="json")
        assert refused.status_code == 400, refused.content
        assert list(refused.json()) == ["value"]
        message = refused.json()["value"][0]
        assert str(value) in message and f"last known item (item {last})" in message
        assert "skip_unseen" in message
    assert Watermark.objects.get(job=job).position == before
    assert not Batch.objects.filter(job=job, status=BatchStatus.SKIPPED).exists()

    # up to the last item is still a plain forward correction
    fine = api.post(url, {"value": last, "reason": "files lost"}, format="json")
    assert fine.status_code == 200, fine.content
    # beyond the bigint range is a 400 whatever the flag says
    huge = api.post(url, {"value": 2**63, "reason": "x", "skip_unseen": True}, format="json")
    assert huge.status_code == 400 and list(huge.json()) == ["value"]


def test_a_skipped_unseen_range_is_recorded_and_shown_with_the_items_that_arrive_in_it(
    client, role_users
):
    connector, job = make_inventory(weights=[40] * 3, batch_weight=40, max_items=1)
    _commit(job, 1)
    last = _last_item(connector)
    target = last + 50
    api = token_client(role_users["admin"])
    response = api.post(
        f"/api/v1/jobs/{job.name}/watermark/",
        {"value": target, "reason": "old ids reserved", "skip_unseen": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["position"] == target + 1
    skipped = list(Batch.objects.filter(job=job, status=BatchStatus.SKIPPED).order_by("span"))
    # the two known items skipped as such; the ids after the last item in a batch saying so
    assert [(b.span.lower, b.span.upper) for b in skipped] == [
        (skipped[0].span.lower, last + 1),
        (last + 1, target + 1),
    ]
    assert "skip_unseen" in skipped[1].skip_reason
    assert "old ids reserved" in skipped[1].skip_reason

    # files arrive later with ids inside the skipped range: never processed, but shown
    late = [AssetFactory(connector=connector, weight=40) for _ in range(3)]
    assert all(last < a.id <= target for a in late)
    assert lifecycle.batch_acquire(job=job, worker="w") is None

    report = api.get(f"/api/v1/jobs/{job.name}/gaps/").json()
    unseen = [r for r in report["skipped"] if r["batch"] == skipped[1].pk]
    assert unseen == [
        {
            "range_start": last + 1,
            "range_end": target,
            "items": 3,
            "batch": skipped[1].pk,
            "reason": skipped[1].skip_reason,
        }
    ]
    state = api.get(f"/api/v1/jobs/{job.name}/watermark/").json()
    assert state["skipped_items"] == 3 + 2  # the 3 that arrived, and the 2 skipped when known
    assert state["lag"]["items"] == 0

    cache.clear()
    client.force_login(role_users["viewer"])
    page = client.get(f"/jobs/{job.name}/").content.decode()
    assert re.search(r'id="skipped-items"[^>]*>5 items in skipped ranges</a>', page), page
    gaps = client.get(f"/jobs/{job.name}/gaps/").content.decode()
    row = gaps.split(f'data-batch="{skipped[1].pk}"', 1)[1].split("</tr>", 1)[0]
    assert f"{last + 1}–{target}" in row and "<td>3</td>" in row and "old ids reserved" in row


def test_the_admin_correction_form_needs_skip_unseen_past_the_last_item(client, role_users):
    connector, job = make_inventory(weights=[40] * 2, batch_weight=40, max_items=1)
    last = _last_item(connector)
    watermark = Watermark.objects.get(job=job)
    client.force_login(role_users["admin"])
    url = f"/admin/inventory/watermark/{watermark.pk}/correct/"
    body = {"value": str(last + 10), "reason": "skip"}
    refused = client.post(url, body)
    assert refused.status_code == 200
    assert "past the job&#x27;s last known item" in refused.content.decode()
    assert Watermark.objects.get(job=job).position == watermark.position
    done = client.post(url, {**body, "skip_unseen": "on"})
    assert done.status_code == 302
    assert Watermark.objects.get(job=job).position == last + 11


def test_the_cli_sends_skip_unseen_only_when_asked():
    from tidemark_cli import resources
    from tidemark_cli.main import build_parser

    sent = []

    class Api:
        def post(self, path, body):
            sent.append(body)
            return {"position": 9, "value": 8}

    class Out:
        def done(self, message, data):
            pass

    parser = build_parser()
    for extra in ([], ["--skip-unseen"]):
        args = parser.parse_args(["watermark", "correct", "j", "8", "--reason", "r", *extra])
        resources.watermark_correct(Api(), Out(), args)
    assert "skip_unseen" not in sent[0] and sent[1]["skip_unseen"] is True


def test_skipping_ids_of_a_job_without_items_names_them_unseen():
    from inventory.services.corrections import watermark_correct
    from tests.support.factories import make_job

    job = make_job()
    with pytest.raises(InvalidInput) as refused:
        watermark_correct(job=job, value=9, actor="a", reason="reserved")
    assert refused.value.field == "value" and "(no item yet)" in refused.value.message
    watermark_correct(job=job, value=9, actor="a", reason="reserved", skip_unseen=True)
    skipped = Batch.objects.get(job=job, status=BatchStatus.SKIPPED)
    assert (skipped.span.lower, skipped.span.upper) == (0, 10)
    assert "skip_unseen" in skipped.skip_reason and "reserved" in skipped.skip_reason
