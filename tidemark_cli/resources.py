"""Commands over the API's resources: list, show and act on connectors, jobs, batches, backfills,
alerts and watermarks. Each takes (api, printer, args) and returns the exit code."""

import json
import signal
import sys
import time
from datetime import datetime

from tidemark_cli.api import quote
from tidemark_cli.config import UsageError
from tidemark_cli.output import duration, emit_json, weight

CONNECTOR_COLUMNS = ["name", "kind", "state", "labels", "start_after", "job_count"]
JOB_COLUMNS = [
    "name",
    "connector",
    "state",
    "lag",
    "processor",
    "watermark.position",
    "batch_weight",
]
BATCH_COLUMNS = [
    "id",
    "job",
    "kind",
    "status",
    "range_start",
    "range_end",
    "item_count",
    "weight",
    "attempt",
    "finished_at",
]
BACKFILL_COLUMNS = [
    "id",
    "job",
    "status",
    "range_start",
    "range_end",
    "priority",
    "progress.batches_done",
    "progress.batches_total",
    "progress.percent",
]
ALERT_COLUMNS = ["severity", "kind", "subject", "message"]
WATERMARK_EVENT_COLUMNS = [
    "created_at",
    "source",
    "old_position",
    "new_position",
    "new_value",
    "actor",
    "reason",
]


# ---- connectors ---------------------------------------------------------------------------------


def connectors_list(api, out, args) -> int:
    rows = api.listing("connectors/", kind=args.kind, state=args.state)
    out.rows(rows, CONNECTOR_COLUMNS)
    return 0


def connector_show(api, out, args) -> int:
    out.obj(api.get(f"connectors/{quote(args.name)}/"))
    return 0


def connector_items(api, out, args) -> int:
    rows = api.listing(f"connectors/{quote(args.name)}/items/", limit=args.limit)
    if not out.json:  # in the connector's unit, as every other weight (docs/cli.md)
        unit = api.get(f"connectors/{quote(args.name)}/").get("weight_unit")
        rows = [{**r, "weight": weight(r["weight"], unit)} for r in rows]
    out.rows(rows, ["id", "item", "weight", "discovered_at"])
    return 0


def connector_action(verb: str):
    def command(api, out, args) -> int:
        data = api.post(f"connectors/{quote(args.name)}/{verb}/")
        if verb == "discover":
            message = f"connector {args.name}: {data['registered']} new item(s) registered"
        else:
            message = f"connector {args.name}: {data.get('state', verb + 'd')}"
        out.done(message, data)
        return 0

    return command


# ---- jobs ---------------------------------------------------------------------------------------


def jobs_list(api, out, args) -> int:
    paused = None if args.paused is None else str(args.paused).lower()
    rows = api.listing("jobs/", connector__name=args.connector, paused=paused)
    if not out.json:
        rows = [
            {
                **r,
                "state": (r.get("state") or "").replace("_", " "),
                "lag": lag_text(r.get("lag"), r.get("weight_unit"), r.get("time_lag_seconds")),
                "batch_weight": weight(r["batch_weight"], r.get("weight_unit")),
            }
            for r in rows
        ]
    out.rows(rows, JOB_COLUMNS)
    return 0


def lag_text(lag: dict | None, unit: str | None, time_lag_seconds: int | None = None) -> str:
    """A job's lag as the overview says it: "none", "12 items (1.2 MB)", "... , 3 h behind"."""
    if not lag:
        return "unreadable"
    if not lag.get("items"):
        return "none"
    text = f"{lag['items']:,} item{'s' if lag['items'] != 1 else ''}"
    text += f" ({weight(lag.get('weight'), unit)})"
    if time_lag_seconds:
        text += f", {duration(time_lag_seconds)} behind"
    return text


def job_show(api, out, args) -> int:
    out.obj(api.get(f"jobs/{quote(args.name)}/"))
    return 0


