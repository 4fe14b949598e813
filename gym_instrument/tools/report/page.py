"""The report as one self-contained HTML page: tables, links to each rollout's trace, and plotly pictures.

plotly.js is embedded once in the page (no network needed to open it); every picture is
interactive (hover for the numbers, zoom, save as PNG).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from gym_instrument.tools.report.text import milliseconds, number, percent

PICTURE_TASKS = 40  # tasks drawn in the reward picture
TABLE_TASKS = 5000  # rows of the per-task table (the JSON has them all)
DISCRETE_REWARDS = 6  # up to this many distinct reward values: a stacked bar per task, else box plots
VERDICT_COLOURS = {"healthy": "#2ca02c", "unhealthy": "#d62728", "unobserved": "#7f7f7f"}

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; }
body { margin: 24px auto; max-width: 1440px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.muted { color: #666; } .cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card b { display: block; font-size: 20px; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #eee; padding: 3px 10px; text-align: right; white-space: nowrap; }
th { background: #f6f6f6; position: sticky; top: 0; } td:first-child, th:first-child { text-align: left; }
td.text, th.text { text-align: left; } tr.flat td { background: #fff6e0; }
.scroll { max-height: 640px; overflow: auto; border: 1px solid #eee; }
code { background: #f3f3f3; padding: 0 4px; border-radius: 3px; }
"""


