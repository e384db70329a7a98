"""Kafka connectors: a topic read as offset slices of its partitions, registered as assets.

An item is `[start, end)` of one partition, at most `slice_messages` messages, registered with
location `kafka://<topic>/<partition>/<start>-<end>`, weight = its message count and extra
`{"partition", "start", "end"}`. Discovery reads each partition's end offset and registers slices
from where the last registration stopped; that cursor ({partition: next offset to register}) lives
in `Connector.cursor` and is saved in the transaction that registers the slices, under the
connector's row lock (ids in visibility order, invariant 5). Batches are then ordinary asset-id
ranges; a batch reports `{partition: end}` and the job's key_value watermark keeps the per-partition
maximum over the committed prefix.

Nothing is skipped silently: offsets that retention deleted before they were registered, a
partition whose end went backwards, or a vanished partition stop discovery with an error naming it.
Bounds are in messages only: a slice's size in bytes is unknown until it is read.
"""

import re

from django.db import transaction

from inventory.models import Asset, Batch, Connector, ConnectorState, WatermarkType
from inventory.services import assets, endpoints
from inventory.services.errors import InvalidInput
from inventory.services.secrets import credential_name_check
from inventory.sources.config import check_known_keys
from workers.spark.sources.kafka_client import (
    DEFAULT_TIMEOUT_SECONDS,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    KafkaSourceError,
    below_log_start,
    topic_bounds,
)

DEFAULT_SLICE_MESSAGES = 1000
MAX_SLICE_MESSAGES = 1_000_000
DEFAULT_READ_TIMEOUT_SECONDS = 300
START_FROM_WORDS = ("earliest", "latest")
KEYS = {
    "bootstrap_servers",
    "topic",
    "start_from",
    "slice_messages",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username_env",
    "sasl_password_env",
    "spark_native",
    "timeout_seconds",
    "read_timeout_seconds",
    "lineage",
    "handover",
}
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SERVER = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---- config ------------------------------------------------------------------------------------


def validate(config: dict) -> dict:
    """The config checked offline, then against the broker: it answers, the topic exists, and
    explicit `start_from` offsets lie within their partitions."""
    check_known_keys(config, KEYS, kind="kafka")
    _check_offline(config)
    confine(config)
    try:
        bounds = topic_bounds(config, timeout=_timeout(config))
    except KafkaSourceError as exc:
        raise InvalidInput(exc.field, exc.message) from None
    start_from = config.get("start_from", "earliest")
    if isinstance(start_from, dict):
        _check_explicit_offsets(start_from, bounds)
    return config


def confine(config: dict) -> None:
    """Before any connection: credentials only from allowed variables, and only to allowed
    brokers (`kafka://host:port` in TIDEMARK_ALLOWED_ENDPOINTS)."""
    named = [key for key in ("sasl_username_env", "sasl_password_env") if config.get(key)]
    for key in named:
        credential_name_check(config[key], field=f"config.{key}")
    if named:
        endpoints.kafka_check(config.get("bootstrap_servers"), field="config.bootstrap_servers")


