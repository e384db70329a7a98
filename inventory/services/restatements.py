"""Restatements: input a job already committed changed, so its output is rebuilt without a person.

Four kinds: late rows of a `table` connector (a committed slice within a job's `lookback` gained
rows), files of a directory rewritten after registration (flagged `changed_after_registration`
by the recheck) and objects whose ETag, size or mtime changed (sources/object_store), all found
at discovery; and upstream commits of a `job_output` chain whose
output a later upstream commit replaced (a replay or backfill upstream), found when that commit
lands. Each job that committed the items gets a backfill over them (actor `tidemark`, the reason
naming what changed), or, for a job whose `restatements` policy is `proposed`, a proposed replay
an operator applies (restatement_records.py); each recorded as a `Restatement`. The backfill
re-reads them and replaces the outputs that held them whole, in the sink's one publish step (docs/guarantees.md); a replaced upstream commit reads as nothing, its rows
arriving with the replacing commit. A downstream rebuild is itself a commit that replaces outputs,
so the next job down the chain follows the same way. A job with a batch running over the items is
left for later: discovery's next look, or the orchestration step for chains.

For the kinds whose restated items are restated by a *later* item (a Delta version that removed
their files, an Iceberg snapshot or a Hudi instant that replaced their rows, an upstream commit
that replaced their output) the backfill runs as one batch
through that item (`through`), so the old rows leave and the new ones arrive in one publish; until
then no batch over that item publishes (tidemark_stale_outputs, docs/guarantees.md).
"""

import logging

from django.db import transaction
from django.db.models import Q
from django.dispatch import receiver

from inventory.models import Backfill, BatchStatus, Connector, ConnectorKind, RestatementCause
from inventory.services import restatement_records as records
from inventory.services.errors import TidemarkError
from inventory.services.reasons import reason_fitted
from inventory.services.signals import batch_committed
from inventory.sql import gateway

log = logging.getLogger(__name__)

RESTATED = "restated"


def restate_items(
    connector: Connector,
    ids: list[int],
    *,
    reason: str,
    cause: str,
    detail: dict | None = None,
    jobs=None,
    priority: int = 0,
    through: int | None = None,
) -> tuple:
    """Restate `ids` in each job of the connector that committed some of them, by the job's
    policy (restatement_records.restatement_open: a backfill now, or a proposed replay), each
    recorded as a `Restatement`. `through`: the last item that restates them (a Delta version,
    an upstream commit), which the backfill then carries in the same publish.

    Returns (backfills created, done): `done` is False while a job had a batch running over them
    (recorded as pending); the caller then keeps its record to try again."""
    if not ids:
        return [], True
    reason = reason_fitted(reason)  # it names files or slices: whatever their names, it fits
    jobs = list(jobs if jobs is not None else connector.jobs.select_related("watermark"))
    span = (min(ids), max(ids) + 1)
    detail = detail or {}
    created, done = [], True
    for job in jobs:
        # items this job has not committed yet are read, changed, when their batch runs
        committed = [pk for pk in ids if pk < job.watermark.position]
        if job.batches.filter(status=BatchStatus.RUNNING, span__overlap=span).exists():
            done = False  # it may have read before the change: the next look decides
            records.restatement_pending(
                job=job,
                cause=cause,
                range_start=min(committed or ids),
                range_end=max(committed or ids),
                reason=reason,
                detail=detail,
            )
            continue
        if not committed:
            records.pending_drop(job=job, cause=cause)
            continue
        record = records.restatement_open(
            job=job,
            cause=cause,
            range_start=min(committed),
            range_end=max(committed),
            reason=reason,
            detail=detail,
            priority=priority,
            through=through,
        )
        if record is not None and record.backfill_id is not None:
            created.append(record.backfill)
    return created, done


def late_rows_restate(connector: Connector, *, late: list, jobs: list) -> list[Backfill]:
    """Late rows reach the sink even when nothing newer arrives (a table read with `lookback`).

    A job's lookback re-reads its window only when a newer slice makes a batch. So each look also
    recounts the slices within the largest lookback of the connector's jobs (the table kind's
    `after_discover`: `late`, [(slice asset, rows now)], for `jobs`, those with a lookback); the
    slices that gained rows are restated, and their counts recorded once every job has its
    backfill."""
    if not late:
        return []
    described = ", ".join(
        f"{asset.location} {asset.weight} -> {rows} rows" for asset, rows in late[:5]
    ) + (f" and {len(late) - 5} more" if len(late) > 5 else "")
    created, done = restate_items(
        connector,
        [asset.pk for asset, _ in late],
        reason=f"late rows: {described}",
        cause=RestatementCause.LATE_ROWS,
        detail={"slices": [{"id": a.pk, "rows_then": a.weight, "rows_now": n} for a, n in late]},
        jobs=jobs,
    )
    if done:
        # one statement for every recounted slice
        gateway.restatement_slice_counts(counts=[(asset.pk, rows) for asset, rows in late])
    return created


