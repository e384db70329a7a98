"""The retention forecast asks each kind for its probe (`SourceKind.retention_probe`): the kinds
whose sources forget data answer with their folder's `retention.probe`, the others with None, and
the registry's `retention_kinds` names exactly those that answer."""

from inventory.sources import hudi
from inventory.sources.base import SourceKind
from inventory.sources.delta import retention as delta_retention
from inventory.sources.hudi import retention as hudi_retention
from inventory.sources.iceberg import retention as iceberg_retention
from inventory.sources.kafka import retention as kafka_retention
from inventory.sources.registry import KINDS, retention_kinds


def test_the_kinds_that_forget_data_answer_with_their_own_probe():
    assert KINDS["kafka"].retention_probe() is kafka_retention.probe
    assert KINDS["delta"].retention_probe() is delta_retention.probe
    assert KINDS["hudi"].retention_probe() is hudi_retention.probe
    assert KINDS["iceberg"].retention_probe() is iceberg_retention.probe
    for name in set(KINDS) - {"kafka", "delta", "hudi", "iceberg"}:
        assert KINDS[name].retention_probe() is None, name
    assert SourceKind().retention_probe() is None


def test_the_jobs_forecast_are_those_of_the_kinds_whose_probe_answers():
    assert retention_kinds() == ["delta", "hudi", "iceberg", "kafka"]


def test_the_probe_module_leaves_the_hudi_packages_own_functions_alone():
    # importing inventory.sources.hudi.retention binds `retention` in the package: the package's
    # read of a table's retention settings must be called something else
    assert hudi.retention is hudi_retention
    assert callable(hudi.retention_settings)
