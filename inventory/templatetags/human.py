"""Human units for the dashboard: durations ("3 d 4 h"), sizes ("1.2 GB"), counts ("12,345
items"), weights in their connector's unit and moments (`when`: the one date format of every
page). `{% load human %}`; the functions are plain too, for messages built in Python."""

from datetime import datetime, timedelta
from numbers import Number

from django import template
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()

# (seconds, name): a duration shows its two largest units, "3 d 4 h", "12 min 5 s"
_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))
_SIZES = ("B", "kB", "MB", "GB", "TB", "PB")


def _seconds(value) -> float | None:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Number) and not isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def duration(value, empty="—") -> str:
    """A timedelta or a number of seconds: "3 d 4 h", "12 min 5 s", "42 s", "0.4 s"."""
    seconds = _seconds(value)
    if seconds is None:
        return empty
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 10 and seconds != int(seconds):
        return f"{sign}{seconds:.1f} s"
    whole = round(seconds)
    parts = []
    for size, name in _UNITS:
        if whole >= size or (size == 1 and not parts):
            parts.append(f"{whole // size} {name}")
            whole %= size
        if len(parts) == 2 or (parts and whole == 0):
            break
    return sign + " ".join(parts)


@register.filter
def size(value, empty="—") -> str:
    """A number of bytes in decimal units: "512 B", "1.2 GB"."""
    if value is None or value == "":
        return empty
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    unit = 0
    while abs(number) >= 1000 and unit < len(_SIZES) - 1:
        number /= 1000
        unit += 1
    if unit == 0:
        return f"{int(number)} B"
    return f"{number:.1f} {_SIZES[unit]}" if abs(number) < 100 else f"{number:.0f} {_SIZES[unit]}"


@register.filter
def count(value, noun: str = "") -> str:
    """A count with thousands separators, and the noun in singular or plural when given:
    `{{ n|count:"item" }}` -> "12,345 items", "1 item"; "batch" -> "batches"."""
    if value is None or value == "":
        return "—"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if isinstance(value, int):
        text = f"{value:,}"  # exact: a float would round past 2**53
    else:
        text = f"{int(number):,}" if number == int(number) else f"{number:,.1f}"
    if not noun:
        return text
    return f"{text} {noun if number == 1 else plural(noun)}"


@register.filter
def weight(value, unit: str = "") -> str:
    """A weight in its connector's unit (`{{ lag.weight|weight:job.connector.weight_unit }}`,
    models.weight_unit): bytes as a size ("1.2 GB"), rows and messages counted with their noun,
    a unit-less weight as a plain count."""
    if unit == "bytes":
        return size(value)
    if unit in ("rows", "messages"):
        return count(value, unit[:-1])
    return count(value)


@register.filter
def compact(value) -> str:
    """A large number in few characters: 950, 12k, 1.2M, 3G (axis labels, histogram bins)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(number) >= size:
            scaled = number / size
            return (
                f"{scaled:.1f}".rstrip("0").rstrip(".") + suffix
                if scaled < 10
                else f"{scaled:.0f}{suffix}"
            )
    return f"{number:.0f}"


def plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


# result figures that name something rather than count it: shown as their exact digits
IDENTIFIERS = ("snapshot", "_id", "version", "instant", "token")


@register.filter
def metric(value, name: str = ""):
    """A batch result's figure in its unit: bytes as a size, seconds as a duration, counts
    with separators; anything else as it is."""
    leaf = str(name).rsplit(".", 1)[-1]
    if isinstance(value, bool) or not isinstance(value, Number):
        return value
    if leaf.endswith(IDENTIFIERS):
        return str(value)  # an id to copy (an Iceberg snapshot's 19 digits), not a quantity
    if "bytes" in leaf:
        return size(value)
    if leaf in ("seconds", "duration_seconds") or leaf.endswith("_seconds"):
        return duration(value)
    return count(value)


# the one date format of every page: the server's time zone (settings.TIME_ZONE), to the second
WHEN_FORMAT = "%Y-%m-%d %H:%M:%S %Z"


@register.filter
def when(value, empty="—"):
    """A moment as every page shows it: local time to the second, and how long ago (or how
    soon) beside it, `<time>` carrying the exact ISO time: "2026-12-06 04:12:33 UTC · 3 min ago"."""
    if not isinstance(value, datetime):
        return empty
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.utc)
    local = timezone.localtime(value)
    seconds = (timezone.now() - value).total_seconds()
    if abs(seconds) < 1:
        relative = "now"
    elif seconds > 0:
        relative = f"{duration(seconds if seconds >= 10 else round(seconds))} ago"
    else:
        relative = f"in {duration(-seconds if seconds <= -10 else round(-seconds))}"
    return format_html(
        '<time datetime="{}">{}</time> <span class="muted ago">· {}</span>',
        local.isoformat(timespec="seconds"),
        local.strftime(WHEN_FORMAT),
        relative,
    )
