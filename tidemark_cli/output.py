"""Printing results: aligned tables and key/value blocks by default, JSON with `--output json`."""

import json
import sys

CELL_WIDTH = 60


def cell(value) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"), default=str)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 1] + "…"


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


def table(rows: list[dict], columns: list[str], *, out=None) -> None:
    out = out or sys.stdout
    if not rows:
        print("(none)", file=out)
        return
    cells = [[cell(pluck(row, c)) for c in columns] for row in rows]
    headers = [c.replace(".", " ").upper() for c in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    for line in [headers, *cells]:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip(), file=out)


def block(obj: dict, *, out=None) -> None:
    """One object as `key: value` lines; nested objects as indented JSON."""
    out = out or sys.stdout
    width = max((len(k) for k in obj), default=0)
    for key, value in obj.items():
        if isinstance(value, dict | list) and value:
            text = json.dumps(value, indent=2, default=str).replace("\n", "\n" + " " * (width + 2))
        else:
            text = cell(value) if not isinstance(value, str) else (value or "-")
        print(f"{key.ljust(width)}  {text}", file=out)


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
