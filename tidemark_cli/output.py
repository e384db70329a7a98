"""Printing results for people by default: aligned tables and key/value blocks in human units
(sizes in kB/MB, durations, local times to the second, lists as comma lists, no JSON in a cell,
nothing cut short); the API's own JSON with `--output json`."""

import json
import re
import sys
from datetime import datetime

# an ISO time as the API writes it: 2026-12-06T04:12:33.123456Z or +00:00
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")


def when(value: str) -> str:
    """An API time in this machine's local time, to the second: "2026-12-06 05:12:33 CET"."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z").rstrip()


def cell(value) -> str:
    """One value as a table cell or a block's value: a dash for none, yes/no, times to the
    second, a list as a comma list, an object as key=value pairs; never JSON, never cut short."""
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    text = shown(" ".join(str(value).split()))
    return when(text) if _ISO_TIME.match(text) else text


# what a terminal would act on rather than show: C0/C1 controls (an ESC starts a sequence that
# can clear the screen or retitle the window), and the invisible characters that reorder text
_UNSHOWABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b\u202a-\u202e\u2060-\u2064\u2066-\u2069]")


def shown(text: str) -> str:
    """`text` with each character a terminal would act on written as its escape (`\\x1b`,
    `\\u202e`): a file name or a message from the server is shown, never obeyed."""
    return _UNSHOWABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def duration(seconds: float) -> str:
    """Seconds as the dashboard shows them: "3 d 4 h", "12 min 5 s", "0.4 s"."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    whole, parts = round(seconds), []
    for size_, name in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if whole >= size_ or (size_ == 1 and not parts):
            parts.append(f"{whole // size_} {name}")
            whole %= size_
        if len(parts) == 2 or (parts and whole == 0):
            break
    return " ".join(parts)


_SIZES = ("B", "kB", "MB", "GB", "TB", "PB")


def size(number: float) -> str:
    """Bytes in decimal units: "512 B", "1.2 GB" (as the dashboard shows them)."""
    unit = 0
    while abs(number) >= 1000 and unit < len(_SIZES) - 1:
        number /= 1000
        unit += 1
    if unit == 0:
        return f"{int(number)} B"
    return f"{number:.1f} {_SIZES[unit]}" if abs(number) < 100 else f"{number:.0f} {_SIZES[unit]}"


def weight(value, unit: str | None) -> str:
    """A weight in the unit the API gives with it (`weight_unit`): bytes as a size, rows and
    messages counted with their noun, a unit-less weight as a plain number."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return cell(value)
    if unit == "bytes":
        return size(value)
    if unit in ("rows", "messages"):
        return f"{value:,} {unit if value != 1 else unit[:-1]}"
    return f"{value:,}"


def pluck(row: dict, column: str):
    """`a.b` reads a nested value."""
    value = row
    for part in column.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def table(rows: list[dict], columns: list[str], *, out=None, indent: int = 0) -> None:
    out = out or sys.stdout
    if not rows:
        print(" " * indent + "(none)", file=out)
        return
    cells = [[cell(pluck(row, c)) for c in columns] for row in rows]
    # one word a column (`progress.percent` -> PROGRESS_PERCENT): a header a space splits reads
    # as two columns to a person and to `awk`
    headers = [c.replace(".", "_").upper() for c in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    for line in [headers, *cells]:
        text = "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        print(" " * indent + text, file=out)


def block(obj: dict, *, out=None, unit: str | None = None, indent: int = 0) -> None:
    """One object as `key  value` lines in human units (see human); a nested object as an
    indented block, a list of objects as an indented table."""
    out = out or sys.stdout
    unit = obj.get("weight_unit", unit)
    width = max((len(k) for k in obj), default=0)
    pad = " " * indent
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            print(f"{pad}{key}", file=out)
            block(value, out=out, unit=unit, indent=indent + 2)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            print(f"{pad}{key}", file=out)
            columns = list(dict.fromkeys(k for v in value for k in v))
            rows = [{k: human(k, v.get(k), unit) for k in columns} for v in value]
            table(rows, columns, out=out, indent=indent + 2)
        else:
            print(f"{pad}{key.ljust(width)}  {human(key, value, unit)}", file=out)


def human(key: str, value, unit: str | None = None) -> str:
    """A value in the unit its key names: bytes as a size, weights in their connector's unit,
    seconds as a duration; the rest as a cell."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "bytes" in key:
            return size(value)
        if key in ("weight", "batch_weight", "total_weight") or key.endswith("_weight"):
            return weight(value, unit)
        if key.endswith("seconds") and key not in ("retry_backoff_seconds", "lease_seconds"):
            return duration(value)
        if key in ("retry_backoff_seconds", "lease_seconds", "schedule_seconds"):
            return duration(value)
    return cell(value)


def emit_json(data, *, out=None) -> None:
    out = out or sys.stdout
    json.dump(data, out, indent=2, default=str)
    out.write("\n")
    out.flush()


class Printer:
    def __init__(self, fmt: str):
        self.json = fmt == "json"

    def rows(self, rows: list[dict], columns: list[str]) -> None:
        emit_json(rows) if self.json else table(rows, columns)

    def obj(self, obj: dict) -> None:
        emit_json(obj) if self.json else block(obj)

    def done(self, message: str, data) -> None:
        """An action's outcome: a sentence for people, the API's answer for programs."""
        emit_json(data) if self.json else print(message)
