"""Small charts as inline SVG, drawn here: no plotting library, nothing to download, a few KB a chart.

Counts get integer axes; times get units (ms or s). Each chart says what it counts in its axis title.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

WIDTH = 620
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


class Bar(NamedTuple):
    label: str
    value: float
    colour: str
    tooltip: str = ""


class Segment(NamedTuple):
    name: str
    rollouts: int
    colour: str


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def count_ticks(top: float) -> list[int]:
    """Integer ticks from 0 to at least ``top``: 0, step, 2 step, … with a round step (never 0.5)."""
    if top <= 0:
        return [0, 1]
    raw = top / 5
    power = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next((factor * power for factor in (1, 2, 5, 10) if factor * power >= raw), 10 * power)
    step = max(1, int(step))
    ticks = list(range(0, math.ceil(top / step) * step + 1, step))
    return ticks if len(ticks) >= 2 else [0, step]


def duration_label(ms: float, scale_ms: float) -> str:
    """A time for an axis: in s when the axis reaches 2 s or more, else in ms."""
    if scale_ms >= 2000:
        seconds = ms / 1000
        return f"{seconds:.0f} s" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f} s"
    return f"{ms:.0f} ms" if ms >= 10 or ms == int(ms) else f"{ms:.1f} ms"


def horizontal_bars(bars: Sequence[Bar], axis_title: str, label_width: int = 230) -> str:
    """One bar per item, labels on the left, an integer axis of counts below."""
    if not bars:
        return ""
    row, top_margin, bottom = 22, 8, 40
    height = top_margin + row * len(bars) + bottom
    plot = WIDTH - label_width - 30
    ticks = count_ticks(max(bar.value for bar in bars))
    scale = plot / ticks[-1]
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" {FONT}>',
    ]
    axis_y = top_margin + row * len(bars)
    for tick in ticks:
        x = label_width + tick * scale
        parts.append(f'<line x1="{x:.1f}" y1="{top_margin}" x2="{x:.1f}" y2="{axis_y}" stroke="#e5e5e5"/>')
        parts.append(f'<text class="count-tick" x="{x:.1f}" y="{axis_y + 15}" text-anchor="middle" fill="#555">{tick}</text>')
    for index, bar in enumerate(bars):
        y = top_margin + index * row
        label = bar.label if len(bar.label) <= 34 else bar.label[:32] + "…"
        tip = _e(bar.tooltip or f"{bar.label}: {bar.value:g}")
        parts.append(
            f'<g><title>{tip}</title><text x="{label_width - 8}" y="{y + 15}" text-anchor="end">{_e(label)}</text>'
            f'<rect x="{label_width}" y="{y + 3}" width="{max(bar.value * scale, 0.0):.1f}" height="{row - 6}"'
            f' fill="{bar.colour}"/>'
            f'<text x="{label_width + bar.value * scale + 4:.1f}" y="{y + 15}" fill="#333">{bar.value:g}</text></g>'
        )
    parts.append(
        f'<text x="{label_width + plot / 2:.1f}" y="{height - 6}" text-anchor="middle" fill="#333">{_e(axis_title)}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def histogram(
    bins: Sequence[tuple[float, float, int]],
    x_title: str,
    y_title: str,
    x_format: Callable[[float], str],
    extra: Sequence[Bar] = (),
    colour: str = "#4e79a7",
) -> str:
    """Vertical bars over equal bins (edges labelled with ``x_format``), then separate bars for ``extra``
    (masked, unscored, …), all on one integer axis of counts."""
    if not bins and not extra:
        return ""
    height, left, bottom, top_margin = 250, 48, 62, 12
    plot_h = height - bottom - top_margin
    slots = len(bins) + (len(extra) + 1 if extra else 0)
    plot_w = WIDTH - left - 30
    slot = plot_w / max(slots, 1)
    ticks = count_ticks(max([count for _, _, count in bins] + [bar.value for bar in extra] + [1]))
    scale = plot_h / ticks[-1]
    base = top_margin + plot_h
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" {FONT}>']
    for tick in ticks:
        y = base - tick * scale
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - 12}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text class="count-tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{tick}</text>')
    label_every = max(1, math.ceil(len(bins) / 8))
    for index, (low, high, count) in enumerate(bins):
        x = left + index * slot
        tip = _e(f"{x_format(low)} to {x_format(high)}: {count}")
        parts.append(
            f'<g><title>{tip}</title><rect x="{x + 1:.1f}" y="{base - count * scale:.1f}" width="{max(slot - 2, 1):.1f}"'
            f' height="{count * scale:.1f}" fill="{colour}"/></g>'
        )
        if index % label_every == 0:
            parts.append(
                f'<text class="x-tick" x="{x:.1f}" y="{base + 15}" text-anchor="middle" fill="#555">{_e(x_format(low))}</text>'
            )
    if bins:
        x_end = left + len(bins) * slot
        if len(bins) % label_every == 0:
            parts.append(
                f'<text class="x-tick" x="{x_end:.1f}" y="{base + 15}" text-anchor="middle" fill="#555">'
                f"{_e(x_format(bins[-1][1]))}</text>"
            )
        parts.append(
            f'<text x="{left + x_end / 2 - left / 2:.1f}" y="{base + 34}" text-anchor="middle" fill="#333">{_e(x_title)}</text>'
        )
    for offset, bar in enumerate(extra):
        x = left + (len(bins) + 1 + offset) * slot
        tip = _e(bar.tooltip or f"{bar.label}: {bar.value:g}")
        parts.append(
            f'<g><title>{tip}</title><rect x="{x + 1:.1f}" y="{base - bar.value * scale:.1f}" width="{max(slot - 2, 1):.1f}"'
            f' height="{bar.value * scale:.1f}" fill="{bar.colour}"/>'
            f'<text x="{x + slot / 2:.1f}" y="{base + 15}" text-anchor="middle" fill="#333">{_e(bar.label)}</text></g>'
        )
    parts.append(
        f'<text transform="translate(13,{top_margin + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle" fill="#333">'
        f"{_e(y_title)}</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def stacked_shares(rows: Sequence[tuple[str, Sequence[Segment]]], label_width: int = 230) -> str:
    """Per row (a task), its rollouts split into segments, as shares of the row's total; a legend on top."""
    if not rows:
        return ""
    row, legend = 22, 26
    height = legend + row * len(rows) + 26
    plot = WIDTH - label_width - 50
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" {FONT}>']
    names: dict[str, str] = {}
    for _, segments in rows:
        for segment in segments:
            if segment.rollouts:
                names.setdefault(segment.name, segment.colour)
    x = 0.0
    for name, colour in names.items():
        parts.append(f'<rect x="{x:.0f}" y="4" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 16:.0f}" y="14">{_e(name)}</text>')
        x += 26 + 7 * len(name)
    for index, (label, segments) in enumerate(rows):
        y = legend + index * row
        total = sum(segment.rollouts for segment in segments) or 1
        shown = label if len(label) <= 34 else label[:32] + "…"
        parts.append(f'<text x="{label_width - 8}" y="{y + 15}" text-anchor="end"><title>{_e(label)}</title>{_e(shown)}</text>')
        offset = float(label_width)
        for segment in segments:
            if not segment.rollouts:
                continue
            width = plot * segment.rollouts / total
            tip = _e(f"{label}: {segment.rollouts} of {total} rollout{'' if total == 1 else 's'} {segment.name}")
            parts.append(
                f'<g><title>{tip}</title><rect x="{offset:.1f}" y="{y + 3}" width="{width:.1f}" height="{row - 6}"'
                f' fill="{segment.colour}"/></g>'
            )
            offset += width
        parts.append(f'<text x="{label_width + plot + 6}" y="{y + 15}" fill="#555">{total}</text>')
    axis_y = legend + row * len(rows)
    for share in (0, 25, 50, 75, 100):
        x = label_width + plot * share / 100
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 15}" text-anchor="middle" fill="#555">{share}%</text>')
    parts.append("</svg>")
    return "".join(parts)


