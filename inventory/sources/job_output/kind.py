"""The `job_output` kind's object: another job's commits, read by the worker's job_output
reader. Its items are announced by the upstream job's commits, never discovered."""

from django.db.models import Max, Min

from inventory.models import Batch
from inventory.sources import job_output
from inventory.sources.base import SourceKind, TimeBasis
from inventory.sources.locations import object_location_check


class JobOutputKind(SourceKind):
    name = "job_output"
    discovers_items = False

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        return job_output.validate(config)

    def items_are_assets(self, connector) -> bool:
        return False  # its upstream's commits

    def upstream_job(self, config: dict) -> str:
        return (config or {}).get("job") or ""

    def check_new_job(self, *, name: str, connector) -> None:
        job_output.check_new_job(name=name, connector=connector)

    def check_config_change(self, *, connector, config: dict, reset: bool) -> None:
        job_output.check_connector(connector=connector, config=config, reset=reset)

    def check_replay(self, *, job, position: int) -> None:
        job_output.check_replay(job=job, position=position)

    def check_job_delete(self, *, job) -> None:
        job_output.check_job_delete(job=job)

    def item_source(self, connector):
        return job_output.item_source(connector)

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return job_output.read_spec(connector=connector, batch=batch)

    def confine(self, source: dict, *, field: str) -> None:
        # an upstream commit's location comes from its result, which an external processor
        # reports through succeed/: read only where a sink may write
        outputs = [*(source.get("outputs") or ()), source.get("schema_from") or {}]
        for output in outputs:
            if output.get("location"):
                object_location_check(output["location"], field=f"{field}.job")

    def time_basis(self, connector) -> TimeBasis:
        job = (connector.config or {}).get("job")
        return TimeBasis(
            "time",
            f"commit time of job {job}",
            f"the commits of job {job} that finished between the two times",
        )

    def ids_for_times(self, connector, first, last) -> tuple[int, int] | None:
        found = Batch.objects.filter(
            job__name=connector.config.get("job"),
            commit_seq__isnull=False,
            finished_at__gte=first,
            finished_at__lte=last,
        ).aggregate(low=Min("commit_seq"), high=Max("commit_seq"))
        return None if found["low"] is None else (found["low"], found["high"])


KIND = JobOutputKind()
