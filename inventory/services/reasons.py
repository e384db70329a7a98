"""The one rule for a reason an operator gives (a skip, a cancel, a backfill, a correction, a
reset, a dismissed restatement): text of at most REASON_MAX characters, stripped, with no control
character but a tab or a line break. Reasons are shown on pages, in the admin, in the CLI's
tables and in the gap report; an escape sequence in one would reach an operator's terminal.

`reason_fitted` is the same rule for the reasons Tidemark writes itself (a restatement's names the
files that changed, whatever their names and however many): it makes them fit rather than
refusing them, so an automatic restatement never fails on its own wording."""

import re

from inventory.services.errors import InvalidInput

REASON_MAX = 2000
# C0 and C1 controls but tab, line feed and carriage return; invisible line breaks; a BOM
_UNSAFE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def reason_checked(value, *, needed: str | None = None, field: str = "reason") -> str:
    """`value` stripped; InvalidInput naming `field` when it is not text, too long, holds a
    control character, or (with `needed`, the message) is empty."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInput(field, "must be text")
    value = value.strip()
    if needed and not value:
        raise InvalidInput(field, needed)
    if len(value) > REASON_MAX:
        raise InvalidInput(field, f"must be at most {REASON_MAX} characters, got {len(value)}")
    unsafe = _UNSAFE.search(value)
    if unsafe:
        raise InvalidInput(
            field, f"must not contain control characters (U+{ord(unsafe.group()):04X})"
        )
    return value


def reason_fitted(text: str) -> str:
    """A reason Tidemark writes itself, made to pass `reason_checked`: each character it refuses
    written as its escape (`\\x1b`), and cut to REASON_MAX characters (the last one an ellipsis)."""
    text = _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode(), text.strip())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "\u2026"
