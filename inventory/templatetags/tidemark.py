"""Template helpers for the dashboard: inline SVG sparklines (no script, drawn by the server),
watermark values and row links; tags rather than per-row includes, which cost more than the row
itself."""

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from inventory import links

register = template.Library()


@register.simple_tag
def link(name, *args):
    """{% url %} for the links of table rows: one reverse per URL name (inventory/links.py)."""
    return links.link(name, *args)


WIDTH, HEIGHT = 96, 22


@register.simple_tag
def sparkline(values, kind="count"):
    """An inline SVG of hourly values, oldest on the left; None (no attempt that hour) is a gap.
    `kind` "rate" draws 0..1 on a fixed scale, "count" scales to the largest value."""
    values = list(values or [])
    idle = (None,) if kind == "rate" else (None, 0)
    if not values or all(v in idle for v in values):
        return mark_safe(
            '<span class="muted spark-empty" title="nothing finished in the last 24 h">'
            "no data yet</span>"
        )
    top = 1 if kind == "rate" else max(v for v in values if v is not None) or 1
    step = WIDTH / max(len(values) - 1, 1)
    # plain string building: every value is a number formatted here and every class a constant,
    # so there is nothing to escape (format_html per bar cost more than the rest of the page)
    bars = {"ok": [], "bad": []}  # one path per colour, a bar per hour
    for i, value in enumerate(values):
        if value is None or (kind != "rate" and value == 0):
            continue  # no attempt that hour (rate), nothing committed (count)
        # at least 2 px high and 3 px wide, so that one batch in a day still shows
        height = max(HEIGHT * float(value) / top, 2)
        colour = "bad" if kind == "rate" and value < 0.9 else "ok"
        x = min(i * step, WIDTH)
        bars[colour].append(f"M{x:.1f} {HEIGHT}v-{height:.1f}h3v{height:.1f}z")
    paths = "".join(f'<path d="{"".join(d)}" class="{c}"></path>' for c, d in bars.items() if d)
    label = "success rate" if kind == "rate" else "items committed"
    seen = [v for v in values if v is not None]
    if kind == "rate":
        summary = f"{label} per hour, last 24 h: {100 * sum(seen) / len(seen):.0f}% on average"
    else:
        summary = f"{label} per hour, last 24 h: {int(sum(seen)):,} in all"
    return mark_safe(
        f'<svg class="spark" width="{WIDTH + 3}" height="{HEIGHT}" role="img" '
        f'aria-label="{summary}"><title>{summary}</title>{paths}</svg>'
    )


@register.simple_tag
def watermark_short(watermark):
    """A watermark's value as the overview shows it (as inventory/_watermark_value.html): key_value
    folded per key, file_set as a count."""
    value = watermark.value
    if value is None:
        return mark_safe('<span class="muted">— nothing committed</span>')
    if watermark.type == "key_value" and isinstance(value, dict):
        return format_html(
            '<details class="kv"><summary>{} key(s)</summary><table class="small">{}</table>'
            "</details>",
            len(value),
            format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", value.items()),
        )
    if watermark.type == "file_set" and isinstance(value, list | dict):
        return format_html("{} file(s)", len(value))
    return format_html("{}", value)


@register.filter
def discovers(connector) -> bool:
    """Whether the connector finds its items itself (the dashboard's "Discover now")."""
    from inventory.services.discovery import discovers as connector_discovers

    return connector_discovers(connector)


# what each state means, shown on hover (title) wherever a state is named
STATE_MEANINGS = {
    # batches
    "queued": "planned and waiting for a worker to take it",
    "running": "a worker holds its lease and is processing it",
    "succeeded": "its output is written and committed; the watermark may move over it",
    "failed": "the last attempt failed; it is retried after a backoff",
    "dead": "every attempt failed: the watermark stops in front of it until an operator "
    "retries or skips it",
    "cancelled": "stopped by an operator or a reset; its items are planned again",
    "skipped": "passed over by an admin, with a reason; the watermark moves over it",
    "superseded": "its output was replaced by a later run of the same items",
    # coverage strip
    "never_planned": "below the incremental frontier but in no batch: a hole to backfill",
    "not_planned_yet": "past the incremental frontier: the next batches will take it",
    # connectors
    "active": "discovered and planned as usual",
    "paused": "nothing new is planned until it is resumed; running batches finish",
    "waiting": "waits for the connector named in start_after to complete",
    "completed": "a finished snapshot: nothing more will arrive",
    # jobs on the overview
    "blocked": "a dead batch holds the watermark: retry or skip it",
    "late": "the watermark has not moved for several schedule intervals",
    "catching_up": "items wait to be processed; batches are planned as workers free up",
    "current": "every item seen so far is committed",
    "failing": "recent attempts failed and are being retried",
    "unreadable": "its source cannot be read now: the lag is unknown",
}
BACKFILL_MEANINGS = {
    "pending": "created; its batches start when pacing admits them",
    "running": "its batches are being planned and run, within its concurrency and the throttle",
    "paused": "no new batch of it starts until it is resumed",
    "completed": "every batch of its range is committed",
    "cancelled": "stopped; batches not yet run were cancelled",
}


@register.filter
def state_title(state, scope: str = "") -> str:
    """What a state means, for a title attribute: `{{ batch.status|state_title }}`."""
    if scope == "backfill" and state in BACKFILL_MEANINGS:
        return BACKFILL_MEANINGS[state]
    return STATE_MEANINGS.get(str(state), "")
