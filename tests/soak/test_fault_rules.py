"""The soak's fault rules that need no servers (bench/soak_faults.py)."""

import time
from types import SimpleNamespace

from bench.soak_faults import REDELIVERY_CLOCK_QUIET_SECONDS, Faults


def _faults(tmp_path):
    faults = Faults.__new__(Faults)  # no servers: only the clock rule is exercised
    faults.work = tmp_path
    faults.pool = SimpleNamespace(clocks=True)
    faults.clock_moved = {}
    (tmp_path / "clocks").mkdir()
    return faults


def test_a_redelivery_is_tried_only_on_a_holder_whose_clock_is_real_and_settled(tmp_path):
    faults = _faults(tmp_path)
    holder = SimpleNamespace(soak_name="soak-3")
    offset = tmp_path / "clocks" / "soak-3.offset"

    offset.write_text("+0\n")
    assert faults._clock_real_since(holder, REDELIVERY_CLOCK_QUIET_SECONDS)  # never moved

    # an hour ahead: the messages it holds are scored an hour late, no rotation restores them
    offset.write_text("+3600\n")
    faults.clock_moved["soak-3"] = time.monotonic() - 10 * REDELIVERY_CLOCK_QUIET_SECONDS
    assert not faults._clock_real_since(holder, REDELIVERY_CLOCK_QUIET_SECONDS)

    # back to the real time a moment ago: what it took before the move still carries the old score
    offset.write_text("+0\n")
    faults.clock_moved["soak-3"] = time.monotonic() - 1
    assert not faults._clock_real_since(holder, REDELIVERY_CLOCK_QUIET_SECONDS)

    faults.clock_moved["soak-3"] = time.monotonic() - REDELIVERY_CLOCK_QUIET_SECONDS - 1
    assert faults._clock_real_since(holder, REDELIVERY_CLOCK_QUIET_SECONDS)


def test_without_faked_clocks_every_holder_qualifies(tmp_path):
    faults = _faults(tmp_path)
    faults.pool = SimpleNamespace(clocks=False)
    assert faults._clock_real_since(SimpleNamespace(soak_name="soak-0"), 1)
