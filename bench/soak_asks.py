"""The soak's operator requests (bench/bench_soak.py): replays and backfills asked through the
same gunicorn the web faults hit (bench/soak_web.py), while the faults are under way.

- replay: an admin's `POST /api/v1/jobs/<name>/watermark/` moving the watermark back, with
  `replay=true`, to the start of the job's second-last standing output (so the two last committed
  outputs are superseded and planned again; the new batches replace them when they publish). For
  an int watermark the body gives `value` (the last item id kept: position - 1), for the Kafka
  job's key_value watermark `position` (an item boundary; its value is taken from the committed
  batches below it). Every job is owed one replay.
- backfill: an operator's `POST /api/v1/backfills/` over one standing output of a job whose source
  the web faults do not backfill (the S3, table and Kafka jobs); each of them is owed one.

A request is asked only when its job has nothing queued, running or failed (a replay over a batch
in flight is refused with 409, and so is a backfill over one); an answer other than 200/201 is
counted as asked, not done, and the job is asked again later. One request every `spacing`
seconds at most. A job with fewer than two standing outputs (a tiny run) makes the driver land
more units (`starved`).
"""

import time
from collections import Counter

REPLAY_REASON = "soak: replay the job's last two outputs under faults"


class Asks:
    """`jobs`: {label: Job}; `web`: the running Web; `admin_token`: an admin's API token;
    `backfill_labels`: the jobs owed a backfill here."""

    def __init__(
        self, web, jobs: dict, *, admin_token: str, backfill_labels, spacing=2.0, events=None
    ):
        self.web, self.jobs, self.admin_token, self.spacing = web, jobs, admin_token, spacing
        self.events = [] if events is None else events  # (time.monotonic(), what)
        self.owed = [("replay", label) for label in jobs] + [
            ("backfill", label) for label in backfill_labels if label in jobs
        ]
        self.asked, self.done = Counter(), Counter()  # by kind
        self.done_by_job = Counter()  # "replay kafka-files" -> 1
        self.answers = Counter()  # "replay 409" -> n
        self.next_at = 0.0
        self.starved = False  # an owed job has fewer than two standing outputs: land more

    def due(self) -> bool:
        return bool(self.owed)

    def step(self) -> None:
        now = time.monotonic()
        if not self.owed or now < self.next_at:
            return
        self.starved = False
        for kind, label in list(self.owed):
            target = self._target(self.jobs[label], kind)
            if target is None:
                continue
            self.next_at = now + self.spacing
            self.asked[kind] += 1
            try:
                status = self._ask(kind, self.jobs[label], target)
            except OSError:  # the web faults: a worker killed or stopped meanwhile
                status = "no answer"
            self.answers[f"{kind} {status}"] += 1
            self.events.append((now, f"{kind} {label} {status}"))
            if status in (200, 201):
                self.done[kind] += 1
                self.done_by_job[f"{kind} {label}"] += 1
                self.owed.remove((kind, label))
            return

    def _target(self, job, kind: str):
        """(first item, end) of the output to replay from or backfill, or None: not now."""
        from inventory.models import OPEN_STATUSES, Batch, BatchStatus, Watermark

        if Batch.objects.filter(job=job, status__in=OPEN_STATUSES).exists():
            return None
        outputs = list(
            Batch.objects.filter(
                job=job,
                status=BatchStatus.SUCCEEDED,
                published_attempt__isnull=False,
                replaced_by__isnull=True,
            ).order_by("-span")[:2]
        )
        if len(outputs) < 2:
            self.starved = True
            return None
        chosen = outputs[1] if kind == "replay" else outputs[0]
        if Watermark.objects.get(job=job).position < chosen.span.upper:
            return None  # not committed past it yet
        return chosen.span.lower, chosen.span.upper

    def _ask(self, kind: str, job, target) -> int:
        first, end = target
        if kind == "backfill":
            body = {"job": job.name, "range_start": first, "range_end": end - 1}
            return self.web.request("POST", "/api/v1/backfills/", body)
        body = {"reason": REPLAY_REASON, "replay": True}
        if job.watermark.type == "int":
            body["value"] = first - 1  # the last item id kept
        else:
            body.update(value=None, position=first)
        path = f"/api/v1/jobs/{job.name}/watermark/"
        return self.web.request("POST", path, body, token=self.admin_token)

    def figures(self) -> dict:
        return {
            "replays_asked": self.asked["replay"],
            "replays_done": self.done["replay"],
            "source_backfills_asked": self.asked["backfill"],
            "source_backfills_done": self.done["backfill"],
            "asks_done_by_job": dict(self.done_by_job),
            "ask_answers": dict(self.answers),
            "asks_owed": [f"{kind} {label}" for kind, label in self.owed],
        }
