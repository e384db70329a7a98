"""Kafka client settings and partition bounds, shared by discovery (control plane) and the reader.

No Django and no Spark here: the control plane imports this module to look at a topic, the worker
to read one. Credentials arrive only as environment-variable names (`sasl_username_env`,
`sasl_password_env`) and are resolved in the process that connects.
"""

import os

from confluent_kafka import Consumer, KafkaException, TopicPartition

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_TIMEOUT_SECONDS = 10.0


class KafkaSourceError(Exception):
    """The topic cannot be looked at or read as configured. `field` names the config key to fix."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def client_config(source: dict, *, environ=None) -> dict:
    """librdkafka settings for a connector's (or a batch spec's) `source` settings."""
    environ = os.environ if environ is None else environ
    config = {
        "bootstrap.servers": source["bootstrap_servers"],
        # a broker that goes away must not flood the worker's log with reconnect lines
        "log.connection.close": False,
        "socket.connection.setup.timeout.ms": 5000,
    }
    protocol = source.get("security_protocol")
    if protocol:
        config["security.protocol"] = protocol
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        config["sasl.mechanism"] = source.get("sasl_mechanism") or "PLAIN"
        for key, setting in (
            ("sasl_username_env", "sasl.username"),
            ("sasl_password_env", "sasl.password"),
        ):
            name = source.get(key)
            if not name or name not in environ:
                raise KafkaSourceError(
                    f"config.{key}",
                    f"environment variable {name!r} is not set in this process"
                    if name
                    else f"{protocol} needs {key} (the name of an environment variable)",
                )
            config[setting] = environ[name]
    return config


def consumer_config(source: dict, *, environ=None, **settings) -> dict:
    """A consumer's librdkafka settings for the source; `environ` maps the credential variables'
    names to their values (default: this process's environment)."""
    return {
        **client_config(source, environ=environ),
        "group.id": "tidemark",  # never joined: partitions are assigned, offsets never committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        **settings,
    }


def open_consumer(source: dict, *, environ=None, **settings) -> Consumer:
    """A consumer for the source (see `consumer_config`)."""
    return Consumer(consumer_config(source, environ=environ, **settings))


def topic_partitions(consumer: Consumer, topic: str, *, timeout: float) -> list[int]:
    """The topic's partition ids. Lists all topics rather than asking for this one: a metadata
    request naming a topic makes brokers with auto-creation (Tansu does) create it."""
    try:
        metadata = consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise KafkaSourceError(
            "config.bootstrap_servers", f"no Kafka broker answered within {timeout:g} s: {exc}"
        ) from None
    found = metadata.topics.get(topic)
    if found is None:
        raise KafkaSourceError("config.topic", f"topic {topic!r} does not exist on the broker")
    if found.error is not None:
        raise KafkaSourceError("config.topic", f"topic {topic!r}: {found.error.str()}")
    return sorted(found.partitions)


def partition_bounds(
    consumer: Consumer, topic: str, partitions: list[int], *, timeout: float
) -> dict[int, tuple[int, int]]:
    """{partition: (log start offset, end offset)}: the first offset still stored and the next
    offset to be written (the high-water mark the broker reports)."""
    bounds = {}
    for partition in partitions:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )
        except KafkaException as exc:
            raise KafkaSourceError(
                "config.bootstrap_servers",
                f"cannot read the offsets of {topic}/{partition} within {timeout:g} s: {exc}",
            ) from None
        bounds[partition] = (low, high)
    return bounds


def topic_bounds(source: dict, *, timeout: float) -> dict[int, tuple[int, int]]:
    """Every partition of the source's topic with its (log start, end) offsets."""
    consumer = open_consumer(source)
    try:
        partitions = topic_partitions(consumer, source["topic"], timeout=timeout)
        return partition_bounds(consumer, source["topic"], partitions, timeout=timeout)
    finally:
        consumer.close()


def below_log_start(ranges: dict[int, tuple[int, int]], bounds: dict) -> str | None:
    """Why reading `ranges` ({partition: (start, end)}) would lose records the broker deleted, or
    None: a range starting below its partition's log start (retention removed its head)."""
    for partition, (start, _end) in sorted(ranges.items()):
        low = bounds[partition][0]
        if start < low:
            return (
                f"partition {partition}: offsets {start}..{low - 1} were deleted by the broker "
                f"(its log now starts at {low}) before they were read; Tidemark does not skip "
                "them silently"
            )
    return None
