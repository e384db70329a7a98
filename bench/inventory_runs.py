"""bench_inventory's runs: Tidemark and the SQL baseline alternating in slices, and
pybatchintory through its own venv (bench/pybatchintory_driver.py)."""

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inventory_checks import check_ranges, check_tidemark  # noqa: E402
from inventory_clients import (  # noqa: E402
    baseline_client,
    floor_client,
    run_clients,
    tidemark_client,
    tidemark_k_client,
)
from inventory_setup import (  # noqa: E402
    BACKLOGS,
    BUDGET,
    MAX_ITEMS,
    META,
    PEER_DRIVER,
    PEER_INVENTORY,
    PEER_SECONDS,
    PEER_SMALL_JOBS,
    ROUNDS,
    ROWS,
    SECONDS,
    SMALL_JOBS,
    SMALL_QUOTA,
    SQL_BATCHES,
)

# ---- the three systems, one run each ------------------------------------------------------------


def first_item(backlog: int) -> int:
    return 1 if backlog >= ROWS else ROWS - backlog + 1


def tidemark_jobs(connector, backlog: int, count: int, seq: list) -> list[int]:
    from inventory.services.jobs import job_create

    jobs = []
    for _ in range(count):
        seq[0] += 1
        jobs.append(
            job_create(
                name=f"bench-tidemark-{seq[0]}",
                connector=connector,
                batch_weight=BUDGET,
                max_items=MAX_ITEMS,
                start_position=first_item(backlog),
            ).pk
        )
    return jobs


def baseline_jobs(backlog: int, count: int, seq: list) -> list[str]:
    jobs = []
    for _ in range(count):
        seq[0] += 1
        jobs.append(f"bench-sql-{seq[0]}")
    return jobs


def merge(parts: list[dict]) -> dict:
    """Add up the slices of one system's run (latency lists concatenated)."""
    errors: dict = {}
    for part in parts:
        for name, count in part["errors"].items():
            errors[name] = errors.get(name, 0) + count
    return {
        "batches": sum(p["batches"] for p in parts),
        "elapsed": sum(p["elapsed"] for p in parts),
        "acquire_s": [x for p in parts for x in p["acquire_s"]],
        "succeed_s": [x for p in parts for x in p["succeed_s"]],
        "conflicts": sum(p["conflicts"] for p in parts),
        "errors": errors,
        "per_client": [sum(col) for col in zip(*(p["per_client"] for p in parts), strict=True)],
        "slices": [p["batches"] / p["elapsed"] if p["elapsed"] else 0.0 for p in parts],
    }


