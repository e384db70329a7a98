"""Template helpers for the dashboard: inline SVG sparklines (no script, drawn by the server)."""

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

register = template.Library()

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
    bars = []
    for i, value in enumerate(values):
        if value is None:
            continue
        height = max(HEIGHT * value / top, 1)
        colour = "bad" if kind == "rate" and value < 0.9 else "ok"
        bars.append((f"{i * step:.1f}", f"{HEIGHT - height:.1f}", f"{height:.1f}", colour))
    label = "success rate" if kind == "rate" else "items committed"
    return format_html(
        '<svg class="spark" width="{}" height="{}" role="img" aria-label="{} per hour, last 24 h">'
        "{}</svg>",
        WIDTH + 3,
        HEIGHT,
        label,
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="3" height="{}" class="{}"></rect>',
            bars,
        ),
    )