def _cell(value: Any, text: bool = False) -> str:
    return f'<td class="text">{value}</td>' if text else f"<td>{value}</td>"


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: Sequence[int] = (), classes: Sequence[str] = ()
) -> str:
    head = "".join(
        f'<th class="text">{html.escape(h)}</th>' if i in text_columns else f"<th>{html.escape(h)}</th>"
        for i, h in enumerate(header)
    )
    body = []
    for index, row in enumerate(rows):
        css = f' class="{classes[index]}"' if index < len(classes) and classes[index] else ""
        body.append(f"<tr{css}>" + "".join(_cell(cell, i in text_columns) for i, cell in enumerate(row)) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _trace_cell(rollout: dict[str, Any]) -> str:
    trace_id = html.escape(rollout["trace_id"])
    url = rollout.get("trace_url")
    return (
        f'<a href="{html.escape(url)}" target="_blank" rel="noopener"><code>{trace_id}</code></a>'
        if url
        else f"<code>{trace_id}</code>"
    )


def _card(label: str, value: Any, note: str = "") -> str:
    return f"<div class='card'>{_e(label)}<b>{_e(value)}</b><span class='muted'>{_e(note)}</span></div>"


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


class _Pictures:
    """plotly figures as HTML divs; the first one carries plotly.js, inline."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, figure: Any) -> str:
        figure.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 50, "b": 50})
        self.count += 1
        return str(
            figure.to_html(
                full_html=False,
                include_plotlyjs=self.count == 1,
                config={"displaylogo": False, "responsive": True},
                div_id=f"picture-{self.count}",
            )
        )


def reward_picture(tasks: Sequence[dict[str, Any]]) -> Any | None:
    import plotly.graph_objects as go

    drawn = [task for task in tasks if task["rewarded"]][:PICTURE_TASKS]
    if not drawn:
        return None
    values = sorted({float(value) for task in drawn for value in task["reward_values"]})
    labels = [task["task"] for task in drawn]
    title = "Reward per task" + (f" (the first {PICTURE_TASKS} tasks with rewards)" if len(drawn) == PICTURE_TASKS else "")
    if len(values) <= DISCRETE_REWARDS:
        from plotly.colors import sample_colorscale

        low, high = values[0], values[-1]
        colours = sample_colorscale("RdYlGn", [(value - low) / (high - low) if high > low else 1.0 for value in values])
        figure = go.Figure()
        for value, colour in zip(values, colours, strict=True):
            key = repr(value)
            shares = [task["reward_values"].get(key, 0) / task["rewarded"] for task in drawn]
            counts = [task["reward_values"].get(key, 0) for task in drawn]
            figure.add_trace(
                go.Bar(
                    name=f"reward {value:g}",
                    x=labels,
                    y=shares,
                    customdata=counts,
                    marker_color=colour,
                    hovertemplate="%{x}: %{customdata} rollouts (%{y:.0%})<extra>reward " + f"{value:g}</extra>",
                )
            )
        figure.update_layout(barmode="stack", title=title + ": share of rollouts at each reward", yaxis_tickformat=".0%")
        return figure
    figure = go.Figure()
    for task in drawn:
        reward_counts = {float(value): count for value, count in task["reward_values"].items()}
        figure.add_trace(
            go.Box(
                name=task["task"],
                q1=[_quantile(reward_counts, 0.25)],
                median=[_quantile(reward_counts, 0.5)],
                q3=[_quantile(reward_counts, 0.75)],
                lowerfence=[task["min_reward"]],
                upperfence=[task["max_reward"]],
                mean=[task["mean_reward"]],
                sd=[task["reward_std"] or 0.0],
                showlegend=False,
            )
        )
    figure.update_layout(title=title + ": quartiles, mean and spread (rewards rounded to 0.01)", yaxis_title="reward")
    return figure


def _quantile(counts: dict[float, int], q: float) -> float:
    total = sum(counts.values())
    rank, seen = max(1, round(q * total + 0.5)), 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    return max(counts)


def duration_picture(time: dict[str, Any]) -> Any | None:
    import plotly.graph_objects as go

    bins = time["histogram"]
    if not bins:
        return None
    # A step outline over the bins' edges: bars cannot take widths on a log axis.
    edges_x, edges_y = [], []
    for item in bins:
        edges_x += [item["from_ms"], item["to_ms"]]
        edges_y += [item["count"], item["count"]]
    figure = go.Figure(
        go.Scatter(
            x=edges_x,
            y=edges_y,
            mode="lines",
            line={"shape": "hv", "color": "#1f77b4"},
            fill="tozeroy",
            hovertemplate="%{x:.3g} ms: %{y} dispatches<extra></extra>",
            showlegend=False,
        )
    )
    marks = [
        (name, time[key], dash)
        for name, key, dash in (("p50", "p50_ms", "dot"), ("p95", "p95_ms", "dash"), ("max", "max_ms", "solid"))
    ]
    for _, value, dash in marks:
        if value:
            figure.add_vline(x=value, line_dash=dash, line_color="#444")
    numbers = ", ".join(f"{name} {milliseconds(value)}" for name, value, _ in marks if value)
    figure.update_layout(
        title=f"Dispatch durations ({numbers}; dotted p50, dashed p95, solid max)",
        xaxis_type="log",
        xaxis_title="ms (log scale)",
        yaxis_title="dispatches",
    )
    return figure


def verdict_picture(health: dict[str, Any]) -> Any | None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not health["verdicts"]:
        return None
    checks = health["checks"][:20]
    figure = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.35, 0.65],
        subplot_titles=("Verdicts", "Failed checks, by rollouts hit"),
        horizontal_spacing=0.25,
    )
    names = list(health["verdicts"])
    figure.add_trace(
        go.Bar(
            x=names,
            y=[health["verdicts"][name] for name in names],
            marker_color=[VERDICT_COLOURS.get(name, "#9467bd") for name in names],
            hovertemplate="%{x}: %{y} rollouts<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    if checks:
        figure.add_trace(
            go.Bar(
                x=[item["rollouts"] for item in reversed(checks)],
                y=[item["check"] for item in reversed(checks)],
                orientation="h",
                marker_color="#d62728",
                hovertemplate="%{y}: %{x} rollouts<extra></extra>",
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    figure.update_layout(height=max(320, 80 + 28 * len(checks)))
    return figure


def render(figures: dict[str, Any], title: str = "gym-instrument report") -> str:
    """The whole page."""
    pictures = _Pictures()
    source, run, health, time, errors = figures["source"], figures["run"], figures["health"], figures["time"], figures["errors"]
    tasks = figures["tasks"]
    parts: list[str] = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='muted'>{source['spans']} spans of the package from {len(source['files'])} file(s)"
        + (f", <b>{source['replayed_spans']} replayed</b> from a run's files" if source["replayed_spans"] else "")
        + (f"; services: {_e(', '.join(source['services']))}" if source["services"] else "")
        + "</p>",
    ]
    cards = [
        _card("tasks", run["tasks"]),
        _card("dispatches", run["dispatches"], f"{run['errors']} failed"),
        _card("rewarded", run["rewarded"], f"{run['masked']} masked"),
        _card("mean reward", number(run["mean_reward"]), f"std {number(run['reward_std'])}"),
        _card("success", percent(run["success_rate"]), f"reward ≥ {run['success_threshold']:g}"),
        *(_card(f"pass@{k}", number(item["value"]), f"{item['tasks']} tasks") for k, item in list(run["pass_at_k"].items())[:4]),
        _card("all-equal groups", run["zero_variance_groups"], f"of {run['groups']}"),
        _card("p50 / p95", milliseconds(time["p50_ms"]), milliseconds(time["p95_ms"])),
    ]
    parts.append("<div class='cards'>" + "".join(cards) + "</div>")

    parts.append("<h2 id='tasks'>Tasks</h2>")
    parts.append(
        "<p class='muted'>Rollouts are dispatches that did not fail; success is a reward at or above the threshold;"
        " pass@k is the unbiased estimate for the rewarded repeats a task has. A highlighted row is a group whose rewards"
        " are all equal: its advantages are all zero, so it teaches a GRPO-style update nothing.</p>"
    )
    picture = reward_picture(tasks)
    if picture is not None:
        parts.append(pictures.div(picture))
    rows, classes = [], []
    for task in tasks[:TABLE_TASKS]:
        pass_at = ", ".join(f"@{k} {number(v)}" for k, v in task["pass_at_k"].items()) or "-"
        example = task.get("example_trace_url")
        rows.append(
            [
                _e(task["task"]),
                str(task["rollouts"]),
                _e(", ".join(f"{name} {count}" for name, count in task["errors"].items()) or ""),
                str(task["rewarded"]),
                str(task["masked"] or ""),
                number(task["mean_reward"]),
                number(task["reward_std"]),
                f"{number(task['min_reward'])} – {number(task['max_reward'])}" if task["rewarded"] else "-",
                percent(task["success_rate"]),
                pass_at,
                f"all {task['min_reward']:g}" if task["zero_variance"] else "",
                str(task["unhealthy"] or ""),
                milliseconds(task["mean_duration_ms"]),
                f'<a href="{html.escape(example)}" target="_blank" rel="noopener">first trace</a>' if example else "",
            ]
        )
        classes.append("flat" if task["zero_variance"] else "")
    parts.append(
        _table(
            [
                "task",
                "rollouts",
                "errors",
                "rewarded",
                "masked",
                "mean",
                "std",
                "range",
                "success",
                "pass@k",
                "all equal",
                "unhealthy",
                "mean time",
                "",
            ],
            rows,
            text_columns=(0, 2, 9, 13),
            classes=classes,
        )
    )
    if len(tasks) > TABLE_TASKS:
        parts.append(f"<p class='muted'>{len(tasks) - TABLE_TASKS} more tasks in <code>--format json</code>.</p>")
    if errors["by_type"]:
        parts.append("<h2 id='errors'>Failed dispatches</h2>")
        parts.append(
            _table(["error.type", "dispatches"], [[_e(name), str(count)] for name, count in errors["by_type"].items()], (0,))
        )
        parts.append(
            _table(
                ["task", "rollout id", "error.type", "trace"],
                [
                    [_e(item["task"]), _e(item["rollout_id"]), _e(item["error_type"]), _trace_cell(item)]
                    for item in errors["rollouts"]
                ],
                (0, 1, 2, 3),
            )
        )

    parts.append("<h2 id='health'>Health</h2>")
    if health["spans"]:
        picture = verdict_picture(health)
        if picture is not None:
            parts.append(pictures.div(picture))
        parts.append(
            _table(
                ["check", "rollouts"],
                [[_e(item["check"]), str(item["rollouts"])] for item in health["checks"]],
                (0,),
            )
        )
        if health["unhealthy"]:
            listed = len(health["unhealthy"])
            parts.append(
                f"<p>Unhealthy rollouts: {health['unhealthy_total']}"
                + (f" (the first {listed} listed)" if listed < health["unhealthy_total"] else "")
                + "</p>"
            )
            parts.append(
                _table(
                    ["task", "rollout id", "failed checks", "trace"],
                    [
                        [_e(item["task"]), _e(item["rollout_id"]), _e(", ".join(item["checks"]) or "-"), _trace_cell(item)]
                        for item in health["unhealthy"]
                    ],
                    (0, 1, 2, 3),
                )
            )
    else:
        parts.append("<p class='muted'>No health spans: the run had no health pass, or it was not traced.</p>")

    parts.append("<h2 id='time'>Time</h2>")
    parts.append(
        f"<p>Dispatch duration over {time['measured']} dispatches: p50 {milliseconds(time['p50_ms'])},"
        f" p95 {milliseconds(time['p95_ms'])}, max {milliseconds(time['max_ms'])}, mean {milliseconds(time['mean_ms'])}."
        + (
            f" {time['without_duration']} dispatches have no recorded duration (replayed rows without latency) and are left out."
            if time["without_duration"]
            else ""
        )
        + "</p>"
    )
    picture = duration_picture(time)
    if picture is not None:
        parts.append(pictures.div(picture))
    if time["slowest"]:
        parts.append("<p>Slowest rollouts:</p>")
        parts.append(
            _table(
                ["task", "rollout id", "duration", "trace"],
                [
                    [_e(item["task"]), _e(item["rollout_id"]), milliseconds(item["duration_ms"]), _trace_cell(item)]
                    for item in time["slowest"]
                ],
                (0, 1, 3),
            )
        )
    parts.append(
        "<h2 id='source'>Source</h2><ul>" + "".join(f"<li><code>{_e(path)}</code></li>" for path in source["files"]) + "</ul>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)