def job_run(api, out, args) -> int:
    data = api.post(f"jobs/{quote(args.name)}/run/")
    planned = len(data.get("planned") or [])
    message = f"job {args.name}: {planned} batch(es) planned"
    if data.get("reason"):
        message += f" ({data['reason']})"
    out.done(message, data)
    return 0


def job_action(verb: str):
    def command(api, out, args) -> int:
        data = api.post(f"jobs/{quote(args.name)}/{verb}/")
        out.done(f"job {args.name}: {'paused' if data.get('paused') else 'running'}", data)
        return 0

    return command


def job_watch(api, out, args) -> int:
    """One line per change of the job's progress, until interrupted (Ctrl-C, SIGTERM)."""
    # both installed here: a process started in the background by a non-interactive shell
    # inherits SIGINT as ignored, and Python then never turns it into KeyboardInterrupt
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    path = f"jobs/{quote(args.name)}/"
    last = None
    try:
        while True:
            job = api.get(path)
            state = _progress(job)
            if state != last:
                last = state
                if out.json:
                    emit_json({"at": datetime.now().astimezone().isoformat(), **state})
                else:
                    print(_progress_line(state), flush=True)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def _interrupt(*_args):
    # SIGINT and SIGTERM end a watch quietly, exit 0
    raise KeyboardInterrupt


def _progress(job: dict) -> dict:
    watermark = job.get("watermark") or {}
    return {
        "job": job["name"],
        "paused": job.get("paused"),
        "watermark_position": watermark.get("position"),
        "watermark_value": watermark.get("value"),
        "lag": job.get("lag"),
        "weight_unit": job.get("weight_unit"),
        "blocked_by": job.get("blocked_by"),
        "batch_counts": job.get("batch_counts") or {},
    }


def _progress_line(state: dict) -> str:
    counts = state["batch_counts"]
    shown = " ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v) or "no batches"
    line = (
        f"{datetime.now():%H:%M:%S}  {state['job']}  watermark {state['watermark_position']}"
        f"  lag {lag_text(state['lag'], state['weight_unit'])}  {shown}"
    )
    if state["paused"]:
        line += "  [paused]"
    blocked = state["blocked_by"]
    # the batch at the watermark holds it only when it cannot go on by itself; a queued or
    # running one (or one waiting for its retry) is the job working
    if blocked and blocked["status"] in HOLDING:
        line += f"  blocked by batch {blocked['id']} ({blocked['status']})"
    elif blocked:
        line += f"  batch {blocked['id']} {blocked['status']}"
    return line


# a batch at the watermark in one of these states waits for a person (retry, skip, replan)
HOLDING = ("dead", "cancelled")


# ---- watermarks ---------------------------------------------------------------------------------


def watermark_show(api, out, args) -> int:
    out.obj(api.get(f"jobs/{quote(args.job)}/watermark/"))
    return 0


def watermark_history(api, out, args) -> int:
    rows = api.listing(f"jobs/{quote(args.job)}/watermark/history/", limit=args.limit)
    out.rows(rows, WATERMARK_EVENT_COLUMNS)
    return 0


def watermark_correct(api, out, args) -> int:
    if not args.reason.strip():
        raise UsageError("--reason must say why the watermark is corrected")
    body = {"value": _json_or_text(args.value), "reason": args.reason, "replay": args.replay}
    if args.skip_unseen:
        body["skip_unseen"] = True
    if args.position is not None:
        body["position"] = args.position
    data = api.post(f"jobs/{quote(args.job)}/watermark/", body)
    message = f"job {args.job}: watermark now at {data.get('position')}"
    if data.get("value") is not None:
        message += f" (value {json.dumps(data['value'], default=str)})"
    out.done(message, data)
    return 0


