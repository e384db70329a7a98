"""Names checked by a regular expression are checked whole: `$` also matches before a final
newline, so `re.match(r"^name$", "name\n")` passes a name the engine then reads with the newline
(a SQL identifier, a Kafka topic, an Iceberg table, an environment variable). Each check refuses
the name with a newline after it, and still takes the name without one."""

import pytest

from inventory.services.errors import InvalidInput
from inventory.sources import kafka, table
from inventory.sources.items import quote_identifier
from workers.spark.errors import SinkError
from workers.spark.iceberg_catalog import CatalogError, table_identifier
from workers.spark.pgsink.config import valid_identifier


def _kafka(topic):
    return kafka.validate({"bootstrap_servers": "127.0.0.1:9092", "topic": topic})


CHECKS = [
    (lambda v: quote_identifier(v, field_name="config.meta_table"), "orders", InvalidInput),
    (lambda v: valid_identifier(v, "table"), "orders", SinkError),
    (table_identifier, "ns.orders", CatalogError),
]


@pytest.mark.parametrize(("check", "good", "error"), CHECKS)
def test_a_name_followed_by_a_newline_is_refused_and_the_name_alone_is_taken(check, good, error):
    check(good)
    with pytest.raises(error):
        check(good + "\n")


def test_a_kafka_topic_followed_by_a_newline_is_refused():
    with pytest.raises(InvalidInput) as refused:
        _kafka("orders\n")
    assert refused.value.field == "config.topic"


def test_a_table_sources_variable_name_followed_by_a_newline_is_refused():
    with pytest.raises(InvalidInput) as refused:
        table.validate({"dsn_env": "SOURCE_DSN\n"})
    assert refused.value.field == "config.dsn_env"
