"""A job's restatements over the API: listed for viewers, applied (with the pinned plan) and
dismissed by operators; the gap report shows restated ranges beside holes; the policy is a job
setting validated like the others."""

import pytest

from inventory.models import Asset, Backfill, Restatement, RestatementCause
from inventory.services import lifecycle, restatements
from tests.support.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db


def _committed(job) -> list[int]:
    """Commit every batch of `job` as an application outside Tidemark does; returns its items."""
    while (batch := lifecycle.batch_acquire(job=job, worker="app")) is not None:
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    return list(
        Asset.objects.filter(connector=job.connector).order_by("id").values_list("id", flat=True)
    )


def _proposed(name="restated", **options):
    connector, job = make_inventory(name=name, restatements="proposed", **options)
    ids = _committed(job)
    created, done = restatements.restate_items(
        connector, ids[2:4], reason="files changed after registration: two", cause="changed_files"
    )
    assert created == [] and done
    return job, ids, Restatement.objects.get(job=job)


def test_a_proposed_replay_is_listed_with_its_plan_and_source(role_users):
    job, ids, record = _proposed()
    answer = token_client(role_users["viewer"]).get(f"/api/v1/jobs/{job.name}/restatements/")
    assert answer.status_code == 200
    [shown] = answer.json()["results"]
    assert shown["state"] == "proposed" and shown["cause"] == "changed_files"
    assert (shown["range_start"], shown["range_end"]) == (ids[2], ids[3])
    # the plan rewrites the committed outputs over the items whole (batches of 2 items here)
    assert shown["preview"]["batches"] == [
        {
            "range_start": ids[2],
            "range_end": ids[3],
            "first_item": ids[2],
            "last_item": ids[3],
            "item_count": 2,
            "weight": 80,
        }
    ]
    assert shown["reason"].startswith("files changed") and shown["backfill"] is None
    one = token_client(role_users["viewer"]).get(
        f"/api/v1/jobs/{job.name}/restatements/{record.pk}/"
    )
    assert one.json()["preview"]["fingerprint"] == record.preview["fingerprint"]
    filtered = token_client(role_users["viewer"]).get(
        f"/api/v1/jobs/{job.name}/restatements/?status=applied"
    )
    assert filtered.json()["results"] == []
    bad = token_client(role_users["viewer"]).get(
        f"/api/v1/jobs/{job.name}/restatements/?status=maybe"
    )
    assert bad.status_code == 400 and "status" in bad.json()
    assert (
        token_client(role_users["viewer"]).get("/api/v1/jobs/nope/restatements/").status_code == 404
    )


