"""The `kafka` kind's object: a topic's offset slices, read by the worker's kafka reader."""

from inventory.sources import kafka
from inventory.sources.base import SourceKind
from inventory.sources.kafka import retention


class KafkaKind(SourceKind):
    name = "kafka"

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        return kafka.validate(config)

    def discover(self, connector) -> int:
        return kafka.discover(connector)

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return kafka.read_spec(connector=connector, batch=batch)

    def confine(self, source: dict, *, field: str) -> None:
        kafka.confine(source)

    def check_watermark_type(self, watermark_type: str) -> None:
        kafka.check_watermark_type(watermark_type)

    def no_time_reason(self) -> str:
        return "its slices are offset ranges and carry no timestamps"

    def hand_over(self, connector, predecessors: list) -> str:
        """A topic that follows its history (`config.handover`) starts at the offsets that
        history's snapshot table was synced to; says what it set."""
        spec = (connector.config or {}).get("handover")
        if not spec or connector.cursor:
            return ""
        history = [
            (c, kind) for c, kind in predecessors if kind.syncs_offsets and c.config.get("snapshot")
        ]
        if len(history) != 1:
            return ""
        [(table, kind)] = history
        offsets = kind.synced_offsets(table, spec["partition_column"], spec["offset_column"])
        kafka.handover_set(connector, offsets)
        shown = ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items()))
        return f"starts after the offsets {table.name} was synced to ({shown or 'none'})"

    def retention_probe(self):
        return retention.probe


KIND = KafkaKind()
