"""Every URL a user gives (an object store's `endpoint_url`, a connector's or a sink's path, an
asset's location) is read here, by one rule, and a URL that rule cannot read is a 400 naming the
field, never a 500 from deep inside a check.

The rule is strict where clients disagree. Python's `urlsplit` raises on a host that changes
under NFKC normalisation (a fullwidth `@`, U+FF20, becomes `@`), drops tabs and newlines anywhere,
and strips leading spaces; urllib3, botocore, httpx, fsspec and Hadoop each read a host a little
differently (IDNA, backslashes, userinfo). So the authority of a URL (what lies between `//` and
the next `/`, `?` or `#`) may hold only what every one of them reads alike: ASCII letters,
digits, `.`, `-` and `_`, an optional `:port` of digits, or an IPv6 address in brackets.
Refused with a reason: any other character (a non-ASCII host must be written in its `xn--`
form), userinfo (`user@host`, where a credential would hide and hosts get confused), and control
characters anywhere in the URL (urlsplit drops tabs and newlines, other clients do not). The
host is then compared lower-cased (an IPv6 address without its brackets), as the clients connect
to it.
"""

import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit

from inventory.services.errors import InvalidInput

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_HOST = re.compile(r"[A-Za-z0-9._-]*")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+\]")
_PORT = re.compile(r"[0-9]{1,5}")
# control characters, invisible line breaks, a byte order mark, and the invisible characters that
# reorder or hide text where it is shown: bidirectional embeddings, overrides and isolates, the
# zero-width space and word joiners. Not the zero-width (non-)joiners: Persian and Indic names
# and emoji hold them.
_UNSAFE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\u200b\u202a-\u202e\u2060-\u2064\u2066-\u2069]"
)


@dataclass(frozen=True)
class Url:
    scheme: str  # lower-cased; "" for a local path
    host: str  # lower-cased, IPv6 without brackets; "" when the URL has no authority
    port: int | None
    netloc: str  # the authority as written (checked: no userinfo, ASCII only)
    path: str
    query: str


def url_scheme(value) -> str:
    """The scheme of `value` lower-cased ("" for a local path or a non-string), as urlsplit
    reads it, without ever raising: for the checks that only ask "is this a URL?"."""
    if not isinstance(value, str):
        return ""
    found = _SCHEME.match(value)
    return found.group(1).lower() if found else ""


def _where(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def refuse_control_characters(value: str, *, field: str) -> None:
    """InvalidInput naming `field` and the first control character (or invisible line break, byte
    order mark, or character that reorders or hides text) in `value`: the rule for every name and
    URL a user gives."""
    unsafe = _UNSAFE.search(value)
    if unsafe:
        raise InvalidInput(field, f"must not contain control characters ({_where(unsafe.group())})")


def url_parse(value, *, field: str) -> Url:
    """`value` read by the one rule above; InvalidInput naming `field` otherwise."""
    if not isinstance(value, str):
        raise InvalidInput(field, "must be a string")
    refuse_control_characters(value, field=field)
    scheme = url_scheme(value)
    rest = value[len(scheme) + 1 :] if scheme else value
    if not rest.startswith("//"):
        authority = ""
    else:
        authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
    if "@" in authority:
        raise InvalidInput(field, "must not hold a user or password before the host (user@host)")
    host, port = authority, None
    if authority.startswith("["):
        end = authority.find("]") + 1
        host, tail = authority[:end], authority[end:]
        if not end or not _IPV6.fullmatch(host) or (tail and not tail.startswith(":")):
            raise InvalidInput(field, f"{authority!r} is not a valid [IPv6] host")
        port = tail[1:] if tail else None
    elif ":" in authority:
        host, port = authority.rsplit(":", 1)
    if not _IPV6.fullmatch(host) and not _HOST.fullmatch(host):
        odd = next(char for char in host if not _HOST.fullmatch(char))
        raise InvalidInput(
            field,
            f"the host {host!r} holds {_where(odd)}: a host may hold only ASCII letters, digits, "
            "'.', '-' and '_' (write an internationalised name in its xn-- form)",
        )
    if port is not None and (not _PORT.fullmatch(port) or not 0 < int(port) < 65536):
        raise InvalidInput(field, f"{port!r} is not a port (1-65535)")
    try:
        parts = urlsplit(value)
    except ValueError as exc:  # what the rule above missed is still a 400, never a 500
        raise InvalidInput(field, f"is not a URL that can be read: {exc}") from None
    return Url(
        scheme=scheme,
        host=host.strip("[]").lower(),
        port=int(port) if port else None,
        netloc=authority,
        path=parts.path,
        query=parts.query,
    )


def is_object_store_path(path) -> bool:
    """`s3://bucket/prefix` and any other fsspec URL (a one-letter scheme is a Windows drive)."""
    if not isinstance(path, str):
        return False
    scheme = url_scheme(path)
    return len(scheme) > 1 and scheme != "file"
