"""The API's JSON parser: a document PostgreSQL cannot store is a 400 naming the field.

A NUL character (`"\\u0000"`) is valid JSON but can be stored neither in a text column nor in
jsonb; a lone surrogate (`"\\ud800"`, half of a UTF-16 pair) is valid JSON too but no character at
all: it cannot be encoded as UTF-8, so PostgreSQL refuses it and a path holding it cannot be
resolved. Refusing both here, for every field of every endpoint, keeps them from surfacing later
as a database error or a 500.

So does a number too large for a double (`1e999`, which Python reads as infinity and
PostgreSQL's jsonb refuses), and a document nested deeper than MAX_DEPTH levels: Python walks JSON
recursively (parsing it, checking a config for secrets, masking it on the way out), and a config
of a few hundred levels, once stored, made every read of its job or connector a 500."""

import io
import math
import re
from itertools import accumulate

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

from inventory.services.secrets import MAX_JSON_DEPTH

_SURROGATE = re.compile("[\ud800-\udfff]")
# levels of objects and arrays a body may nest (the same bound as a config's, from any front)
MAX_DEPTH = MAX_JSON_DEPTH


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def nested_deeper_than(body: bytes, limit: int) -> bool:
    """Whether the JSON text `body` opens more than `limit` objects and arrays inside each other,
    found without parsing it: the parser recurses once per level, and a RecursionError deep in a
    request leaves CPython 3.11's `ast` module unusable in that process (gh-106905)."""
    brackets = _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", body))
    return bool(brackets) and max(accumulate(_STEP[b] for b in brackets)) > limit


def _problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain NUL characters"
    found = _SURROGATE.search(text)
    if found:
        return (
            f"must not contain a lone surrogate (\\u{ord(found.group()):04x}): it is no Unicode "
            "character and cannot be stored"
        )
    return None


def _shown(key: str) -> str:
    """A key as the error names it, with what cannot be shown escaped."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", key.replace("\x00", "\\u0000"))


def bad_field(value, path: str = "") -> tuple[str, str] | None:
    """The path of the first key, string or number that cannot be stored, and why; or None. (The
    document's depth is bounded before it is parsed, nested_deeper_than.)"""
    if isinstance(value, float) and not math.isfinite(value):
        # `NaN` and `Infinity` are refused by the parser; `1e999` parses, to infinity
        return (path or "body", "must be a finite number: this one is too large to store")
    if isinstance(value, str):
        problem = _problem(value)
        return (path or "body", problem) if problem else None
    if isinstance(value, dict):
        for key, inner in value.items():
            field = f"{path}.{key}" if path else str(key)
            problem = _problem(str(key))
            if problem:
                return _shown(field), problem
            found = bad_field(inner, field)
            if found:
                return found
    if isinstance(value, list):
        for index, inner in enumerate(value):
            found = bad_field(inner, f"{path}[{index}]" if path else f"[{index}]")
            if found:
                return found
    return None


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read() if stream is not None else b""
        if nested_deeper_than(body, MAX_DEPTH):
            raise ParseError(
                f"JSON parse error - nested deeper than {MAX_DEPTH} levels of objects and arrays"
            )
        data = super().parse(io.BytesIO(body), media_type, parser_context)
        found = bad_field(data)
        if found:
            field, problem = found
            raise ValidationError({field: [problem]})
        return data
