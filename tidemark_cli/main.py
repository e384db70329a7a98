"""`tidemark`: the command line of Tidemark (docs/cli.md). Parses the arguments, finds the server
and the token, runs one command; any error is one line on stderr and a non-zero exit."""

import argparse
import getpass
import os
import sys

from tidemark_cli import deleting
from tidemark_cli import resources as r
from tidemark_cli.api import Api, error_line
from tidemark_cli.config import (
    UsageError,
    checked_token,
    forget_login,
    normalize_url,
    resolve_token,
    resolve_url,
    store_login,
)
from tidemark_cli.output import Printer
from tidemark_client import TidemarkError

EXIT_ERROR = 1
EXIT_USAGE = 2


def _common(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """--url and --output, accepted before and after the command (`tidemark -o json jobs` and
    `tidemark jobs -o json`)."""
    missing = argparse.SUPPRESS
    parser.add_argument(
        "--url",
        default=None if defaults else missing,
        help="the server (default: $TIDEMARK_URL, else the one `tidemark login` used)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table" if defaults else missing,
        help="table (default) or json",
    )


class Commands:
    """Adds commands whose leaf parsers all take the common options."""

    def __init__(self, subparsers):
        self.subparsers = subparsers

    def add(self, name: str, func, help: str, *, aliases=(), needs_api=True):
        parser = self.subparsers.add_parser(name, help=help, aliases=list(aliases))
        _common(parser, defaults=False)
        parser.set_defaults(func=func, needs_api=needs_api)
        return parser

    def group(self, name: str, help: str, *, aliases=(), default=None):
        """A resource with subcommands; without one, `default` runs (its list)."""
        parser = self.subparsers.add_parser(name, help=help, aliases=list(aliases))
        _common(parser, defaults=False)
        if default is not None:
            parser.set_defaults(func=default, needs_api=True)
        sub = parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
        return parser, Commands(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark",
        description="Tidemark from the command line: connectors, jobs, batches, backfills, "
        "pipelines as code (plan/apply), processors on a sample.",
    )
    _common(parser, defaults=True)
    top = Commands(parser.add_subparsers(dest="command", metavar="COMMAND"))

    login = top.add("login", cmd_login, "get an API token and store it", needs_api=False)
    login.add_argument("--username", "-u", help="default: asked")
    login.add_argument(
        "--token", help="store this token instead (checked against the server first)"
    )
    login.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    top.add("logout", cmd_logout, "forget the stored token of the server", needs_api=False)

    # connectors
    g, sub = top.group("connectors", "connectors", aliases=["connector"], default=r.connectors_list)
    g.add_argument("--kind")
    g.add_argument("--state")
    lst = sub.add("list", r.connectors_list, "list connectors")
    lst.add_argument("--kind")
    lst.add_argument("--state")
    sub.add("show", r.connector_show, "one connector").add_argument("name")
    items = sub.add("items", r.connector_items, "its registered items, newest first")
    items.add_argument("name")
    items.add_argument("--limit", type=_at_least_one, default=50)
    for verb in ("pause", "resume", "discover"):
        sub.add(verb, r.connector_action(verb), f"{verb} a connector").add_argument("name")
    deleting.add_arguments(
        sub.add("delete", deleting.connector_delete, "delete a connector no job reads (admin)")
    )

    # jobs
    g, sub = top.group("jobs", "jobs", aliases=["job"], default=r.jobs_list)
    for p in (g, sub.add("list", r.jobs_list, "list jobs")):
        p.add_argument("--connector")
        p.add_argument("--paused", type=_bool, default=None)
    sub.add("show", r.job_show, "one job: settings, watermark, lag, batches").add_argument("name")
    sub.add("run", r.job_run, "plan the job's new items now").add_argument("name")
    for verb in ("pause", "resume"):
        sub.add(verb, r.job_action(verb), f"{verb} a job").add_argument("name")
    deleting.add_arguments(
        sub.add("delete", deleting.job_delete, "delete a job, its batches and history (admin)")
    )
    watch = sub.add("watch", r.job_watch, "follow a job's progress until interrupted")
    watch.add_argument("name")
    watch.add_argument("--interval", type=_seconds, default=2.0, help="seconds between looks")

    # watermarks
    g, sub = top.group("watermark", "a job's watermark", aliases=["watermarks"])
    sub.add("show", r.watermark_show, "the job's watermark").add_argument("job")
    hist = sub.add("history", r.watermark_history, "every change of the job's watermark")
    hist.add_argument("job")
    hist.add_argument("--limit", type=_at_least_one, default=50)
    correct = sub.add("correct", r.watermark_correct, "move the watermark (audited)")
    correct.add_argument("job")
    correct.add_argument("value", help="the new value (JSON, e.g. 42 or '\"2026-01-01T00:00Z\"')")
    correct.add_argument("--reason", required=True, help="why (recorded with your name)")
    correct.add_argument("--replay", action="store_true", help="confirm moving it backwards")
    correct.add_argument(
        "--skip-unseen",
        action="store_true",
        help="confirm moving it past the last known item (later items there are skipped)",
    )
    correct.add_argument("--position", type=int, help="non-int watermarks only")

    # batches
    g, sub = top.group("batches", "batches", aliases=["batch"], default=r.batches_list)
    for p in (g, sub.add("list", r.batches_list, "list batches, newest first")):
        _batch_filters(p)
    sub.add("show", r.batch_show, "one batch with attempts, error, result").add_argument(
        "id", type=int
    )
    sub.add("items", r.batch_items, "the items a batch covers").add_argument("id", type=int)
    sub.add("retry", r.batch_action("retry"), "send a dead or failed batch back").add_argument(
        "id", type=int
    )
    cancel = sub.add("cancel", r.batch_action("cancel"), "cancel a batch")
    cancel.add_argument("id", type=int)
    cancel.add_argument("--reason")
    skip = sub.add("skip", r.batch_action("skip"), "skip a dead batch (admin)")
    skip.add_argument("id", type=int)
    skip.add_argument("--reason", required=True)

    # backfills
    g, sub = top.group("backfills", "backfills", aliases=["backfill"], default=r.backfills_list)
    for p in (g, sub.add("list", r.backfills_list, "list backfills with progress")):
        p.add_argument("--job")
        p.add_argument("--status")
        p.add_argument("--limit", type=_at_least_one, default=50)
    sub.add("show", r.backfill_show, "one backfill").add_argument("id", type=int)
    _backfill_range(sub.add("preview", r.backfill_preview, "the plan of a backfill"))
    create = sub.add("create", r.backfill_create, "create a backfill")
    _backfill_range(create)
    create.add_argument("--max-concurrency", type=int, default=1)
    create.add_argument("--priority", type=int, default=0, help=">0 before incremental work")
    create.add_argument("--reason")
    for verb in ("pause", "resume", "cancel"):
        sub.add(verb, r.backfill_action(verb), f"{verb} a backfill").add_argument("id", type=int)

    top.add("alerts", r.alerts_list, "active alerts")

    # pipelines as code
    from tidemark_cli import pipelines

    plan = top.add("plan", pipelines.cmd_plan, "what `apply` would create, change or leave")
    plan.add_argument("-f", "--file", required=True, help="the pipelines file (YAML)")
    _prune(plan)
    apply = top.add("apply", pipelines.cmd_apply, "create and change what the file declares")
    apply.add_argument("-f", "--file", required=True, help="the pipelines file (YAML)")
    apply.add_argument(
        "--allow-reset",
        action="store_true",
        help="reset connectors whose source identity changes (their jobs start over)",
    )
    apply.add_argument("--reason", default="tidemark apply", help="recorded with a reset")
    _prune(apply)

    # processors
    from tidemark_cli import processors

    g, sub = top.group("processor", "processors", aliases=["processors"])
    sub.add("list", processors.cmd_list, "processors installed here", needs_api=False)
    run = sub.add("run", processors.cmd_run, "run a processor locally on a connector's sample")
    run.add_argument("name")
    run.add_argument("--connector", required=True)
    run.add_argument("--sample", type=int, default=5, help="how many of its newest items")
    run.add_argument("--params", default="{}", help="the processor's params as JSON")
    run.add_argument("--rows", type=int, default=20, help="rows to show")
    run.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    run.add_argument(
        "-v", "--verbose", action="store_true", help="show Spark's own log (errors only without)"
    )
    return parser


def _prune(p) -> None:
    p.add_argument(
        "--prune",
        metavar="LABEL",
        help="also delete the connectors labelled LABEL that the file does not declare, and the "
        "jobs it does not declare that read them or its connectors",
    )


def _batch_filters(p) -> None:
    p.add_argument("--job")
    p.add_argument("--status", action="append", help="repeatable")
    p.add_argument("--kind", choices=["incremental", "backfill"])
    p.add_argument("--backfill", type=int)
    p.add_argument("--limit", type=_at_least_one, default=50)


def _backfill_range(p) -> None:
    p.add_argument("--job", required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--range", nargs=2, type=int, metavar=("FIRST", "LAST"), help="item ids")
    which.add_argument(
        "--time", nargs=2, metavar=("START", "END"), help="ISO 8601 times with a UTC offset"
    )
    p.add_argument("--batch-weight", type=int)
    p.add_argument("--max-items", type=int)


def _at_least_one(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {raw}")
    return value


def _bool(raw: str) -> bool:
    if raw.lower() in ("true", "yes", "1"):
        return True
    if raw.lower() in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {raw!r}")


# ---- login --------------------------------------------------------------------------------------


def cmd_login(api, out, args) -> int:
    url = normalize_url(args.url or os.environ.get("TIDEMARK_URL") or _ask("Server URL: "))
    if args.token:
        token = checked_token(args.token, "--token")
        check = Api(url, token=token)
        check.get("alerts/")  # a 401 here means the token is wrong, before it is stored
        username = "(token)"
    else:
        username = args.username or _ask("Username: ")
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = getpass.getpass("Password: ")
        answer = Api(url, token=None).post(
            "auth/token/", {"username": username, "password": password}
        )
        token, username = answer["token"], answer["username"]
    path = store_login(url, token=token, username=username)
    out.done(
        f"logged in to {url} as {username}; token stored in {path}",
        {"url": url, "username": username, "config": str(path)},
    )
    return 0


def cmd_logout(api, out, args) -> int:
    url = resolve_url(args.url)
    forgotten = forget_login(url)
    out.done(
        f"forgot the token of {url}" if forgotten else f"no token stored for {url}",
        {"url": url, "forgotten": forgotten},
    )
    return 0


def _ask(prompt: str) -> str:
    try:
        value = input(prompt).strip()
    except EOFError:
        value = ""
    if not value:
        raise UsageError(prompt.rstrip(": ").lower() + " is needed")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    out = Printer(args.output)
    try:
        api = None
        if args.needs_api:
            url = resolve_url(args.url)
            api = Api(url, token=resolve_token(url))
        return args.func(api, out, args)
    except TidemarkError as exc:
        return r.fail(error_line(exc))
    except UsageError as exc:
        return r.fail(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
