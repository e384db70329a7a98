"""The publish fence: a sink publishes a batch's output only while the control plane says it may.

A sink stages its output wherever it likes, then publishes it (renames a directory into place,
merges a staging table) inside `with publish() as replaced:`. `replaced` lists the ids of the
batches whose output the new one replaces (the batches a replay or backfill rewrites, an earlier
attempt's leftovers of a refilled hole); the sink removes them in the same step.

- `database_publish`: the real fence. One transaction of the control-plane database stays open
  while the sink publishes: tidemark_publish_begin locks the batch and refuses a stale or cancelled
  attempt (FencedOut) and an overlap that would lose rows (OutputConflict); tidemark_publish_end
  records the new output and the replaced ones. No Django here: psycopg2 and two SQL functions.
  A batch one of whose items restates outputs the job's restatement has not rebuilt yet is told
  to wait (TM425, tidemark_stale_outputs): the fence asks again, a moment later, until the
  restatement has published (restatements go first, docs/guarantees.md), for at most
  RESTATEMENT_WAIT_SECONDS; then the attempt fails (WaitsForRestatement) and is retried.
- `static_publish`: no control plane (tests, a processor run by hand): replaces what it is told.

What the fence yields is a `Replaced` list; its `token` is a number that grows with every publish
(tidemark_publish_token, drawn after tidemark_publish_begin, so in publish order; None without a
control plane). The Delta sink writes it as its application-transaction version. Its
`outputs(ids)` says, for batches of the job, the attempt whose publish was last recorded, whether
that output is the one the sink should show, and the batch's current attempt and whether it runs
(tidemark_publish_outputs, read in the fence's transaction); the files sink uses it to undo a swap
whose worker died before its fence committed and to drop dead attempts' staging. Without a
control plane it is None.

`publish_from_spec` picks one from run_batch's spec: {"fence": {"dsn_env": VAR}} or
{"replaces": [ids]}.
"""

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import NamedTuple

from workers.spark.errors import SinkError


class Replaced(list):
    """The ids of the batches whose output the publishing one replaces, the publish's token, and
    how to ask about the job's other outputs (`outputs`, None without a control plane)."""

    def __init__(
        self,
        ids,
        *,
        token: int | None = None,
        outputs: Callable[[list[int]], dict[int, "Output"]] | None = None,
    ):
        super().__init__(int(i) for i in ids)
        self.token = token
        self.outputs = outputs


class Output(NamedTuple):
    """A batch as a sink's publish sees it: the attempt that last published (None: never), whether
    its output is the one to show (published and not replaced since), its current attempt and
    whether it is running."""

    published_attempt: int | None
    shown: bool
    attempt: int
    running: bool


Publish = Callable[[], AbstractContextManager[Replaced]]


class FencedOut(SinkError):
    """This attempt no longer holds the batch: it must not touch the published output."""


class OutputConflict(SinkError):
    """Publishing would remove committed rows this batch does not rewrite."""


class WaitsForRestatement(SinkError):
    """An item of the batch restates outputs that the job's restatement has not rebuilt yet."""


# How long a publish waits for the job's restatement of the outputs its items restate.
RESTATEMENT_WAIT_SECONDS = 600.0


def static_publish(replaces: list[int] | None = None) -> Publish:
    replaced = [int(i) for i in replaces or []]

    @contextmanager
    def publish() -> Iterator[Replaced]:
        yield Replaced(replaced)

    return publish


