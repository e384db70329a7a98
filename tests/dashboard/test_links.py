"""inventory/links.py: the links of table rows are the URLs `reverse` gives, one reverse per name."""

import pytest
from django.urls import clear_script_prefix, reverse, set_script_prefix

from inventory.links import link

CASES = [
    ("dashboard:job", ["orders-hourly"]),
    ("dashboard:job", ["job_0"]),
    ("dashboard:batch", [918273640]),
    ("dashboard:batch", [7]),
    ("dashboard:connector-action", ["src-1", "pause"]),
    ("dashboard:job-action", ["a", "odd value é&x"]),  # str converter: quoted as reverse quotes it
    ("dashboard:overview", []),
]


@pytest.mark.parametrize("prefix", ["/", "/tidemark/"])
@pytest.mark.parametrize(("name", "args"), CASES)
def test_a_link_is_the_url_reverse_gives(name, args, prefix):
    set_script_prefix(prefix)
    try:
        assert link(name, *args) == reverse(name, args=args)
    finally:
        clear_script_prefix()
