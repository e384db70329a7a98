"""Running a function in several forked OS processes at once, each with its own database
connection, and failing with every child's traceback (`_run_in_processes`)."""

import multiprocessing
import time
import traceback

from django.db import connections


def _run_in_processes(target, args_list, timeout=120):
    """Fork one process per args tuple (each opens its own connection) and wait for all of them."""
    connections.close_all()  # a forked child must never share the parent's socket
    context = multiprocessing.get_context("fork")
    errors = context.Queue()
    processes = [context.Process(target=_child, args=(target, args, errors)) for args in args_list]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(max(0.1, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, "\n".join(failures)
    assert [p.exitcode for p in processes] == [0] * len(processes)


def _child(target, args, errors):
    try:
        target(*args)
    except BaseException:  # report everything to the parent, which owns the assertions
        errors.put(traceback.format_exc())
        raise
    finally:
        connections.close_all()