def database_publish(*, dsn: str, batch_id: int, attempt: int) -> Publish:
    @contextmanager
    def publish() -> Iterator[Replaced]:
        import psycopg2

        conn, kept = _connection(dsn)
        try:
            deadline = time.monotonic() + RESTATEMENT_WAIT_SECONDS
            pause = 0.1
            while True:
                try:
                    try:
                        ids = _begin(conn, batch_id, attempt)
                    except psycopg2.Error as exc:
                        if not (kept and conn.closed):
                            raise _begin_error(exc) from None
                        # the kept connection had died meanwhile (server restart, terminated
                        # backend): nothing ran, so the fence starts again on a new one
                        conn, kept = _connection(dsn, fresh=True)
                        try:
                            ids = _begin(conn, batch_id, attempt)
                        except psycopg2.Error as exc:
                            raise _begin_error(exc) from None
                    break
                except WaitsForRestatement:
                    if time.monotonic() >= deadline:
                        raise
                    conn.rollback()  # the watermark lock goes: the restatement publishes
                    time.sleep(pause)
                    pause = min(pause * 2, 2.0)
            with conn.cursor() as cur:
                cur.execute("SELECT tidemark_publish_token()")
                replaced = Replaced(
                    ids,
                    token=cur.fetchone()[0],
                    outputs=lambda asked: _outputs(cur, batch_id, asked),
                )
                yield replaced
                cur.execute(
                    "SELECT tidemark_publish_end(%s, %s, %s::bigint[])",
                    [batch_id, attempt, list(replaced)],
                )
            conn.commit()
        except BaseException:
            # the transaction rolls back with the connection: nothing is recorded as published
            _discard(dsn, conn)
            raise
        _keep(dsn, conn)

    return publish


# One connection per thread and database, kept between publishes: a worker thread publishes
# batch after batch, and a new connection (a server backend started, authenticated) costs more
# than the fence's two statements. Each publish is still one transaction of its own; a connection
# leaves the cache on any error, and a process forked after it was made opens its own.
_kept = threading.local()
# how the fence's connections show in pg_stat_activity
FENCE_APPLICATION = "tidemark-fence"


def _connection(dsn: str, *, fresh: bool = False):
    """(connection, whether it was kept from an earlier publish)."""
    import psycopg2

    cache = getattr(_kept, "connections", None)
    if cache is None:
        cache = _kept.connections = {}
    found = cache.pop(dsn, None)
    if found is not None and not fresh:
        pid, conn = found
        if pid == os.getpid() and not conn.closed:
            return conn, True
    try:
        return psycopg2.connect(dsn, application_name=FENCE_APPLICATION), False
    except psycopg2.Error as exc:
        raise SinkError(
            f"cannot reach the control-plane database to publish: {str(exc).strip()[:200]}"
        ) from None


def _keep(dsn: str, conn) -> None:
    _kept.connections[dsn] = (os.getpid(), conn)


def _discard(dsn: str, conn) -> None:
    getattr(_kept, "connections", {}).pop(dsn, None)
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection is dropped either way
        pass


def _begin(conn, batch_id: int, attempt: int) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT batch_id FROM tidemark_publish_begin(%s, %s)", [batch_id, attempt])
        return [row[0] for row in cur.fetchall()]


def _outputs(cur, batch_id: int, ids: list[int]) -> dict[int, Output]:
    cur.execute(
        "SELECT batch_id, published_attempt, shown, attempt, running "
        "FROM tidemark_publish_outputs(%s, %s::bigint[])",
        [batch_id, [int(i) for i in ids]],
    )
    return {row[0]: Output(*row[1:]) for row in cur.fetchall()}


def _begin_error(exc) -> SinkError:
    message = ((exc.diag.message_primary if exc.diag else None) or str(exc)).strip()
    if exc.pgcode == "TM409":
        return FencedOut(message)
    if exc.pgcode == "TM422":
        return OutputConflict(message)
    if exc.pgcode == "TM425":
        return WaitsForRestatement(
            f"{message} (waited up to {RESTATEMENT_WAIT_SECONDS:.0f} s for it)"
        )
    return SinkError(f"publish fence failed: {message}")


def publish_from_spec(spec: dict) -> Publish:
    fence = spec.get("fence")
    if isinstance(fence, dict) and fence.get("dsn_env"):
        dsn = os.environ.get(fence["dsn_env"])
        if not dsn:
            raise SinkError(
                f"environment variable {fence['dsn_env']} (the publish fence) is not set"
            )
        return database_publish(dsn=dsn, batch_id=spec["batch_id"], attempt=spec["attempt"])
    return static_publish(spec.get("replaces"))
