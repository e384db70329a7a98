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
        return mark_safe('<span class="muted spark-empty">no activity</span>')
    top = 1 if kind == "rate" else max(v for v in values if v is not None) or 1
    step = WIDTH / max(len(values) - 1, 1)
    # plain string building: every value is a number formatted here and every class a constant,
    # so there is nothing to escape (format_html per bar cost more than the rest of the page)
    bars = {"ok": [], "bad": []}  # one path per colour, a bar per hour
    for i, value in enumerate(values):
        if value is None:
            continue
        height = max(HEIGHT * float(value) / top, 1)
        colour = "bad" if kind == "rate" and value < 0.9 else "ok"
        bars[colour].append(f"M{i * step:.1f} {HEIGHT}v-{height:.1f}h3v{height:.1f}z")
    paths = "".join(f'<path d="{"".join(d)}" class="{c}"></path>' for c, d in bars.items() if d)
    label = "success rate" if kind == "rate" else "items committed"
    return mark_safe(
        f'<svg class="spark" width="{WIDTH + 3}" height="{HEIGHT}" role="img" '
        f'aria-label="{label} per hour, last 24 h">{paths}</svg>'
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
