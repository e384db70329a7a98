"""`tidemark plan --prune LABEL` and `tidemark apply --prune LABEL`: also delete what the file no
longer declares, within the objects the label marks as the file's.

A server holds other people's objects too, so a file never claims everything it does not name:
the label says which are its own. Pruned are the connectors carrying LABEL that the file does not
declare, and the jobs it does not declare that read a connector carrying LABEL or one the file
declares. Deletions go after every create and change, jobs before the connectors they read, and
the readers of a job's commits (job_output connectors) before that job; the server refuses what
still has a dependent outside the prune (a 409 naming it), and the plan shows that refusal.
Deleting a job takes its batches and watermark history with it; what it wrote to its sink stays.
"""

from collections import defaultdict
from graphlib import TopologicalSorter

from tidemark_cli.pipeline_file import Pipelines


def deletions(api, pipelines: Pipelines, label: str, change_class) -> list:
    """The Changes (action "delete") of objects to prune, in the order they can be deleted."""
    declared_connectors = {c["name"] for c in pipelines.connectors}
    declared_jobs = {j["name"] for j in pipelines.jobs}
    connectors = api.listing("connectors/")
    labelled = {c["name"] for c in connectors if label in (c.get("labels") or [])}
    owned = labelled | declared_connectors
    every_job = api.listing("jobs/")
    jobs_of = defaultdict(list)
    for job in every_job:
        jobs_of[job.get("connector")].append(job["name"])
    jobs = [j for j in every_job if j["name"] not in declared_jobs and j.get("connector") in owned]
    gone = {("job", j["name"]): j for j in jobs}
    gone.update(
        {
            ("connector", c["name"]): c
            for c in connectors
            if c["name"] in labelled and c["name"] not in declared_connectors
        }
    )
    graph = TopologicalSorter()
    for kind, name in gone:
        if kind == "job":
            # a job_output connector reading this job's commits goes first
            readers = [
                key
                for key, other in gone.items()
                if key[0] == "connector"
                and other.get("kind") == "job_output"
                and (other.get("config") or {}).get("job") == name
            ]
            graph.add((kind, name), *readers)
        else:
            graph.add((kind, name), *[("job", j) for j in jobs_of[name] if ("job", j) in gone])
    changes = []
    for kind, name in graph.static_order():
        change = change_class(kind, name, "delete", {"name": name})
        change.jobs = list(jobs_of[name]) if kind == "connector" else []
        changes.append(change)
    return changes


def delete_path(change) -> str:
    from tidemark_cli.api import quote

    return f"{change.kind}s/{quote(change.name)}/"


def deleted_line(change) -> str:
    if change.kind == "job":
        return (
            f"deleted job {change.name} with its batches and watermark history "
            "(what it wrote to its sink stays)"
        )
    return f"deleted connector {change.name} with its registered items"
