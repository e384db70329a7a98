"""The example processor package (examples/tidemark-example-processors): found through its entry
point, and its own tests, run here with the session's SparkSession."""

import importlib.util

from tests.support.worker_fixtures import ROOT
from workers.spark import processors

EXAMPLE_TESTS = ROOT / "examples" / "tidemark-example-processors" / "tests" / "test_orders.py"


def _example_tests():
    spec = importlib.util.spec_from_file_location("example_processor_tests", EXAMPLE_TESTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_package_is_found_through_its_entry_point():
    entry = [
        e
        for e in importlib.metadata.entry_points(group=processors.ENTRY_POINT_GROUP)
        if e.name == "example"
    ]
    assert [e.value for e in entry] == ["tidemark_example_processors.orders"]
    assert "example" in processors.load_entry_points()
    assert "example_customer_totals" in processors.load_processor_modules([])


def test_the_example_packages_own_tests(spark):
    processors.load_entry_points()
    tests = _example_tests()
    tests.check_customer_totals(spark)
    tests.check_it_is_registered_and_checks_its_params()


def test_the_control_plane_knows_the_example_processor_when_a_job_is_saved():
    from inventory.services.job_config import processors_load

    assert "example_customer_totals" in processors_load()