def test_applying_refuses_a_plan_that_changed_and_runs_the_one_shown_then(role_users):
    job, ids, record = _proposed(name="changed-plan")
    # an object rewritten again under its key: the items' weight is not what was proposed
    Asset.objects.filter(pk=ids[3]).update(weight=55)
    url = f"/api/v1/jobs/{job.name}/restatements/{record.pk}/apply/"
    operator = token_client(role_users["operator"])
    refused = operator.post(url, {}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "planchanged"
    now = refused.json()["plan"]
    assert now["total_weight"] == 95 and now["fingerprint"] != record.preview["fingerprint"]
    assert not Backfill.objects.filter(job=job).exists()
    assert operator.post(url, {"fingerprint": "xyz"}, format="json").json() == {
        "fingerprint": ["This value does not match the required pattern."]
    }
    applied = operator.post(url, {"fingerprint": now["fingerprint"]}, format="json")
    assert applied.status_code == 200, applied.content
    backfill = Backfill.objects.get(job=job)
    assert applied.json()["backfill"] == backfill.pk
    assert [(b.span.lower, b.span.upper, b.weight) for b in backfill.batches.all()] == [
        (ids[2], ids[3] + 1, 95)
    ]


def test_dismissing_needs_an_operator_and_a_reason(role_users):
    job, _ids, record = _proposed(name="dismissed")
    url = f"/api/v1/jobs/{job.name}/restatements/{record.pk}/dismiss/"
    assert token_client(role_users["viewer"]).post(url, {"reason": "no"}).status_code == 403
    operator = token_client(role_users["operator"])
    assert operator.post(url, {}, format="json").json() == {"reason": ["This field is required."]}
    done = operator.post(url, {"reason": "the old rows are what the report needs"}, format="json")
    assert done.status_code == 200
    assert done.json()["state"] == "dismissed"
    assert done.json()["dismiss_reason"] == "the old rows are what the report needs"
    apply = operator.post(url.removesuffix("dismiss/") + "apply/", {}, format="json")
    assert apply.status_code == 409 and not Backfill.objects.filter(job=job).exists()


def test_the_gap_report_shows_restated_ranges_beside_holes(role_users):
    job, ids, record = _proposed(name="gaps-restated")
    report = token_client(role_users["viewer"]).get(f"/api/v1/jobs/{job.name}/gaps/").json()
    assert report["restated"] == [
        {
            "id": record.pk,
            "range_start": ids[2],
            "range_end": ids[3],
            "state": "proposed",
            "cause": "changed_files",
            "reason": record.reason,
            "backfill": None,
        }
    ]
    outside = token_client(role_users["viewer"]).get(
        f"/api/v1/jobs/{job.name}/gaps/?lower={ids[4]}"
    )
    assert outside.json()["restated"] == []


def test_a_running_batch_makes_the_restatement_pending_until_it_is_tried_again(role_users):
    connector, job = make_inventory(name="pending", restatements="proposed", max_items=2)
    ids = _committed(job)
    Asset.objects.create(connector=connector, location="/x/late.parquet", weight=40)
    running = lifecycle.batch_acquire(job=job, worker="app")
    late = running.span.lower
    created, done = restatements.restate_items(
        connector, [ids[0], late], reason="r", cause=RestatementCause.CHANGED_FILES
    )
    assert not done
    pending = Restatement.objects.get(job=job)
    assert pending.state == "pending"
    lifecycle.batch_succeed(batch_id=running.pk, attempt=running.attempt)
    restatements.restate_items(connector, [ids[0], late], reason="r", cause="changed_files")
    pending.refresh_from_db()  # the same record, now proposed
    assert pending.state == "proposed" and Restatement.objects.filter(job=job).count() == 1


def test_the_policy_is_a_job_setting_checked_like_the_others(role_users):
    admin = token_client(role_users["admin"])
    _connector, job = make_inventory(name="policy")
    assert admin.get("/api/v1/jobs/policy/").json()["restatements"] == "automatic"
    bad = admin.patch("/api/v1/jobs/policy/", {"restatements": "sometimes"}, format="json")
    assert bad.status_code == 400 and "restatements" in bad.json()
    good = admin.patch("/api/v1/jobs/policy/", {"restatements": "proposed"}, format="json")
    assert good.status_code == 200 and good.json()["restatements"] == "proposed"
    job.refresh_from_db()
    assert job.restatements == "proposed"


@pytest.mark.parametrize("policy", ["automatic", "proposed"])
def test_a_restatement_naming_files_whatever_their_names_runs_with_its_reason_fitted(
    role_users, policy
):
    """Tidemark's own reasons name files: an escape sequence in a file's name, or five names of
    2,000 bytes, would be refused from an operator; a restatement fits them instead (escaped,
    cut to 2,000 characters) and runs."""
    connector, job = make_inventory(name=f"fitted-{policy}", restatements=policy)
    ids = _committed(job)
    reason = "files changed after registration: h\x1b[2J.parquet, " + "long-name-" * 500
    created, done = restatements.restate_items(
        connector, ids[2:4], reason=reason, cause="changed_files"
    )
    assert done
    record = Restatement.objects.get(job=job)
    assert "\x1b" not in record.reason and "h\\x1b[2J.parquet" in record.reason
    assert len(record.reason) == 2000 and record.reason.endswith("\u2026")
    if policy == "proposed":
        applied = token_client(role_users["operator"]).post(
            f"/api/v1/jobs/{job.name}/restatements/{record.pk}/apply/", {}, format="json"
        )
        assert applied.status_code == 200, applied.content
    backfill = Backfill.objects.get(job=job)
    assert len(backfill.reason) <= 2000 and "\x1b" not in backfill.reason
