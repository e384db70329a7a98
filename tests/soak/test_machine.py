"""The soak's machine parts (bench/soak_machine.py) on their own, marker `soak` (`make soak` installs
libfaketime first): a worker clock that jumps while sleeps and child programs stay real, and a sink
disk that fills up, and a Kafka client whose timed waits keep their timeouts on a jumped clock."""

import errno
import os
import subprocess
import sys

import pytest

from bench.soak_machine import faketime_env, tmpfs_mount, tmpfs_unmount

pytestmark = pytest.mark.soak

PROBE = """
import json, os, subprocess, sys, time
offset_file = os.environ["FAKETIME_TIMESTAMP_FILE"]
before = time.time() - os.stat(offset_file).st_mtime
with open(offset_file, "w") as f:
    f.write("-3600\\n")
started = time.monotonic()
time.sleep(0.3)  # time.sleep under libfaketime with real monotonic clocks: EINVAL unless patched
slept = time.monotonic() - started
after = time.time() - os.stat(offset_file).st_mtime
child = subprocess.run(
    [sys.executable, "-c", "import os, time; print(os.environ.get('LD_PRELOAD'), time.time())"],
    capture_output=True, text=True, check=True,
).stdout.split()
print(json.dumps({"before": before, "after": after, "slept": slept,
                  "child_preload": child[0], "child_skew": float(child[1]) - time.time() - 3600}))
"""


def test_a_faked_worker_clock_jumps_while_sleep_and_child_programs_stay_real(tmp_path):
    env = {**os.environ, **faketime_env(tmp_path, "w")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    import json

    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert abs(seen["before"]) < 30  # "+0": the real time
    assert abs(seen["after"] + 3600) < 30  # the jump shows at once
    assert seen["slept"] >= 0.29
    # a program it starts (the Spark JVM) has no libfaketime: its clock is the real one
    assert seen["child_preload"] == "None"
    assert abs(seen["child_skew"]) < 30


KAFKA_WAIT = """
import os, sys, time
from confluent_kafka import Consumer, KafkaException
consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "t",
                     "log.connection.close": False})
with open(os.environ["FAKETIME_TIMESTAMP_FILE"], "w") as f:
    f.write(sys.argv[1] + "\\n")
started = time.monotonic()
try:
    consumer.list_topics(timeout=2)
except KafkaException:
    pass
consumer.close()
print(time.monotonic() - started)
"""


def _kafka_wait(env, offset: str) -> float:
    """Seconds a 2 s metadata request to no broker took in a faked process after a jump."""
    done = subprocess.run(
        [sys.executable, "-c", KAFKA_WAIT, offset],
        env=env,
        capture_output=True,
        text=True,
        timeout=15,
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout.strip().splitlines()[-1])


def test_librdkafka_keeps_its_timeouts_on_a_jumped_clock(tmp_path):
    env = {**os.environ, **faketime_env(tmp_path, "w")}
    for offset in ("+3600", "-3600"):
        assert 1.9 < _kafka_wait(env, offset) < 6
    # why the shim: libfaketime alone leaves librdkafka's cnd_timedwait waiting on the real clock
    # for a deadline on the faked one, so with the clock 30 s ahead the 2 s wait lasts 30 s more
    env["LD_PRELOAD"] = env["LD_PRELOAD"].split()[-1]
    with pytest.raises(subprocess.TimeoutExpired):
        _kafka_wait(env, "+30")


def test_the_sink_tmpfs_fills_up_and_frees(tmp_path):
    disk = tmp_path / "disk"
    why = tmpfs_mount(disk, size="1m")
    assert why == "", why
    try:
        with pytest.raises(OSError) as full, open(disk / ".filler", "wb") as out:
            for _ in range(4):
                out.write(b"\0" * (1 << 20))
                out.flush()
        assert full.value.errno == errno.ENOSPC
        (disk / ".filler").unlink()
        (disk / "part").write_bytes(b"x" * 1000)  # freed: a write fits again
    finally:
        tmpfs_unmount(disk)