def changed_unrestated(connector: Connector):
    """(id, location, extra) of the connector's assets flagged as changed after registration and
    not yet restated, in id order. Discovery asks this at every look: the partial index
    `asset_changed_unrestated_idx` (models/connectors.py) holds exactly these rows, so the
    question costs one probe of a nearly empty index however many assets the connector has. Its
    condition and this filter are the same lookups (the planner uses a partial index only for a
    query whose filter implies the index's condition)."""
    return (
        connector.assets.filter(extra__has_key="changed_after_registration")
        .filter(~Q(extra__has_key=RESTATED))
        .order_by("id")
        .values_list("id", "location", "extra")
    )


def changed_files_restate(connector: Connector) -> list[Backfill]:
    """Files rewritten after registration (flagged by discovery's recheck) are read again by
    every job that committed them; each is marked `restated` once every job has its backfill."""
    changed = list(changed_unrestated(connector))
    if not changed:
        return []
    names = ", ".join(location for _, location, _ in changed[:5]) + (
        f" and {len(changed) - 5} more" if len(changed) > 5 else ""
    )
    ids = [pk for pk, _, _ in changed]
    objects = any("etag" in (extra or {}) for _, _, extra in changed)
    created, done = restate_items(
        connector,
        ids,
        reason=f"{'objects' if objects else 'files'} changed after registration: {names}",
        cause=RestatementCause.CHANGED_OBJECTS if objects else RestatementCause.CHANGED_FILES,
        detail={
            "assets": [
                {"id": pk, "location": location, "change": extra["changed_after_registration"]}
                for pk, location, extra in changed[:100]
            ]
        },
    )
    if done:
        gateway.restatement_files_restated(asset_ids=ids, backfill_ids=[b.pk for b in created])
    return created


# ---- job_output chains ---------------------------------------------------------------------------


@receiver(batch_committed, dispatch_uid="tidemark-upstream-restate")
def _after_commit(sender, batch_id: int, **kwargs) -> None:
    upstream_restate(batch_id)


def upstream_restate(batch_id: int) -> list[Backfill]:
    """After batch `batch_id` committed: if its publish replaced the outputs of earlier commits
    (an upstream replay or backfill), every job reading its job's commits rebuilds what it built
    from them, before its incremental work (priority 1). Never raises: what cannot be done now is
    kept on the downstream connector (`cursor.restate`) for the orchestration step."""
    created = []
    for replaced in gateway.restatement_replaced_commits(batch_id=batch_id):
        try:
            created += _restate_chain(
                replaced.connector_id,
                set(replaced.commit_seqs),
                upstream=replaced.upstream,
                through=replaced.through,
            )
        except TidemarkError as exc:  # e.g. the downstream's source no longer readable
            log.warning("restatement of connector %s left pending: %s", replaced.connector_id, exc)
    return created


def pending_restate() -> list[Backfill]:
    """The orchestration step's share: downstream restatements that waited for a batch."""
    created = []
    pending = Connector.objects.filter(kind=ConnectorKind.JOB_OUTPUT, cursor__has_key="restate")
    for connector in pending:
        try:
            created += _restate_chain(connector.pk, set(), upstream=connector.config.get("job"))
        except TidemarkError as exc:
            log.warning("restatement of connector %s left pending: %s", connector.name, exc)
    return created


def _restate_chain(
    connector_id: int, commit_seqs: set, *, upstream: str, through: int | None = None
) -> list[Backfill]:
    with transaction.atomic():
        connector = Connector.objects.select_for_update().get(pk=connector_id)
        ids = sorted(commit_seqs | set((connector.cursor or {}).get("restate", [])))
        through = max(
            (t for t in (through, (connector.cursor or {}).get("restate_through")) if t),
            default=None,
        )
        shown = ", ".join(map(str, ids[:10])) + (" ..." if len(ids) > 10 else "")
        created, done = restate_items(
            connector,
            ids,
            reason=f"upstream job {upstream} replaced the output of commits {shown}",
            cause=RestatementCause.UPSTREAM,
            detail={"upstream_job": upstream, "commits": ids[:1000]},
            priority=1,
            through=through,
        )
        cursor = dict(connector.cursor or {})
        if done:
            cursor.pop("restate", None)
            cursor.pop("restate_through", None)
        else:
            cursor["restate"] = ids
            if through:
                cursor["restate_through"] = through
        if cursor != (connector.cursor or {}):
            connector.cursor = cursor
            connector.save(update_fields=["cursor", "updated_at"])
    return created


