"""factory_boy factories for the inventory; jobs are created through the service (with a watermark)."""

import factory
from django.conf import settings

from inventory.models import Asset, Connector, ConnectorKind
from inventory.services.jobs import job_create


class ConnectorFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Connector

    name = factory.Sequence(lambda n: f"connector-{n}")
    kind = ConnectorKind.FILES
    # a directory under the allowed roots (conftest): the data folder
    config = factory.LazyFunction(lambda: {"path": str(settings.DATA_DIR / "landing")})


class AssetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Asset

    connector = factory.SubFactory(ConnectorFactory)
    # inside its connector's directory, as discovery and assets/ register them
    location = factory.LazyAttributeSequence(
        lambda asset,
        n: f"{(asset.connector.config or {}).get('path', '/data')}/file-{n:06d}.parquet"
    )
    weight = 10


_job_counter = iter(range(1_000_000))


def make_job(*, connector=None, name=None, batch_weight=100, max_items=10, **options):
    return job_create(
        name=name or f"job-{next(_job_counter)}",
        connector=connector or ConnectorFactory(),
        batch_weight=batch_weight,
        max_items=max_items,
        **options,
    )


def make_assets(connector, weights):
    """Register assets with the given weights, in order; returns them (ids ascending)."""
    return [AssetFactory(connector=connector, weight=w) for w in weights]


def execute_refused_before_spark(batch):
    """Run `batch` through the worker's path with an executor that fails the test if it is ever
    reached, and return the stored batch: for the rules that must stop a batch before Spark."""
    from inventory.models import Batch
    from workers import execution

    def executor_for(name):
        def run(spec, cancel):
            raise AssertionError("the Spark side must not be reached")

        return run

    execution.batch_execute(batch_id=batch.pk, executor_for=executor_for, worker="w:1")
    return Batch.objects.get(pk=batch.pk)


def many_jobs(connector, n: int, *, prefix: str = "bulk") -> list:
    """`n` jobs of `connector` with their watermarks at the start, in two statements (the rows
    job_create writes): for the tests that need hundreds of jobs, not their history."""
    from inventory.models import Job, Watermark

    jobs = Job.objects.bulk_create(
        [Job(connector=connector, name=f"{prefix}-{i:04d}", batch_weight=100) for i in range(n)]
    )
    Watermark.objects.bulk_create([Watermark(job=job, type="int", position=0) for job in jobs])
    return jobs
