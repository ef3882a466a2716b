"""The console's charts: small line charts as inline SVG, drawn on the server (no script,
no library). Values are per minute over the last hour; a gap (None) breaks the line; each
minute's values show on hover (an SVG title, the browser's own tooltip)."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Sequence

from markupsafe import Markup

WIDTH, HEIGHT = 600, 150
WINDOW = "last 60 min"  # what every chart covers: one value per minute
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 20


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    label: str
    values: Sequence[float | None]
    css: str  # the stroke class: s1, s2


def _nice_max(peak: float) -> float:
    """The smallest 1, 2 or 5 times 10^n at or above `peak` (1 for nothing)."""
    if peak <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 < peak:
        scale *= 10
    while scale > peak:
        scale /= 10
    for step in (1, 2, 5, 10):
        if step * scale >= peak:
            return step * scale
    return 10 * scale  # pragma: no cover  (the loop above always returns)


def _points(values: Sequence[float | None], top: float) -> list[tuple[float, float] | None]:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(values) - 1)
    return [
        None if value is None else (LEFT + index * step, TOP + plot_h * (1 - min(value, top) / top))
        for index, value in enumerate(values)
    ]


def _path(values: Sequence[float | None], top: float) -> str:
    parts: list[str] = []
    pen_down = False
    for point in _points(values, top):
        if point is None:
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{point[0]:.1f},{point[1]:.1f}")
        pen_down = True
    return " ".join(parts)


def _dots(values: Sequence[float | None], top: float, css: str) -> str:
    """A dot on each point without a neighbour (a lone minute draws no line)."""
    points = _points(values, top)
    dots = []
    for index, point in enumerate(points):
        before = points[index - 1] if index > 0 else None
        after = points[index + 1] if index + 1 < len(points) else None
        if point is not None and before is None and after is None:
            dots.append(f'<circle class="{css}" cx="{point[0]:.1f}" cy="{point[1]:.1f}" r="2.5"/>')
    return "".join(dots)


def _ago(minutes: int) -> str:
    return "this minute" if minutes == 0 else f"{minutes} min ago"


def _hovers(lines: Sequence[Line], unit: Callable[[float], str]) -> str:
    """One transparent column per minute whose title (the browser's tooltip on hover) reads
    that minute's values, e.g. `3 min ago: succeeded 12, errors 0`."""
    minutes = max((len(line.values) for line in lines), default=0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, minutes - 1)
    columns = []
    for index in range(minutes):
        values = ", ".join(
            f"{line.label} {_value(line.values[index] if index < len(line.values) else None, unit)}"
            for line in lines
        )
        left = max(LEFT, LEFT + (index - 0.5) * step)
        right = min(WIDTH - RIGHT, LEFT + (index + 0.5) * step)
        columns.append(
            f'<rect class="hover" x="{left:.1f}" y="{TOP}" width="{right - left:.1f}" '
            f'height="{plot_h}"><title>{html.escape(_ago(minutes - 1 - index))}: '
            f"{html.escape(values)}</title></rect>"
        )
    return "".join(columns)


def _value(value: float | None, unit: Callable[[float], str]) -> str:
    return "—" if value is None else unit(value)


def _latest(line: Line, unit: Callable[[float], str]) -> str:
    """The line's newest value and how old it is: `4 (1 min ago)`, `— (none this hour)`."""
    for age, value in enumerate(reversed(line.values)):
        if value is not None:
            return f"<b>{html.escape(unit(value))}</b> ({_ago(age)})"
    return "<b>—</b> (none this hour)"


def line_chart(
    chart_id: str, title: str, lines: Sequence[Line], *, unit: Callable[[float], str] = str
) -> Markup:
    """An accessible SVG: a title with its window (the last hour), the scale's top and bottom,
    minutes ago along the bottom, one path per line (its label and newest value, with that
    value's age, in a legend), and each minute's values shown on hover."""
    peak = max((v for line in lines for v in line.values if v is not None), default=0.0)
    top = _nice_max(peak)
    plot_h = HEIGHT - TOP - BOTTOM
    grid = "".join(
        f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h * f:.1f}" '
        f'y2="{TOP + plot_h * f:.1f}"/>'
        for f in (0, 0.5, 1)
    )
    labels = (
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{html.escape(unit(top))}</text>'
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 4}">-60 min</text>'
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">'
        "-30 min</text>"
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 4}" text-anchor="end">now</text>'
    )
    paths = "".join(
        f'<path class="{line.css}" d="{_path(line.values, top)}"/>'
        + _dots(line.values, top, line.css)
        for line in lines
    )
    legend = " ".join(
        f'<span class="key {line.css}"></span>{html.escape(line.label)} {_latest(line, unit)}'
        for line in lines
    )
    return Markup(
        f'<figure class="chart" id="{html.escape(chart_id)}"><figcaption>{html.escape(title)}'
        f' <span class="window">· {WINDOW}</span> <span class="legend">{legend}</span>'
        f'</figcaption><svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{html.escape(title)}, {WINDOW}" preserveAspectRatio="none">'
        f"{grid}{labels}{paths}{_hovers(lines, unit)}</svg></figure>"
    )


def count(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def seconds(value: float) -> str:
    if value >= 120:
        return f"{value / 60:.0f} min"
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def percent(value: float) -> str:
    return f"{value * 100:.0f}%"