POINTS_MARKED = 400  # a line of more points draws none of them (the table has every step)


class Line(NamedTuple):
    name: str
    colour: str
    points: Sequence[tuple[float, float]]  # (x, y), x increasing


def _x_ticks(low: float, high: float) -> list[float]:
    """Round, whole-number ticks from ``low`` to ``high`` (steps of a run)."""
    ticks = count_ticks(high - low)
    step = ticks[1] - ticks[0]
    first = math.ceil(low / step) * step
    return [float(tick) for tick in range(int(first), int(high) + 1, step)]


def _value_ticks(low: float, high: float) -> list[float]:
    """Four to seven round ticks covering ``low`` to ``high`` (steps of 1, 2 or 5 times a power of ten)."""
    raw = (high - low) / 4
    power = 10 ** math.floor(math.log10(raw))
    step = next(factor * power for factor in (1, 2, 5, 10) if factor * power >= raw)
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    return [index * step for index in range(first, last + 1)]


def line_chart(
    lines: Sequence[Line],
    x_title: str,
    y_title: str,
    y_format: Callable[[float], str],
    y_range: tuple[float, float] | None = None,
) -> str:
    """One line per series over a whole-number x axis (training steps), a legend on top; each point has a
    tooltip. ``y_range``: the y axis's ends (default: the values' own)."""
    points = [point for line in lines for point in line.points]
    if not points:
        return ""
    height, left, right, top_margin, bottom = 250, 56, 18, 28, 46
    plot_w, plot_h = WIDTH - left - right, height - top_margin - bottom
    x_low, x_high = min(x for x, _ in points), max(x for x, _ in points)
    if x_high == x_low:
        x_low, x_high = x_low - 0.5, x_high + 0.5
    if y_range is not None:
        y_low, y_high = y_range
        y_ticks = [y_low + index * (y_high - y_low) / 4 for index in range(5)]
    else:
        y_low, y_high = min(y for _, y in points), max(y for _, y in points)
        if y_high == y_low:
            y_low, y_high = y_low - 0.5, y_high + 0.5
        y_ticks = _value_ticks(y_low, y_high)
        y_low, y_high = y_ticks[0], y_ticks[-1]

    def at_x(x: float) -> float:
        return left + (x - x_low) / (x_high - x_low) * plot_w

    def at_y(y: float) -> float:
        return top_margin + plot_h - (y - y_low) / (y_high - y_low) * plot_h

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" {FONT}>']
    x = 0.0
    for line in lines:
        if line.points:
            parts.append(f'<rect x="{x:.0f}" y="6" width="12" height="12" fill="{line.colour}"/>')
            parts.append(f'<text x="{x + 16:.0f}" y="16">{_e(line.name)}</text>')
            x += 26 + 7 * len(line.name)
    for value in y_ticks:
        y = at_y(value)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{_e(y_format(value))}</text>')
    base = top_margin + plot_h
    for tick in _x_ticks(x_low, x_high):
        parts.append(
            f'<text class="x-tick" x="{at_x(tick):.1f}" y="{base + 15}" text-anchor="middle" fill="#555">{tick:.0f}</text>'
        )
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{base + 34}" text-anchor="middle" fill="#333">{_e(x_title)}</text>')
    parts.append(
        f'<text transform="translate(13,{top_margin + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle" fill="#333">'
        f"{_e(y_title)}</text>"
    )
    for line in lines:
        if not line.points:
            continue
        path = " ".join(f"{at_x(px):.1f},{at_y(py):.1f}" for px, py in line.points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{line.colour}" stroke-width="2"/>')
        if len(line.points) > POINTS_MARKED:
            continue  # a long run's line without a mark (and a tooltip) per step: the page stays small
        for px, py in line.points:
            tip = _e(f"{x_title} {px:g}: {line.name} {y_format(py)}")
            parts.append(
                f'<circle cx="{at_x(px):.1f}" cy="{at_y(py):.1f}" r="2.5" fill="{line.colour}"><title>{tip}</title></circle>'
            )
    parts.append("</svg>")
    return "".join(parts)
