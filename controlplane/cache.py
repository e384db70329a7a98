"""The Django cache on Redis, whose `clear()` forgets only the cache's own keys.

The cache and the Celery broker share the Redis database that `REDIS_URL` names (a managed Redis
often has only one). Django's `RedisCache.clear()` is a FLUSHDB: it would also drop every queued
task message and the other web processes' keys under another prefix. Here `clear()` deletes the
keys under this cache's `KEY_PREFIX` alone (SCAN, then DEL in chunks), so `cache.clear()` from a
shell or a test is safe.
"""

import re

from django.core.cache.backends.redis import RedisCache

# redis' glob syntax: these match something, a backslash makes them literal
_GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")
_CHUNK = 500


def glob_literal(text: str) -> str:
    """`text` as a redis MATCH pattern that matches exactly that text."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


class PrefixedRedisCache(RedisCache):
    def clear(self):
        client = self._cache.get_client(write=True)
        # every key Django's default key function makes: "<prefix>:<version>:<key>"
        pattern = glob_literal(f"{self.key_prefix}:") + "*"
        chunk = []
        for key in client.scan_iter(match=pattern, count=_CHUNK):
            chunk.append(key)
            if len(chunk) >= _CHUNK:
                client.delete(*chunk)
                chunk = []
        if chunk:
            client.delete(*chunk)
        return True