def tidemark_and_baseline(connector, conn: dict, clients: int, seq: list) -> dict:
    """Tidemark and the SQL baseline at both backlogs, in alternating slices.

    Slices go round-robin (Tidemark 1M, Tidemark k at a time 1M, SQL 1M, Tidemark 10k, SQL 10k,
    and again), so every
    system and backlog sees the same machine load. Backlog 1M: one job per system, continued from
    slice to slice. Backlog 10k: fresh jobs in every slice, each taking SMALL_QUOTA batches.
    """
    state = {}
    for backlog in BACKLOGS:
        state[backlog] = {
            "t_all": [],
            "s_all": [],
            "k_all": [],
            "f_all": [],
            "t_parts": [],
            "s_parts": [],
            "k_parts": [],
            "f_parts": [],
        }
    for index in range(ROUNDS):
        for backlog in BACKLOGS:
            st = state[backlog]
            small = backlog < ROWS
            if small or index == 0:
                count = SMALL_JOBS if small else 1
                st["t_jobs"] = tidemark_jobs(connector, backlog, count, seq)
                st["s_jobs"] = baseline_jobs(backlog, count, seq)
                st["t_all"] += st["t_jobs"]
                st["s_all"] += st["s_jobs"]
                if not small:  # the k and floor arms: at the 1M backlog only, a job each
                    st["k_jobs"] = tidemark_jobs(connector, backlog, 1, seq)
                    st["k_all"] += st["k_jobs"]
                    st["f_jobs"] = tidemark_jobs(connector, backlog, 1, seq)
                    st["f_all"] += st["f_jobs"]
            quota = SMALL_QUOTA if small else None
            seconds = SECONDS / ROUNDS
            st["t_parts"].append(
                run_clients(
                    tidemark_client,
                    clients,
                    {"jobs": st["t_jobs"], "quota": quota, "seconds": seconds},
                )
            )
            if not small:
                st["k_parts"].append(
                    run_clients(
                        tidemark_k_client,
                        clients,
                        {"jobs": st["k_jobs"], "quota": None, "seconds": seconds},
                    )
                )
                st["f_parts"].append(
                    run_clients(
                        floor_client,
                        clients,
                        {
                            "jobs": st["f_jobs"],
                            "quota": None,
                            "seconds": seconds,
                            "conn": conn,
                            "first": first_item(backlog),
                            "budget": BUDGET,
                            "max_items": MAX_ITEMS,
                        },
                    )
                )
            st["s_parts"].append(
                run_clients(
                    baseline_client,
                    clients,
                    {
                        "jobs": st["s_jobs"],
                        "quota": quota,
                        "seconds": seconds,
                        "conn": conn,
                        "first": first_item(backlog),
                        "budget": BUDGET,
                        "max_items": MAX_ITEMS,
                    },
                )
            )
    results = {}
    for backlog in BACKLOGS:
        st = state[backlog]
        first = first_item(backlog)
        tidemark = merge(st["t_parts"])
        tidemark["check"] = check_tidemark(st["t_all"], first)
        baseline = merge(st["s_parts"])
        baseline["check"] = check_ranges(
            f"SELECT job, lo, hi, item_count, status = 'succeeded' FROM {SQL_BATCHES} "
            "WHERE job = ANY(%s)",
            [st["s_all"]],
            first,
        )
        results[("tidemark", backlog)] = tidemark
        results[("sql", backlog)] = baseline
        if st["k_parts"]:
            k_arm = merge(st["k_parts"])
            k_arm["check"] = check_tidemark(st["k_all"], first)
            results[("tidemark_k", backlog)] = k_arm
        if st["f_parts"]:
            floor = merge(st["f_parts"])
            floor["check"] = check_tidemark(st["f_all"], first)
            results[("floor", backlog)] = floor
    return results


def peer_run(
    python: Path, conn: dict, backlog: int, clients: int, seq: list, *, count_cap: bool = True
) -> dict:
    """pybatchintory's run; count_cap=False gives it the weight budget only (no batch_count)."""
    first = first_item(backlog)
    count = 1 if backlog >= ROWS else PEER_SMALL_JOBS
    jobs = []
    for _ in range(count):
        seq[0] += 1
        jobs.append(f"bench-pbi-{seq[0]}")
    spec = {
        "conn": conn,
        "table": META,
        "inventory_table": PEER_INVENTORY,
        "jobs": jobs,
        "quota": None if backlog >= ROWS else SMALL_QUOTA,
        "clients": clients,
        "seconds": PEER_SECONDS,
        "first": first,
        "budget": BUDGET,
        "max_items": MAX_ITEMS if count_cap else None,
    }
    proc = subprocess.run(
        [str(python), str(PEER_DRIVER), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=PEER_SECONDS * 4 + 120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"pybatchintory driver failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    result = json.loads(lines[-1])
    if "fatal" in result:
        raise RuntimeError(f"pybatchintory client failed:\n{result['fatal']}")
    # pybatchintory stores inclusive [batch_id_start, batch_id_end]
    result["check"] = check_ranges(
        f"SELECT job, batch_id_start, batch_id_end + 1, batch_count, status = 'succeeded' "
        f"FROM {PEER_INVENTORY} WHERE job = ANY(%s)",
        [jobs],
        first,
    )
    return result
