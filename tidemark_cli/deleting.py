"""`tidemark jobs delete NAME` and `tidemark connectors delete NAME` (admin).

Before deleting, the command says what goes with the object and asks; `--yes` answers for a
script, and without a terminal to ask on, the command refuses rather than guess. `--dry-run` has
the server check the deletion and keep everything. The server refuses a job with a running batch
(cancel it or let it finish) and a connector that jobs still read (delete them first), each with a
409 whose message is printed as one line.
"""

import sys

from tidemark_cli.api import quote
from tidemark_cli.config import UsageError


def job_delete(api, out, args) -> int:
    job = api.get(f"jobs/{quote(args.name)}/")
    counts = job.get("batch_counts") or {}
    batches = sum(counts.values()) if isinstance(counts, dict) else 0
    sink = (job.get("sink") or {}).get("kind", "its sink")
    what = (
        f"job {args.name}: its {batches} batch(es), its watermark and their history go; "
        f"what it wrote to its {sink} sink stays"
    )
    return _delete(api, out, args, f"jobs/{quote(args.name)}/", what, "job")


def connector_delete(api, out, args) -> int:
    connector = api.get(f"connectors/{quote(args.name)}/")
    if connector.get("job_count"):
        jobs = [job["name"] for job in api.listing("jobs/", limit=20, connector__name=args.name)]
        # the server refuses it too; saying so here names the way out before asking anything
        raise UsageError(
            f"connector {args.name} is read by job(s) {', '.join(jobs)}; delete them first "
            f"(tidemark jobs delete NAME)"
        )
    what = f"connector {args.name}: its registered items go; its files or source stay"
    return _delete(api, out, args, f"connectors/{quote(args.name)}/", what, "connector")


def _delete(api, out, args, path: str, what: str, kind: str) -> int:
    if args.dry_run:
        api.call("DELETE", path, params={"dry_run": "true"})
        out.done(
            f"would delete {what} (dry run: nothing deleted)", {"deleted": False, kind: args.name}
        )
        return 0
    if not args.yes:
        _confirm(f"Delete {what}? [y/N] ")
    api.call("DELETE", path)
    out.done(f"deleted {what}", {"deleted": True, kind: args.name})
    return 0


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise UsageError("deleting asks first: run it in a terminal or add --yes")
    try:
        answer = input(question).strip().lower()
    except EOFError:
        answer = ""
    if answer not in ("y", "yes"):
        raise UsageError("not deleted")


def add_arguments(parser) -> None:
    parser.add_argument("name")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask first")
    parser.add_argument(
        "--dry-run", action="store_true", help="have the server check it; delete nothing"
    )
