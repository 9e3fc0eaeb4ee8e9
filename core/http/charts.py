"""Server-rendered SVG charts for the admin pages (Django-free, no I/O, no JavaScript).

The pages work offline: a chart is inline SVG text built here, never a script from a CDN.
`bar_chart` draws one horizontal bar (a "mark") per value, each with its label and its value
formatted with its unit (`format_quantity`). Every piece of text that goes into the SVG (title,
labels, units) is escaped here, for element text and for attribute values alike, so a label
such as `"><svg onload=alert(1)>` is drawn as those characters.
"""
from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from plugins.render import unit_of  # noqa: F401  (the unit rule of result fields, re-exported)

WIDTH = 640  # pixels; the admin's content column holds it beside nothing else
LABEL_WIDTH = 190
VALUE_WIDTH = 110
ROW_HEIGHT = 22
TOP = 28
LABEL_CHARS = 28  # a longer label is cut with `…` (the whole one is the mark's tooltip)
MAX_MARKS = 200  # a chart of more values is cut; the caller says so beside it

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
SI_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def escape(text: object) -> str:
    """`text` as SVG/HTML element text or a quoted attribute value: `& < > " '` escaped and
    the control characters XML forbids removed."""
    return html.escape(_CONTROL.sub("", str(text)), quote=True)


def is_number(value: object) -> bool:
    """True for a finite int or float (not a bool, NaN or an infinity)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def format_quantity(value: object, unit: str = "") -> str:
    """`value` for reading, with its unit: 4 significant digits, scaled to a fitting unit.

    Times (`us`, `ms`, `s`) are shown in µs, ms or s; bytes (`B`) in binary units (`1.5 MiB`);
    any other unit (`GFLOP/s`, `""`) gets an SI prefix from 10,000 up (`12.35 k`, `3.2 G`).
    `None` is `missing`; NaN and infinities are shown as `nan`, `inf`, `-inf`.
    """
    if value is None:
        return "missing"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if not math.isfinite(value):
        return str(float(value))
    if unit in ("us", "ms", "s"):
        seconds = value * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
        for scale, name in ((1.0, "s"), (1e-3, "ms")):
            if abs(seconds) >= scale:
                return f"{seconds / scale:.4g} {name}"
        return f"{seconds / 1e-6:.4g} µs"
    if unit == "B":
        size, index = float(value), 0
        while abs(size) >= 1024 and index < len(BYTE_UNITS) - 1:
            size, index = size / 1024, index + 1
        return f"{size:.4g} {BYTE_UNITS[index]}"
    suffix = f" {unit}" if unit else ""
    for scale, prefix in SI_PREFIXES:
        if abs(value) >= max(scale, 1e4):
            return f"{value / scale:.4g} {prefix}{unit}".rstrip()
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value:.4g}{suffix}"


@dataclass(frozen=True)
class Mark:
    """One bar: its label, its value (None, NaN or an infinity: drawn as `missing`, no bar)
    and whether it is highlighted (the baseline of a comparison)."""

    label: str
    value: float | int | None
    highlight: bool = False


def _cut(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…"


def bar_chart(title: str, marks: Sequence[Mark], *, unit: str = "") -> str:
    """Return an SVG horizontal bar chart: one `<rect class="falcon-mark">` per finite value.

    Bars start at zero (negative values extend left of it). Each mark carries `data-label` and
    `data-value` (the exact number) and a `<title>` tooltip; values that are not finite numbers
    get no bar and read `missing` (or `nan`). At most `MAX_MARKS` marks are drawn.

    Args:
        title: the chart's heading, drawn at its top.
        marks: the bars, top to bottom.
        unit: the values' unit (`format_quantity`).
    """
    marks = list(marks)[:MAX_MARKS]
    numbers = [m.value for m in marks if is_number(m.value)]
    low, high = min([0.0, *numbers]), max([0.0, *numbers])
    span = (high - low) or 1.0
    plot = WIDTH - LABEL_WIDTH - VALUE_WIDTH
    zero_x = LABEL_WIDTH + plot * (0.0 - low) / span
    height = TOP + ROW_HEIGHT * max(len(marks), 1) + 8
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="falcon-chart" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif" font-size="12">',
        f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>',
    ]
    for row, mark in enumerate(marks):
        y = TOP + row * ROW_HEIGHT
        shown = format_quantity(mark.value, unit)
        tip = escape(f"{mark.label}: {shown}")
        parts.append(f'<text x="{LABEL_WIDTH - 6}" y="{y + 15}" text-anchor="end">'
                     f'<title>{escape(mark.label)}</title>{escape(_cut(mark.label))}</text>')
        if is_number(mark.value):
            x_end = LABEL_WIDTH + plot * (mark.value - low) / span
            x, width = min(zero_x, x_end), abs(x_end - zero_x)
            fill = "#d97706" if mark.highlight else "#417690"
            parts.append(
                f'<rect class="falcon-mark" x="{x:.1f}" y="{y + 3}" width="{max(width, 1):.1f}" '
                f'height="{ROW_HEIGHT - 6}" fill="{fill}" data-label="{escape(mark.label)}" '
                f'data-value="{mark.value!r}"><title>{tip}</title></rect>')
            text_x = max(zero_x, x_end) + 4
        else:
            text_x = zero_x + 4
        parts.append(f'<text x="{text_x:.1f}" y="{y + 15}" class="falcon-value">'
                     f'{escape(shown)}</text>')
    parts.append(f'<line x1="{zero_x:.1f}" y1="{TOP - 2}" x2="{zero_x:.1f}" '
                 f'y2="{height - 6}" stroke="#999"/>')
    parts.append("</svg>")
    return "".join(parts)
