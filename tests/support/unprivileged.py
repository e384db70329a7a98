"""Checks that must be seen from an ordinary user's side: root reads every directory, so under
root the check runs in a forked child that has dropped to `nobody`."""

import multiprocessing
import os

from inventory.services.errors import InvalidInput

NOBODY = 65534


def _run_as_nobody(check, path, results) -> None:
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    try:
        check(path)
        results.put(("", "accepted"))
    except InvalidInput as exc:
        results.put((exc.field, exc.message))


def refusal_seen_unprivileged(check, path: str) -> tuple[str, str]:
    """(field, message) of the InvalidInput `check(path)` raises for an unprivileged process, or
    ("", "accepted")."""
    if os.geteuid() != 0:
        try:
            check(path)
        except InvalidInput as exc:
            return exc.field, exc.message
        return "", "accepted"
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_run_as_nobody, args=(check, path, results))
    child.start()
    outcome = results.get(timeout=30)
    child.join(30)
    return outcome