def _check_offline(config: dict) -> None:
    servers = config.get("bootstrap_servers")
    if not isinstance(servers, str) or not all(
        _SERVER.match(part.strip()) for part in servers.split(",")
    ):
        raise InvalidInput(
            "config.bootstrap_servers", "a kafka connector needs host:port[,host:port...]"
        )
    topic = config.get("topic")
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
        raise InvalidInput(
            "config.topic", "a kafka topic name: 1-249 letters, digits, '.', '_' or '-'"
        )
    start_from = config.get("start_from", "earliest")
    if isinstance(start_from, dict):
        if not start_from:
            raise InvalidInput("config.start_from", "name at least one partition's offset")
        for key, offset in start_from.items():
            if not (isinstance(key, str) and key.isdigit()):
                raise InvalidInput("config.start_from", f"key {key!r} is not a partition number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise InvalidInput(
                    "config.start_from", f"partition {key}: offset must be an integer >= 0"
                )
    elif start_from not in START_FROM_WORDS:
        raise InvalidInput(
            "config.start_from",
            'must be "earliest", "latest" or offsets per partition such as {"0": 10, "1": 0}',
        )
    _check_int(config, "slice_messages", 1, MAX_SLICE_MESSAGES)
    _check_int(config, "read_timeout_seconds", 1, 86_400)
    timeout = config.get("timeout_seconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 120
    ):
        raise InvalidInput("config.timeout_seconds", "must be a number of seconds up to 120")
    protocol = config.get("security_protocol")
    if protocol is not None and protocol not in SECURITY_PROTOCOLS:
        raise InvalidInput(
            "config.security_protocol", f"must be one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    mechanism = config.get("sasl_mechanism")
    if mechanism is not None and mechanism not in SASL_MECHANISMS:
        raise InvalidInput("config.sasl_mechanism", f"must be one of {', '.join(SASL_MECHANISMS)}")
    for key in ("sasl_username_env", "sasl_password_env"):
        name = config.get(key)
        if name is not None and not (isinstance(name, str) and _ENV_NAME.fullmatch(name)):
            raise InvalidInput(f"config.{key}", "must be the name of an environment variable")
    handover = config.get("handover")
    if handover is not None and not (
        isinstance(handover, dict)
        and set(handover) == {"partition_column", "offset_column"}
        and all(isinstance(value, str) and value for value in handover.values())
    ):
        raise InvalidInput(
            "config.handover",
            'must be {"partition_column": ..., "offset_column": ...}: the columns of the history '
            "table that hold each row's topic partition and offset",
        )
    for key in ("spark_native", "lineage"):
        if key in config and not isinstance(config[key], bool):
            raise InvalidInput(f"config.{key}", "must be true or false")


def _check_int(config: dict, key: str, lowest: int, highest: int) -> None:
    value = config.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
        raise InvalidInput(f"config.{key}", f"must be an integer from {lowest} to {highest}")


def _check_explicit_offsets(start_from: dict, bounds: dict) -> None:
    for key, offset in sorted(start_from.items(), key=lambda item: int(item[0])):
        partition = int(key)
        if partition not in bounds:
            raise InvalidInput(
                "config.start_from",
                f"partition {partition} does not exist (the topic has {len(bounds)} partitions)",
            )
        low, high = bounds[partition]
        if offset > high:
            raise InvalidInput(
                "config.start_from",
                f"partition {partition}: offset {offset} is past the end of the partition "
                f"(its next offset is {high})",
            )
        if offset < low:
            raise InvalidInput(
                "config.start_from",
                f"partition {partition}: offset {offset} is below the log start {low} "
                "(retention deleted it)",
            )


def _timeout(config: dict) -> float:
    return float(config.get("timeout_seconds") or DEFAULT_TIMEOUT_SECONDS)


def check_watermark_type(watermark_type: str) -> None:
    """A job on a topic keeps a next offset per partition: only a key_value watermark holds it."""
    if watermark_type != WatermarkType.KEY_VALUE:
        raise InvalidInput(
            "watermark_type",
            f"a job on a kafka connector keeps the next offset per partition: use key_value, "
            f"not {watermark_type!r}",
        )


# ---- discovery ---------------------------------------------------------------------------------


def discover(connector: Connector) -> int:
    """Register the slices that became readable since the last look; returns how many.

    A connector that takes its first offsets from a history table (`handover`) registers nothing
    while it waits for that history: its release sets the cursor (`handover_set`)."""
    config = connector.config or {}
    if config.get("handover") and connector.state == ConnectorState.WAITING:
        return 0
    confine(config)
    try:
        bounds = topic_bounds(config, timeout=_timeout(config))  # broker I/O, outside the lock
    except KafkaSourceError as exc:
        raise InvalidInput(exc.field, exc.message) from None
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        cursor = next_offsets(locked.cursor or {}, config, bounds)
        ends = {partition: high for partition, (_low, high) in bounds.items()}
        slices = plan_slices(
            cursor, ends, int(config.get("slice_messages") or DEFAULT_SLICE_MESSAGES)
        )
        topic = config["topic"]
        registered = assets.assets_register(
            connector=locked,
            items=[
                (
                    slice_location(topic, partition, start, end),
                    end - start,
                    {"partition": partition, "start": start, "end": end},
                )
                for partition, start, end in slices
            ],
        )
        for partition, _start, end in slices:
            cursor[partition] = max(cursor[partition], end)
        stored = {str(partition): offset for partition, offset in sorted(cursor.items())}
        if stored != locked.cursor:
            Connector.objects.filter(pk=locked.pk).update(cursor=stored)
            connector.cursor = stored
    return registered


def handover_set(connector: Connector, offsets: dict) -> bool:
    """Start a connector that has not registered anything yet at `offsets` ({partition: next
    offset}, from the history it follows); partitions the history never saw start at their
    earliest offset. Returns whether it set them (False once the connector has a cursor)."""
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        if locked.cursor or not offsets:
            return False
        cursor = {str(partition): int(offset) for partition, offset in sorted(offsets.items())}
        Connector.objects.filter(pk=locked.pk).update(cursor=cursor)
        connector.cursor = cursor
    return True


def next_offsets(stored: dict, config: dict, bounds: dict) -> dict[int, int]:
    """{partition: next offset to register}: the stored cursor, or `start_from` on the first look;
    a partition the cursor does not know yet (added to the topic later, or not named in explicit
    offsets) starts at its earliest offset. InvalidInput when an offset would be lost."""
    if stored:
        cursor = {int(key): int(value) for key, value in stored.items()}
        field = "cursor"
    else:
        start_from = config.get("start_from", "earliest")
        field = "config.start_from"
        if start_from == "latest":
            cursor = {partition: high for partition, (_low, high) in bounds.items()}
        elif isinstance(start_from, dict):
            cursor = {int(key): int(value) for key, value in start_from.items()}
        else:
            cursor = {}
    for partition, (low, _high) in bounds.items():
        cursor.setdefault(partition, low)
    topic = config["topic"]
    for partition, offset in sorted(cursor.items()):
        if partition not in bounds:
            raise InvalidInput(
                "config.topic",
                f"partition {partition} of {topic} vanished (registered up to offset {offset}); "
                "the topic was deleted or recreated: reset the connector",
            )
        high = bounds[partition][1]
        if high < offset:
            raise InvalidInput(
                "config.topic",
                f"partition {topic}/{partition} now ends at offset {high}, before offset {offset} "
                "that was already registered: the topic was recreated or truncated; nothing was "
                "registered (reset the connector to start over)",
            )
    lost = below_log_start({p: (offset, offset) for p, offset in cursor.items()}, bounds)
    if lost:
        raise InvalidInput(field, f"topic {topic}, {lost}; nothing was registered")
    return cursor


def plan_slices(
    cursor: dict[int, int], ends: dict[int, int], slice_messages: int
) -> list[tuple[int, int, int]]:
    """(partition, start, end) slices from each partition's cursor to its end, at most
    `slice_messages` each, interleaved across partitions (a batch takes every partition's next
    slice before any partition's second) so the partitions progress together."""
    per_partition = []
    for partition in sorted(ends):
        start, end = cursor[partition], ends[partition]
        per_partition.append(
            [
                (partition, offset, min(offset + slice_messages, end))
                for offset in range(start, end, slice_messages)
            ]
        )
    rounds = max((len(slices) for slices in per_partition), default=0)
    return [
        slices[index] for index in range(rounds) for slices in per_partition if index < len(slices)
    ]


def slice_location(topic: str, partition: int, start: int, end: int) -> str:
    return f"kafka://{topic}/{partition}/{start}-{end}"


# ---- the worker's spec -------------------------------------------------------------------------


SOURCE_KEYS = (
    "bootstrap_servers",
    "topic",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username_env",
    "sasl_password_env",
    "spark_native",
)


def read_spec(connector: Connector, batch: Batch) -> dict:
    """The batch's slices, in id order, for the worker's reader (workers/spark/sources/kafka.py)."""
    config = connector.config or {}
    rows = Asset.objects.filter(
        connector=connector, id__gte=batch.span.lower, id__lt=batch.span.upper
    ).order_by("id")
    items, slices = [], []
    for location, extra in rows.values_list("location", "extra"):
        items.append(location)
        slices.append(
            {"partition": extra["partition"], "start": extra["start"], "end": extra["end"]}
        )
    source = {"kind": "kafka", **{key: config[key] for key in SOURCE_KEYS if key in config}}
    source["slices"] = slices
    source["read_timeout_seconds"] = int(
        config.get("read_timeout_seconds") or DEFAULT_READ_TIMEOUT_SECONDS
    )
    return {"items": items, "source": source}