# ---- delta tables ------------------------------------------------------------------------------


def delta_restate(connector: Connector) -> list[Backfill]:
    """Versions of a `delta` connector's table whose files a later version removed (an upstream
    replay or backfill, a delete, an overwrite), recorded by discovery in `cursor.restate`, are
    rebuilt by every job that committed them, before its incremental work (priority 1). A
    restated version reads only its files still live, the later version bringing the rest, so
    each row reaches the sink once. What waits for a running batch stays for the next look."""
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        ids = sorted((locked.cursor or {}).get("restate", []))
        if not ids:
            return []
        versions = sorted(locked.assets.filter(pk__in=ids).values_list("extra__version", flat=True))
        shown = ", ".join(map(str, versions[:10])) + (" ..." if len(versions) > 10 else "")
        created, done = restate_items(
            locked,
            ids,
            reason=f"later versions of Delta table {locked.config.get('path')} removed files "
            f"of versions {shown}",
            cause=RestatementCause.DELTA_VERSIONS,
            detail={"versions": versions[:100]},
            priority=1,
            through=(locked.cursor or {}).get("restate_through"),
        )
        if done:
            locked.cursor = {
                k: v for k, v in locked.cursor.items() if k not in ("restate", "restate_through")
            }
            locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return created


# ---- hudi tables -------------------------------------------------------------------------------


def hudi_restate(connector: Connector) -> list[Backfill]:
    """Instants of a `hudi` connector's table whose rows a later instant changed (an update, a
    delete, an insert overwrite, an overwrite of the table), recorded by discovery in
    `cursor.restate`, are rebuilt by every job that committed them, before its incremental work
    (priority 1), in one batch through the last instant restating them (`restate_through`). A
    restated instant reads only its rows still live, the later instant bringing the rest, so each
    key reaches the sink once. What waits for a running batch stays for the next look."""
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        ids = sorted((locked.cursor or {}).get("restate", []))
        if not ids:
            return []
        instants = sorted(locked.assets.filter(pk__in=ids).values_list("extra__instant", flat=True))
        shown = ", ".join(instants[:10]) + (" ..." if len(instants) > 10 else "")
        created, done = restate_items(
            locked,
            ids,
            reason=f"later instants of Hudi table {locked.config.get('path')} changed rows "
            f"of instants {shown}",
            cause=RestatementCause.HUDI_INSTANTS,
            detail={"instants": instants[:100]},
            priority=1,
            through=(locked.cursor or {}).get("restate_through"),
        )
        if done:
            locked.cursor = {
                k: v for k, v in locked.cursor.items() if k not in ("restate", "restate_through")
            }
            locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return created


# ---- iceberg tables ----------------------------------------------------------------------------


def iceberg_restate(connector: Connector) -> list[Backfill]:
    """Snapshots whose rows a later overwrite or delete replaced, recorded by discovery in
    `cursor.restate`, are rebuilt by every job that committed them, before its incremental work
    (priority 1), in one batch through the last snapshot restating them. A restated snapshot
    reads only its rows still live, the later one bringing the rest, so each row reaches the
    sink once. What waits for a running batch stays for the next look."""
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        ids = sorted((locked.cursor or {}).get("restate", []))
        if not ids:
            return []
        snapshots = list(
            locked.assets.filter(pk__in=ids)
            .order_by("id")
            .values_list("extra__snapshot", flat=True)
        )
        shown = ", ".join(map(str, snapshots[:10])) + (" ..." if len(snapshots) > 10 else "")
        created, done = restate_items(
            locked,
            ids,
            reason=f"later snapshots of Iceberg table {locked.config.get('table')} replaced rows "
            f"of snapshots {shown}",
            cause=RestatementCause.ICEBERG_SNAPSHOTS,
            detail={"snapshots": snapshots[:100]},
            priority=1,
            through=(locked.cursor or {}).get("restate_through"),
        )
        if done:
            locked.cursor = {
                k: v for k, v in locked.cursor.items() if k not in ("restate", "restate_through")
            }
            locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return created
