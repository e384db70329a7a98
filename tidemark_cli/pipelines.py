"""`tidemark plan` and `tidemark apply`: make the server's connectors and jobs what a pipelines
file declares (docs/pipelines.md).

What a file declares is compared with the server, field by field: a connector's `config`,
`labels` and `start_after`, a job's fields given in the file (a field left out keeps the server's
value; new objects get the server's defaults; config keys the server derives itself, listed in its
`config_derived`, count as given). Objects on the server that the file does not name
are left alone, unless `--prune LABEL` says which of them are the file's (tidemark_cli/prune.py):
those it no longer declares are deleted. A change of a connector's source identity (IDENTITY_KEYS) while jobs read from it
is a reset: every job of the connector starts over, so `apply` does it only with `--allow-reset`.
A job's connector, watermark_type and start_position never change: delete the job (`tidemark jobs
delete`) and apply again.
"""

import json
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter

from tidemark_cli import prune as pruning
from tidemark_cli.api import quote
from tidemark_cli.config import UsageError
from tidemark_cli.output import emit_json
from tidemark_cli.pipeline_file import Pipelines, load

# the API's inventory.sources.identity.IDENTITY_KEYS (tests/cli/test_pipelines_files.py keeps them equal)
IDENTITY_KEYS = ("path", "meta_table", "table", "topic", "dsn_env", "job")
CONNECTOR_FIELDS = ("config", "labels", "start_after")
FIXED_JOB_FIELDS = ("connector", "watermark_type", "start_position")


@dataclass
class FieldChange:
    field: str
    old: object
    new: object
    note: str = ""

    def as_dict(self) -> dict:
        out = {"field": self.field, "old": self.old, "new": self.new}
        return {**out, "note": self.note} if self.note else out


@dataclass
class Change:
    kind: str  # connector | job
    name: str
    action: str  # create | change | reset | unchanged | delete
    declared: dict
    fields: list[FieldChange] = field(default_factory=list)
    patch: dict = field(default_factory=dict)
    resets: list[str] = field(default_factory=list)  # fields needing a reset
    fixed: list[str] = field(default_factory=list)  # fields that cannot change
    jobs: list[str] = field(default_factory=list)  # a connector's jobs on the server
    refused: str = ""  # the server's answer to a dry run of the change (check_plan)
    not_checked: str = ""  # why the server was not asked

    @property
    def refusal(self) -> str:
        """Why `apply` would refuse this change as it is ("" when it would not): a field fixed
        after creation, or the server's answer to its dry run."""
        if self.fixed:
            return (
                f"{', '.join(self.fixed)} cannot change after creation (delete it with tidemark "
                f"{self.kind}s delete {self.name} and apply again, or restore the file's value)"
            )
        return self.refused

    def as_dict(self) -> dict:
        out = {
            "kind": self.kind,
            "name": self.name,
            "action": self.action,
            "fields": [f.as_dict() for f in self.fields],
            "needs_reset": self.resets,
            "cannot_change": self.fixed,
        }
        if self.refused:
            out["refused"] = self.refused
        if self.not_checked:
            out["not_checked"] = self.not_checked
        return out


# ---- comparing ----------------------------------------------------------------------------------