def _json_or_text(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw


# ---- batches ------------------------------------------------------------------------------------


def batches_list(api, out, args) -> int:
    rows = api.listing(
        "batches/",
        limit=args.limit,
        job=args.job,
        status=args.status or None,
        kind=args.kind,
        backfill=args.backfill,
        page_size=min(args.limit, 1000),
    )
    if not out.json:
        rows = [{**r, "weight": weight(r["weight"], r.get("weight_unit"))} for r in rows]
    out.rows(rows, BATCH_COLUMNS)
    return 0


def batch_show(api, out, args) -> int:
    out.obj(api.get(f"batches/{args.id}/"))
    return 0


def batch_items(api, out, args) -> int:
    rows = api.get(f"batches/{args.id}/items/")
    if not out.json:
        unit = api.get(f"batches/{args.id}/").get("weight_unit")
        rows = [{**r, "weight": weight(r["weight"], unit)} for r in rows]
    out.rows(rows, ["id", "item", "weight"])
    return 0


def batch_action(verb: str):
    def command(api, out, args) -> int:
        body = {}
        if getattr(args, "reason", None) is not None:
            body["reason"] = args.reason
        data = api.post(f"batches/{args.id}/{verb}/", body)
        out.done(f"batch {args.id}: {data.get('status')}", data)
        return 0

    return command


# ---- backfills ----------------------------------------------------------------------------------


def backfills_list(api, out, args) -> int:
    rows = api.listing(
        "backfills/", limit=args.limit, job=args.job, status=args.status, page_size=args.limit
    )
    out.rows(rows, BACKFILL_COLUMNS)
    return 0


def backfill_show(api, out, args) -> int:
    out.obj(api.get(f"backfills/{args.id}/"))
    return 0


def _backfill_body(args) -> dict:
    body: dict = {"job": args.job}
    if args.range:
        body["range_start"], body["range_end"] = args.range
    if args.time:
        body["time_start"], body["time_end"] = (_json_int_or_text(v) for v in args.time)
    for field in ("batch_weight", "max_items"):
        if getattr(args, field) is not None:
            body[field] = getattr(args, field)
    return body


def _json_int_or_text(raw: str):
    # a table read by an integer column takes integers as "times"
    return int(raw) if raw.lstrip("-").isdigit() else raw


def backfill_preview(api, out, args) -> int:
    plan = api.post("backfills/preview/", _backfill_body(args))
    if out.json:
        emit_json(plan)
        return 0
    _print_plan(plan)
    return 0


def _print_plan(plan: dict) -> None:
    requested = plan.get("requested")
    origin = ""
    if requested:
        origin = f" (from {requested['by']} {requested['start']} .. {requested['end']}, by {requested['basis']})"
    print(
        f"backfill of job {plan['job']}: items {plan['range_start']}..{plan['range_end']}{origin}\n"
        f"{plan['batch_count']} batch(es), {plan['total_items']} item(s), "
        f"weight {weight(plan['total_weight'], plan.get('weight_unit'))}"
    )
    from tidemark_cli.output import table

    unit = plan.get("weight_unit")
    batches = [{**b, "weight": weight(b["weight"], unit)} for b in plan.get("batches") or []]
    table(batches, ["first_item", "last_item", "item_count", "weight"])


def backfill_create(api, out, args) -> int:
    body = _backfill_body(args)
    body.update(max_concurrency=args.max_concurrency, priority=args.priority)
    if args.reason is not None:
        body["reason"] = args.reason
    data = api.post("backfills/", body)
    progress = data.get("progress") or {}
    out.done(
        f"backfill {data['id']} of job {data['job']}: items {data['range_start']}.."
        f"{data['range_end']}, {progress.get('batches_total', '?')} batch(es), {data['status']}",
        data,
    )
    return 0


def backfill_action(verb: str):
    def command(api, out, args) -> int:
        data = api.post(f"backfills/{args.id}/{verb}/")
        out.done(f"backfill {args.id}: {data.get('status')}", data)
        return 0

    return command


# ---- alerts -------------------------------------------------------------------------------------


def alerts_list(api, out, args) -> int:
    data = api.get("alerts/")
    if out.json:
        emit_json(data)
    else:
        out.rows(data.get("alerts") or [], ALERT_COLUMNS)
    return 0


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1
