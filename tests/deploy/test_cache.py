"""The cache shares the broker's Redis database: clearing it forgets only its own keys."""

from django.conf import settings
from django.core.cache import cache

from controlplane.cache import PrefixedRedisCache, glob_literal


def _raw():
    return cache._cache.get_client(write=True)


def test_clear_keeps_queued_messages_and_other_prefixes():
    raw = _raw()
    queue = f"test-queue-{cache.key_prefix}"  # a broker queue: a list without the cache's prefix
    neighbour = f"{cache.key_prefix}-other:1:counter"  # a prefix that starts like this one
    try:
        raw.rpush(queue, "a queued task message")
        raw.set(neighbour, "7")
        for index in range(1200):  # more than one SCAN/DEL chunk
            cache.set(f"key-{index}", index)
        assert cache.get("key-1199") == 1199

        assert cache.clear() is True

        assert cache.get("key-0") is None and cache.get("key-1199") is None
        assert list(raw.scan_iter(match=glob_literal(f"{cache.key_prefix}:") + "*")) == []
        assert raw.lrange(queue, 0, -1) == [b"a queued task message"]
        assert raw.get(neighbour) == b"7"
    finally:
        raw.delete(queue, neighbour)


def test_a_prefix_with_glob_characters_matches_only_itself():
    location = settings.CACHES["default"]["LOCATION"]
    starred = PrefixedRedisCache(location, {"KEY_PREFIX": f"{cache.key_prefix}-a*[b]?"})
    lookalike = PrefixedRedisCache(location, {"KEY_PREFIX": f"{cache.key_prefix}-aXXbY"})
    try:
        starred.set("k", 1)
        lookalike.set("k", 2)
        starred.clear()
        assert starred.get("k") is None
        assert lookalike.get("k") == 2
    finally:
        lookalike.clear()


def test_glob_literal_escapes_redis_pattern_characters():
    assert glob_literal(r"a*b?c[d]e\f") == r"a\*b\?c\[d\]e\\f"
    assert glob_literal("tidemark") == "tidemark"
