"""`make demo`: the inventory core on embedded services (the worker issue turns it into a pipeline)."""

import json
import random
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from inventory.models import Connector, Job, Watermark
from inventory.services import assets, batches
from inventory.services.connectors import connector_create
from inventory.services.jobs import job_create


class Command(BaseCommand):
    help = "Run the Tidemark demo on embedded PostgreSQL and Redis."

    def handle(self, *args, **options):
        call_command("migrate", verbosity=0)
        data = Path(settings.DATA_DIR) / "demo" / "landing"
        data.mkdir(parents=True, exist_ok=True)
        self._write_files(data, start=0, count=6)

        connector = Connector.objects.filter(name="demo-orders").first() or connector_create(
            name="demo-orders", kind="files", config={"path": str(data), "patterns": ["*.json"]}
        )
        job = Job.objects.filter(name="demo-orders-hourly").first() or job_create(
            name="demo-orders-hourly", connector=connector, batch_weight=4000, max_items=3
        )
        self._round(connector, job, "first files")
        self._write_files(data, start=6, count=3)
        self._round(connector, job, "after new files arrived")

    def _write_files(self, folder: Path, *, start: int, count: int) -> None:
        rng = random.Random(start)
        for n in range(start, start + count):
            path = folder / f"orders-{n:03d}.json"
            if not path.exists():
                rows = [{"order_id": n * 100 + i, "amount": rng.randint(1, 500)} for i in range(20)]
                path.write_text("\n".join(json.dumps(r) for r in rows))

    def _round(self, connector, job, label: str) -> None:
        new = assets.assets_discover(connector=connector)
        processed = []
        while (batch := batches.batch_acquire(job=job, worker="demo")) is not None:
            batches.batch_succeed(batch_id=batch.id, attempt=batch.attempt, result={"demo": True})
            processed.append(f"{batch.id}:{batch.span.lower}-{batch.span.upper - 1}")
        watermark = Watermark.objects.get(job=job)
        self.stdout.write(
            f"{label}: {new} new files registered, batches {processed or 'none'}, "
            f"watermark {watermark.value}"
        )