def field_diff(prefix: str, old, new) -> list[FieldChange]:
    """Changed leaves of two values, as dotted fields (`config.path`); lists compare whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in sorted(set(old) | set(new), key=str):
            changes += field_diff(f"{prefix}.{key}", old.get(key, _ABSENT), new.get(key, _ABSENT))
        return changes
    if old == new:
        return []
    return [FieldChange(prefix, _shown(old), _shown(new))]


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def _shown(value):
    return None if value is _ABSENT else value


def connector_change(declared: dict, server: dict | None, jobs_of=None) -> Change:
    """What applying `declared` changes on the connector `server` describes. `jobs_of(name)`
    names the connector's jobs (the server gives their count); asked only when a change of the
    source identity needs a reset."""
    name = declared["name"]
    if server is None:
        return Change("connector", name, "create", declared, fields=_created(declared))
    change = Change("connector", name, "unchanged", declared)
    if declared["kind"] != server.get("kind"):
        change.fixed.append("kind")
        change.fields.append(FieldChange("kind", server.get("kind"), declared["kind"]))
    for key in CONNECTOR_FIELDS:
        if key not in declared:
            continue
        compared = declared[key]
        if key == "config" and isinstance(compared, dict):
            # what the server fills in itself (a table's column type) is no change when the file
            # leaves it out; the file's config is what a change sends
            compared = {**(server.get("config_derived") or {}), **compared}
        found = field_diff(key, server.get(key), compared)
        if found:
            change.patch[key] = declared[key]
            change.fields += found
    old_config, new_config = server.get("config") or {}, declared.get("config")
    if new_config is not None:
        for key in IDENTITY_KEYS:
            if old_config.get(key) != new_config.get(key):
                if not change.jobs:
                    change.jobs = _jobs_reading(server, name, jobs_of)
                if change.jobs:
                    change.resets.append(f"config.{key}")
                for f in change.fields:
                    if f.field == f"config.{key}" or f.field.startswith(f"config.{key}."):
                        f.note = _identity_note(change.jobs)
    if change.fields:
        change.action = "reset" if change.resets else "change"
    return change


def _jobs_reading(server: dict, name: str, jobs_of) -> list[str]:
    if "job_count" not in server:  # a server before job_count listed the names
        return list(server.get("jobs") or [])
    if not server["job_count"]:
        return []
    names = list(jobs_of(name)) if jobs_of is not None else []
    return names or [f"({server['job_count']} of them)"]


def _identity_note(jobs: list[str]) -> str:
    if not jobs:
        return "source identity; no job reads the connector, so no reset is needed"
    return f"source identity: needs a reset, jobs {', '.join(jobs)} start over"


def job_change(declared: dict, server: dict | None) -> Change:
    name = declared["name"]
    if server is None:
        return Change("job", name, "create", declared, fields=_created(declared))
    change = Change("job", name, "unchanged", declared)
    for key, value in declared.items():
        if key == "name":
            continue
        found = field_diff(key, server.get(key), value)
        if not found:
            continue
        change.fields += found
        if key in FIXED_JOB_FIELDS:
            change.fixed.append(key)
            for f in found:
                f.note = (
                    f"fixed after creation: delete the job (tidemark jobs delete {name}) "
                    "and apply again to change it"
                )
        else:
            change.patch[key] = value
    if change.fields:
        change.action = "change"
    return change


def _created(declared: dict) -> list[FieldChange]:
    return [FieldChange(k, None, v) for k, v in declared.items() if k != "name"]


def make_plan(api, pipelines: Pipelines, *, prune: str | None = None) -> list[Change]:
    """What applying `pipelines` changes; with `prune`, the deletions of the objects labelled
    `prune` (and their jobs) that the file no longer declares come last."""

    def jobs_of(connector: str) -> list[str]:
        return [job["name"] for job in api.listing("jobs/", connector__name=connector)]

    changes = [
        connector_change(c, api.get_or_none(f"connectors/{quote(c['name'])}/"), jobs_of)
        for c in pipelines.connectors
    ]
    changes += [job_change(j, api.get_or_none(f"jobs/{quote(j['name'])}/")) for j in pipelines.jobs]
    changes = _in_order(changes)
    if prune is not None:
        changes += pruning.deletions(api, pipelines, prune, Change)
    return changes


def _in_order(changes: list[Change]) -> list[Change]:
    """Connectors before the jobs that read them; a job_output connector after its upstream job."""
    declared = {(c.kind, c.name): c for c in changes}
    graph = TopologicalSorter()
    for change in changes:
        graph.add(
            (change.kind, change.name), *(n for n in _needs(change, changes) if n in declared)
        )
    try:
        order = list(graph.static_order())
    except CycleError as exc:
        cycle = " -> ".join(f"{k} {n}" for k, n in exc.args[1])
        raise UsageError(f"the file's connectors and jobs depend on each other: {cycle}") from None
    return [declared[node] for node in order]


def check_plan(api, changes: list[Change], *, reason: str) -> None:
    """Ask the server to dry-run each change (`?dry_run=true`: every check of the real call, the
    source's included, nothing kept) and note what it refuses on the change. A change that needs
    an object the plan creates first (a job's connector, a job_output connector's upstream job)
    cannot be tried before that object exists: it is checked when applied."""
    from tidemark_cli.api import error_line
    from tidemark_client import TidemarkError

    to_check = [c for c in changes if c.action != "unchanged" and not c.fixed]
    if not to_check:
        return
    missing = _no_dry_runs(api)
    if missing:
        for change in to_check:
            change.not_checked = missing
        return
    created = {(c.kind, c.name) for c in changes if c.action == "create"}
    deleted = {(c.kind, c.name) for c in changes if c.action == "delete"}
    for change in to_check:
        if change.action == "delete" and _deleted_after_others(change, deleted):
            change.not_checked = "checked when applied, after what depends on it is deleted"
            continue
        first = next((n for n in _needs(change, changes) if n in created), None)
        if first is not None:
            change.not_checked = f"checked when applied, after {first[0]} {first[1]} is created"
            continue
        try:
            _send(api, change, reason=reason, dry_run=True)
        except TidemarkError as exc:
            if exc.status in (400, 409):
                change.refused = error_line(exc)
            elif exc.status == 403:
                change.not_checked = "your role may not make this change"
            else:
                raise


def _no_dry_runs(api) -> str:
    """Why the server cannot be asked for dry runs, or "" when it can. A server from before dry
    runs would take `?dry_run=true` for a real write, so it is asked first with a body that can
    never be saved (empty) and a dry_run value that is neither true nor false: a server with dry
    runs refuses the value (400 naming dry_run), one without them the body."""
    from tidemark_client import TidemarkError

    try:
        api.call("POST", "connectors/", {}, params={"dry_run": "probe"})
    except TidemarkError as exc:
        if exc.status == 403:
            return "your role may not make this change"
        if exc.status == 400 and isinstance(exc.payload, dict) and "dry_run" in exc.payload:
            return ""
    return "not checked: this server has no dry runs (an older release)"


def _deleted_after_others(change: Change, deleted: set) -> bool:
    """A deletion that waits for others of the plan (a connector's jobs): its dry run alone
    would be refused for them."""
    return change.kind == "connector" and any(("job", j) in deleted for j in change.jobs)


def _needs(change: Change, changes: list[Change]) -> list[tuple[str, str]]:
    """What must exist before `change` is made: a job's connector, a job_output connector's
    upstream job, and the connectors a connector's start_after names (by name or label)."""
    if change.kind == "job":
        return [("connector", change.declared.get("connector"))]
    needs = []
    if change.declared.get("kind") == "job_output":
        upstream = (change.declared.get("config") or {}).get("job")
        if isinstance(upstream, str):
            needs.append(("job", upstream))
    after = change.declared.get("start_after")
    if after:
        needs.extend(
            ("connector", other.name)
            for other in changes
            if other.kind == "connector"
            and other.name != change.name
            and (other.name == after or after in (other.declared.get("labels") or []))
        )
    return needs


def summary(changes: list[Change]) -> dict:
    counts = {"create": 0, "change": 0, "reset": 0, "unchanged": 0, "delete": 0}
    for change in changes:
        counts[change.action] += 1
    return counts


# ---- plan ---------------------------------------------------------------------------------------

SIGNS = {"create": "+", "change": "~", "reset": "!", "unchanged": "=", "delete": "-"}


def print_plan(changes: list[Change]) -> None:
    for change in changes:
        title = {
            "create": "create",
            "change": "change",
            "reset": "change that needs a reset",
            "unchanged": "no change",
            "delete": _deletion_title(change),
        }[change.action]
        if change.fixed:
            title = "change refused (fields fixed after creation)"
        print(f"{SIGNS[change.action]} {change.kind} {change.name}: {title}")
        for f in change.fields:
            if change.action == "create":
                line = f"    {f.field}: {_value(f.new)}"
            else:
                line = f"    {f.field}: {_value(f.old)} -> {_value(f.new)}"
            if f.note:
                line += f"   [{f.note}]"
            print(line)
        if change.refused:
            print(f"    refused by the server: {change.refused}")
        elif change.not_checked:
            print(f"    ({change.not_checked})")
    counts = summary(changes)
    refused = ", ".join(
        f"{n} {why}"
        for n, why in (
            (sum(1 for c in changes if c.fixed), "refused (fields fixed after creation)"),
            (sum(1 for c in changes if c.refused and not c.fixed), "refused by the server"),
        )
        if n
    )
    print(
        f"\nPlan: {counts['create']} to create, {counts['change']} to change, "
        f"{counts['reset']} to reset, {counts['unchanged']} unchanged"
        + (f", {counts['delete']} to delete" if counts["delete"] else "")
        + (f"; {refused}." if refused else ".")
    )
    if counts["reset"]:
        print("A reset makes every job of the connector start over: apply it with --allow-reset.")


def _deletion_title(change: Change) -> str:
    if change.kind == "job":
        return (
            "delete (not in the file): its batches and watermark history go, its sink's data stays"
        )
    return "delete (not in the file): its registered items go"


def _value(value) -> str:
    return "(none)" if value is None else json.dumps(value, default=str)


def cmd_plan(api, out, args) -> int:
    changes = make_plan(api, load(args.file), prune=args.prune)
    check_plan(api, changes, reason=PLAN_REASON)
    if out.json:
        emit_json({"changes": [c.as_dict() for c in changes], "summary": summary(changes)})
    else:
        print_plan(changes)
    refused = [c for c in changes if c.refusal]
    if refused:
        # the plan is printed; the exit status and one line say it cannot be applied as it is
        first = refused[0]
        raise UsageError(
            f"{first.kind} {first.name}: {first.refusal}"
            + (f" (and {len(refused) - 1} more refused)" if len(refused) > 1 else "")
        )
    return 0


# the reason a plan's dry run of a reset gives (a reset needs one; nothing is kept)
PLAN_REASON = "tidemark plan (dry run)"


# ---- apply --------------------------------------------------------------------------------------


def cmd_apply(api, out, args) -> int:
    pipelines = load(args.file)
    done, counts = apply(
        api,
        pipelines,
        allow_reset=args.allow_reset,
        reason=args.reason,
        echo=None if out.json else _print_now,
        prune=args.prune,
    )
    if out.json:
        emit_json({"applied": done, "summary": counts})
    else:
        print(applied_line(pipelines, done, counts))
    return 0


def _print_now(line: str) -> None:
    print(line, flush=True)


def apply(api, pipelines: Pipelines, *, allow_reset: bool, reason: str, echo=None, prune=None):
    """Make the server match `pipelines`: the plan, refused whole if it needs a reset not
    allowed or changes a fixed field, then one write per change in dependency order. `echo` gets
    each change's line as it is made. Returns what was applied and the plan's counts. `tidemark
    apply` and `make demo` both apply files through this function."""
    changes = make_plan(api, pipelines, prune=prune)
    _refuse(changes, allow_reset=allow_reset)
    check_plan(api, changes, reason=reason)
    for change in changes:
        if change.refused:
            raise UsageError(f"{change.kind} {change.name}: {change.refused}; nothing applied")
    done = []
    for change in changes:
        if change.action == "unchanged":
            continue
        message = _apply_one(api, change, reason=reason)
        done.append({**change.as_dict(), "message": message})
        if echo is not None:
            echo(message)
    return done, summary(changes)


def applied_line(pipelines: Pipelines, done: list[dict], counts: dict) -> str:
    if not done:
        return (
            f"No changes: the {len(pipelines.connectors)} connector(s) and "
            f"{len(pipelines.jobs)} job(s) of {pipelines.path} already match the server."
        )
    return (
        f"Applied: {counts['create']} created, {counts['change']} changed, "
        f"{counts['reset']} reset, {counts['unchanged']} unchanged"
        + (f", {counts['delete']} deleted." if counts["delete"] else ".")
    )


def _refuse(changes: list[Change], *, allow_reset: bool) -> None:
    for change in changes:
        if change.fixed:
            raise UsageError(f"{change.kind} {change.name}: {change.refusal}; nothing applied")
    resets = [c for c in changes if c.resets]
    if resets and not allow_reset:
        first = resets[0]
        raise UsageError(
            f"connector {first.name}: changing {', '.join(first.resets)} needs a reset (jobs "
            f"{', '.join(first.jobs)} start over); run with --allow-reset to do it; nothing applied"
        )


def _apply_one(api, change: Change, *, reason: str) -> str:
    from tidemark_cli.api import error_line
    from tidemark_client import TidemarkError

    try:
        return _send(api, change, reason=reason)
    except TidemarkError as exc:
        # the first failure stops the run; what was applied before it stays (apply again after
        # fixing the file: applied objects then show as unchanged)
        raise UsageError(f"{change.kind} {change.name}: {error_line(exc)}") from None


def _send(api, change: Change, *, reason: str, dry_run: bool = False) -> str:
    """The writes of one change; with `dry_run` the server checks them and keeps nothing."""
    params = {"dry_run": "true"} if dry_run else None

    def post(path, body):
        return api.call("POST", path, body, params=params)

    def patch(path, body):
        return api.call("PATCH", path, body, params=params)

    if change.action == "delete":
        api.call("DELETE", pruning.delete_path(change), params=params)
        return pruning.deleted_line(change)
    declared = change.declared
    if change.kind == "connector":
        path = f"connectors/{quote(change.name)}/"
        if change.action == "create":
            post("connectors/", declared)
            return f"created connector {change.name}"
        if change.resets:
            post(path + "reset/", {"config": declared["config"], "reason": reason})
            rest = {k: v for k, v in change.patch.items() if k != "config"}
            if rest:
                patch(path, rest)
            return f"reset connector {change.name} ({', '.join(change.resets)}): jobs start over"
        patch(path, change.patch)
        return f"changed connector {change.name}: {_fields(change)}"
    if change.action == "create":
        post("jobs/", declared)
        return f"created job {change.name}"
    patch(f"jobs/{quote(change.name)}/", change.patch)
    return f"changed job {change.name}: {_fields(change)}"


def _fields(change: Change) -> str:
    return ", ".join(f.field for f in change.fields)
