"""Drive pybatchintory 0.0.8 for bench_inventory.py; run by bench/.venv-pybatchintory's python.

Input: one JSON argument (connection, meta table, job names, clients, time cap, budget).
Output: one JSON line on stdout with the batches each client acquired and released as succeeded.
No Django here and nothing from the project: this interpreter only has pybatchintory and its deps.

pybatchintory's API, read from its source: `acquire_batch(job, meta_table_name, batch_id_min,
batch_weight, batch_count, job_identifier)` computes the next id range with a window query over
the meta table, inserts an inventory row (status running) and loads the range's items; then
`batch.succeeded(result=...)` updates that row. Settings come from `configure(settings=...)`.
Concurrent acquirers of one job are detected after the fact with NotImplementedError
("Concurrent changes are not supported"); those attempts are counted here as conflicts.
"""

import json
import logging
import multiprocessing as mp
import statistics
import sys
import time
import traceback


def sqlalchemy_url(conn: dict) -> str:
    from sqlalchemy.engine import URL

    host = conn.get("host")
    query = {}
    if host and host.startswith("/"):  # a unix-socket directory (the embedded server)
        query["host"] = host
        host = None
    return URL.create(
        "postgresql+psycopg2",
        username=conn.get("user"),
        password=conn.get("password"),
        host=host,
        port=int(conn["port"]) if conn.get("port") else None,
        database=conn["dbname"],
        query=query,
    ).render_as_string(hide_password=False)


def configure(spec: dict):
    import pybatchintory
    from pybatchintory import sql

    pybatchintory.configure(
        settings={
            "INVENTORY_CONN": sqlalchemy_url(spec["conn"]),
            "INVENTORY_TABLE_NAME": spec["inventory_table"],
        }
    )
    # its INFO lines go to stderr on every call; quiet them so they cost the peer nothing
    logging.getLogger("pybatchintory").setLevel(logging.WARNING)
    return sql.db


def client(index: int, spec: dict, barrier, counters, queue) -> None:
    try:
        from pybatchintory import acquire_batch
        from pybatchintory.sql.reflection import autoload_meta_table

        configure(spec)
        autoload_meta_table(spec["table"])  # reflection and the first connection, before timing
    except Exception:
        barrier.abort()
        queue.put({"index": index, "fatal": traceback.format_exc()})
        return
    quota = spec.get("quota")
    acquire_s, succeed_s = [], []
    conflicts, errors, done = 0, {}, 0
    try:
        barrier.wait()
    except Exception:
        queue.put({"index": index, "fatal": "barrier broken"})
        return
    started = time.perf_counter()
    deadline = started + spec["seconds"]
    for job_index, job in enumerate(spec["jobs"]):
        exhausted = False
        while not exhausted and time.perf_counter() < deadline:
            if quota is not None:
                with counters.get_lock():
                    if counters[job_index] >= quota:
                        break
                    counters[job_index] += 1
            t0 = time.perf_counter()
            try:
                batch = acquire_batch(
                    job=job,
                    meta_table_name=spec["table"],
                    job_identifier=f"bench-client-{index}",
                    batch_id_min=spec["first"],
                    batch_weight=spec["budget"],
                    batch_count=spec["max_items"],
                )
            except NotImplementedError:
                conflicts += 1
                if quota is not None:
                    with counters.get_lock():
                        counters[job_index] -= 1
                continue
            except Exception as exc:  # count and go on: the run reports what it achieved
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                if quota is not None:
                    with counters.get_lock():
                        counters[job_index] -= 1
                continue
            t1 = time.perf_counter()
            if batch is None:
                exhausted = True
                break
            batch.succeeded(result={"items": len(batch.items)})
            t2 = time.perf_counter()
            acquire_s.append(t1 - t0)
            succeed_s.append(t2 - t1)
            done += 1
        if time.perf_counter() >= deadline:
            break
    queue.put(
        {
            "index": index,
            "batches": done,
            "elapsed": time.perf_counter() - started,
            "acquire_s": acquire_s,
            "succeed_s": succeed_s,
            "conflicts": conflicts,
            "errors": errors,
        }
    )


def run(spec: dict) -> dict:
    db = configure(spec)
    db.initialize_metadata_backend()  # its inventory table (and status enum), if missing
    ctx = mp.get_context("spawn")
    clients = spec["clients"]
    barrier = ctx.Barrier(clients)
    counters = ctx.Array("i", len(spec["jobs"]))
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=client, args=(i, spec, barrier, counters, queue)) for i in range(clients)
    ]
    for proc in procs:
        proc.start()
    results = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    fatal = [r["fatal"] for r in results if "fatal" in r]
    if fatal:
        return {"fatal": fatal[0]}
    acquire = [x for r in results for x in r["acquire_s"]]
    succeed = [x for r in results for x in r["succeed_s"]]
    errors: dict = {}
    for r in results:
        for name, count in r["errors"].items():
            errors[name] = errors.get(name, 0) + count
    return {
        "batches": sum(r["batches"] for r in results),
        "elapsed": max(r["elapsed"] for r in results),
        "acquire_s": acquire,
        "succeed_s": succeed,
        "conflicts": sum(r["conflicts"] for r in results),
        "errors": errors,
        "per_client": [r["batches"] for r in results],
    }


def versions() -> dict:
    from importlib.metadata import version

    return {
        name: version(name)
        for name in ("pybatchintory", "pydantic", "SQLAlchemy", "psycopg2-binary")
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--versions"]:
        print(json.dumps(versions()))
        sys.exit(0)
    spec = json.loads(sys.argv[1])
    result = run(spec)
    result["median_acquire_s"] = (
        statistics.median(result["acquire_s"]) if result.get("acquire_s") else None
    )
    print(json.dumps(result))
