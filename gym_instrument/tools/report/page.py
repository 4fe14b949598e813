"""The report as one self-contained HTML page: tables that sort and filter, links to each rollout's
trace, and small inline SVG charts (:mod:`gym_instrument.tools.report.svg`).

Nothing is loaded from the network and no plotting library is embedded: the page of a small run is
tens of KB, and it grows with the rows it embeds (at most ``ROLLOUT_ROWS`` rollouts and
``TABLE_TASKS`` tasks; the counts above them are over the whole run). Sorting and filtering are a
few lines of script in the page; without script the tables still read.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from gym_instrument.tools.report.svg import (
    Bar,
    Line,
    Segment,
    duration_label,
    histogram,
    horizontal_bars,
    line_chart,
    stacked_shares,
)
from gym_instrument.tools.report.text import milliseconds, number, percent, plural, span_text

PICTURE_TASKS = 40  # tasks drawn in the reward-per-task chart
TABLE_TASKS = 5000  # rows of the per-task table (the JSON has them all)
VERDICT_COLOURS = {"healthy": "#59a14f", "unhealthy": "#e15759", "unobserved": "#9c9c9c"}
SUCCESS, BELOW, MASKED, UNSCORED, UNVERIFIED, FAILED = "#59a14f", "#f28e2b", "#b07aa1", "#9c755f", "#bab0ac", "#e15759"
KIND = "#ff9d9a"

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 0; }
main { margin: 16px auto; max-width: 1340px; padding: 0 20px; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin-top: 30px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 4px; }
nav a { margin-right: 12px; }
.muted { color: #666; } .note { color: #555; max-width: 980px; }
.infra { border-left: 4px solid #ccc; padding: 2px 12px; margin: 12px 0; }
.infra h2 { margin-top: 6px; border: 0; } .infra.over { border-left-color: #e15759; background: #fdf3f2; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 6px 12px; min-width: 120px; max-width: 230px; }
.card b { display: block; font-size: 20px; } .card span { font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.charts figure { margin: 0; } figcaption { font-weight: 600; margin-bottom: 4px; }
svg.chart { max-width: 100%; height: auto; }
.table { max-height: 620px; overflow-y: auto; border: 1px solid #eee; margin: 8px 0; width: fit-content; max-width: 100%; }
.table.full { width: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.table.full table { width: 100%; }
th, td { border-bottom: 1px solid #eee; padding: 3px 6px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; position: sticky; top: 0; }
table.sortable th { cursor: pointer; } th[aria-sort=ascending]::after { content: " ▲"; }
th[aria-sort=descending]::after { content: " ▼"; }
td.text, th.text { text-align: left; } td.text { overflow-wrap: break-word; }
td:not(.text) { white-space: nowrap; } td.name { min-width: 8em; }
tr.flat td { background: #fff6e0; } tr.bad td { background: #fdecea; } tr.good td { background: #eaf6e8; }
code { background: #f3f3f3; padding: 0 3px; border-radius: 3px; font-size: 12px; }
.filters { display: flex; gap: 10px; align-items: center; margin: 8px 0; }
.filters input { width: 340px; padding: 3px 6px; }
small { color: #777; display: block; }
.crossed td.bad { background: #fdecea; font-weight: 600; }
"""

SCRIPT = """
function cellKey(row, index) {
  const cell = row.cells[index];
  const value = cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent.trim();
  if (value === '' || value === '-') return null;
  const parsed = Number(value);
  return Number.isFinite(parsed) ? parsed : value.toLowerCase();
}
function sortTable(table, index, header) {
  const ascending = header.getAttribute('aria-sort') !== 'ascending';
  for (const cell of header.parentNode.cells) cell.removeAttribute('aria-sort');
  header.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
  const body = table.tBodies[0];
  const rows = [...body.rows];
  rows.sort((a, b) => {
    const x = cellKey(a, index), y = cellKey(b, index);
    if (x === y) return 0;
    if (x === null) return 1;
    if (y === null) return -1;
    if (typeof x !== typeof y) return (typeof x === 'number' ? -1 : 1);
    return (x < y ? -1 : 1) * (ascending ? 1 : -1);
  });
  for (const row of rows) body.appendChild(row);
}
for (const table of document.querySelectorAll('table.sortable')) {
  [...table.tHead.rows[0].cells].forEach((header, index) =>
    header.addEventListener('click', () => sortTable(table, index, header)));
}
for (const box of document.querySelectorAll('.filters')) {
  const table = document.getElementById(box.dataset.table);
  const text = box.querySelector('input');
  const verdict = box.querySelector('select');
  const shown = box.querySelector('.shown');
  const apply = () => {
    const terms = text.value.toLowerCase().split(/\\s+/).filter(Boolean);
    const wanted = verdict ? verdict.value : '';
    let count = 0;
    for (const row of table.tBodies[0].rows) {
      const words = row.textContent.toLowerCase();
      const ok = terms.every((term) => words.includes(term)) && (!wanted || row.getAttribute("data-verdict") === wanted);
      row.hidden = !ok;
      count += ok;
    }
    shown.textContent = count + ' shown';
  };
  text.addEventListener('input', apply);
  if (verdict) verdict.addEventListener('change', apply);
  apply();
}
"""


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def _name(value: Any) -> str:
    """A name (task id, agent) that may wrap after its separators, never inside a word."""
    text = _e(value)
    for separator in ("/", "_", "."):
        text = text.replace(separator, separator + "<wbr>")
    return text


def _td(value: Any, text: bool = False, sort: Any = None, title: str | None = None, css: str = "") -> str:
    """A cell: ``value`` is already HTML; ``sort`` the value it sorts by when its text would not do."""
    classes = " ".join(name for name in ("text" if text else "", css) if name)
    attributes = f' class="{classes}"' if classes else ""
    if sort is not None and str(sort) != str(value):  # a cell whose text sorts right needs no key
        attributes += f' data-v="{html.escape(str(sort))}"'
    if title:
        attributes += f' title="{html.escape(title)}"'
    return f"<td{attributes}>{value}</td>"


def _table(
    header: Sequence[tuple[str, bool]],
    rows: Sequence[str],
    table_id: str = "",
    sortable: bool = True,
    css: str = "",
    full: bool = False,
) -> str:
    """``header``: (name, is text); ``rows``: ``<tr>…</tr>`` strings."""
    head = "".join(
        f'<th class="text">{html.escape(name)}</th>' if text else f"<th>{html.escape(name)}</th>" for name, text in header
    )
    classes = " ".join(name for name in ("sortable" if sortable else "", css) if name)
    identity = f' id="{table_id}"' if table_id else ""
    return (
        f'<div class="table{" full" if full else ""}"><table{identity} class="{classes}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _trace(rollout: dict[str, Any]) -> str:
    trace_id = str(rollout["trace_id"])
    short = html.escape(trace_id[:12] + "…")
    url = rollout.get("trace_url")
    if url:
        link = f'<a href="{html.escape(url)}" target="_blank" rel="noopener" title="{html.escape(trace_id)}">'
        return f"{link}<code>{short}</code></a>"
    return f'<code title="{html.escape(trace_id)}">{short}</code>'


def _reward(rollout: dict[str, Any]) -> tuple[str, Any]:
    """A reward cell's text and sort key: a number, else the rollout's outcome (masked, failure: KIND, …)."""
    from gym_instrument.tools.report.text import reward_text

    value = rollout.get("reward")
    if isinstance(value, (int, float)):
        return f"{value:g}", value
    return html.escape(reward_text(rollout)), ""


def _card(label: str, value: Any, note: str = "", title: str = "") -> str:
    tip = f' title="{html.escape(title)}"' if title else ""
    return f"<div class='card'{tip}>{_e(label)}<b>{_e(value)}</b><span class='muted'>{_e(note)}</span></div>"


def _figure(caption: str, svg: str) -> str:
    return f"<figure><figcaption>{html.escape(caption)}</figcaption>{svg}</figure>" if svg else ""


def reward_chart(figures: dict[str, Any]) -> str:
    """Every rollout once: by reward value (or bins of it), then masked, failure kind, unscored, not verified, failed."""
    rewards = figures["rewards"]
    success = figures["run"]["success_threshold"]
    extra = [
        Bar(name, rewards[key], colour, f"{plural(rewards[key], 'rollout')} {name}")
        for name, key, colour in (
            ("masked", "masked", MASKED),
            ("failure kind", "failure_kind", KIND),
            ("unscored", "unscored", UNSCORED),
            ("no verify", "unverified", UNVERIFIED),
            ("failed", "failed", FAILED),
        )
        if rewards[key]
    ]
    if rewards["bins"]:
        bins = [(item["from"], item["to"], item["count"]) for item in rewards["bins"]]
        return histogram(bins, "reward", "rollouts", lambda value: f"{value:.2g}", extra)
    values = [
        Bar(
            f"{float(value):g}",
            count,
            SUCCESS if float(value) >= success else BELOW,
            f"reward {float(value):g}: {plural(count, 'rollout')}",
        )
        for value, count in rewards["values"].items()
    ]
    bars = [*values, *extra]
    return horizontal_bars(bars, "rollouts", label_width=110) if bars else ""


def task_chart(tasks: Sequence[dict[str, Any]], threshold: float) -> str:
    rows = []
    for task in tasks[:PICTURE_TASKS]:
        # Every rollout once, as the Tasks table counts them (a failed attempt that a retry replaced is not one).
        successes, below = task["successes"], task["scored"] - task["successes"]
        rows.append(
            (
                task["task"],
                [
                    Segment(f"success (≥ {threshold:g})", successes, SUCCESS),
                    Segment("below", below, BELOW),
                    Segment("masked", task["masked"], MASKED),
                    Segment("failure kind", task["failure_kinds"], KIND),
                    Segment("unscored", task["unscored"], UNSCORED),
                    Segment("no verify", task["unverified"], UNVERIFIED),
                    Segment("failed", task["failed"], FAILED),
                ],
            )
        )
    return stacked_shares(rows)


def duration_chart(time: dict[str, Any]) -> str:
    linear = time.get("linear_histogram") or {"bins": [], "beyond": 0}
    bins = [(item["from_ms"], item["to_ms"], item["count"]) for item in linear["bins"]]
    if not bins:
        return ""
    scale = bins[-1][1]
    extra = (
        [Bar("longer", linear["beyond"], "#76b7b2", f"{plural(linear['beyond'], 'dispatch', 'dispatches')} longer")]
        if linear["beyond"]
        else []
    )
    unit = "s" if scale >= 2000 else "ms"
    return histogram(bins, f"dispatch duration ({unit})", "dispatches", lambda ms: duration_label(ms, scale), extra)


def checks_chart(health: dict[str, Any]) -> str:
    checks = health["checks"][:20]
    return horizontal_bars(
        [Bar(item["check"], item["rollouts"], "#e15759") for item in checks], "rollouts hit (a rollout may fail several checks)"
    )


def verdict_chart(health: dict[str, Any]) -> str:
    return horizontal_bars(
        [Bar(name, count, VERDICT_COLOURS.get(name, "#b07aa1")) for name, count in health["verdicts"].items()],
        "rollouts",
        label_width=110,
    )


def _cards(figures: dict[str, Any]) -> str:
    run, time = figures["run"], figures["time"]
    pass_at = run["pass_at_k"]
    one = pass_at.get("1")
    largest = next(reversed(pass_at), None)
    tokens = figures.get("tokens") or {}
    cards = [
        _card(
            "rollouts",
            run["rollouts"],
            f"{plural(run['tasks'], 'task')}; {plural(run['dispatches'], 'dispatch', 'dispatches')},"
            f" {plural(figures['retries']['retried_dispatches'], 'retry', 'retries')}",
        ),
        _card("succeeded", run["successes"], f"reward ≥ {run['success_threshold']:g}"),
        _card("scored zero", run["scored_zero"], "a reward of 0, no failure"),
        _card(
            "infrastructure failures",
            run["infra_failures"],
            f"{run['masked']} masked, {plural(run['failure_kinds'], 'failure kind')},"
            f" {plural(run['failed'], 'failed dispatch', 'failed dispatches')}",
        ),
        _card("unhealthy", run["unhealthy"] if figures["health"]["spans"] else "-", f"of {run['judged']} with a verdict"),
        _card("wall time", milliseconds(figures["source"].get("wall_ms")), span_text(figures["source"])),
        _card(
            "tokens",
            f"{tokens['input_tokens'] + tokens['output_tokens']:,}" if tokens.get("rollouts") else "-",
            f"over {plural(tokens['rollouts'], 'rollout')}" if tokens.get("rollouts") else "none on these spans",
        ),
        _card(
            "mean reward",
            number(run["mean_reward"]),
            f"over {plural(run['scored'], 'scored rollout')}; std {number(run['reward_std'])}",
            "the mean of every scored rollout's reward (numeric, no failure, not masked): each weighs the same",
        ),
        _card("success", percent(run["success_rate"]), f"of {plural(run['scored'], 'scored rollout')}"),
    ]
    if one:
        cards.append(
            _card(
                "pass@1",
                number(one["value"]),
                f"mean over {one['tasks']} tasks of their success rate",
                "each task weighs the same, whatever its number of repeats",
            )
        )
    if largest and largest != "1":
        item = pass_at[largest]
        cards.append(_card(f"pass@{largest}", number(item["value"]), f"over {item['tasks']} tasks with ≥ {largest} scored"))
    if figures["health"]["spans"]:
        cards.append(
            _card(
                "succeeded but unhealthy",
                figures["reward_health"]["succeeded_unhealthy_total"],
                "successes the health pass flags",
            )
        )
    cards.append(_card("all-equal groups", run["zero_variance_groups"], f"of {run['groups']} tasks with ≥ 2 scored"))
    cards.append(_card("dispatch p50 / p95", milliseconds(time["p50_ms"]), f"p95 {milliseconds(time['p95_ms'])}"))
    return "<div class='cards'>" + "".join(cards) + "</div>"


def _task_rows(tasks: Sequence[dict[str, Any]]) -> list[str]:
    rows = []
    for task in tasks[:TABLE_TASKS]:
        pass_at = task["pass_at_k"]
        largest = next(reversed(pass_at), None)
        failures = task["infra_failures"]["failures"]
        kinds = ", ".join(f"{name} {count}" for name, count in task["infra_failures"]["kinds"].items())
        example = task.get("example_trace_url")
        raw = task["task_id"] if task["task_id"] and task["task_id"] != task["task"] else None
        cells = [
            _td(_name(task["task"]), text=True, title=raw, css="name"),
            _td(_name(task["agent"]), text=True, css="name"),
            _td(task["rollouts"]),
            _td(failures or "", sort=failures, title=kinds or None),
            _td(task["scored"]),
            _td(task["successes"]),
            _td(task["masked"] or "", sort=task["masked"]),
            _td(number(task["mean_reward"]), sort=task["mean_reward"] if task["mean_reward"] is not None else ""),
            _td(number(task["reward_std"]), sort=task["reward_std"] if task["reward_std"] is not None else ""),
            _td(percent(task["success_rate"]), sort=task["success_rate"] if task["success_rate"] is not None else ""),
            _td(number(pass_at.get("1")), sort=pass_at.get("1", "")),
            _td(
                f"{number(pass_at[largest])} <span class='muted'>k={largest}</span>" if largest else "-",
                sort=pass_at[largest] if largest else "",
            ),
            _td(f"all {task['min_reward']:g}" if task["zero_variance"] else ""),
            _td(task["unhealthy"] or "", sort=task["unhealthy"]),
            _td(
                milliseconds(task["mean_duration_ms"]),
                sort=task["mean_duration_ms"] if task["mean_duration_ms"] is not None else "",
            ),
            _td(
                _trace({"trace_id": task["example_trace_id"], "trace_url": example}) if task["example_trace_id"] else "",
                text=True,
            ),
        ]
        css = ' class="flat"' if task["zero_variance"] else ""
        rows.append(f"<tr{css}>{''.join(cells)}</tr>")
    return rows


TASK_HEADER = [
    ("task", True),
    ("agent", True),
    ("rollouts", False),
    ("failures", False),
    ("scored", False),
    ("succeeded", False),
    ("masked", False),
    ("mean reward", False),
    ("std", False),
    ("success", False),
    ("pass@1", False),
    ("pass@k", False),
    ("all equal", False),
    ("unhealthy", False),
    ("mean time", False),
    ("trace", True),
]


def _rollout_rows(rollouts: Sequence[dict[str, Any]], steps: bool = False) -> list[str]:
    """The all-rollouts table's rows; ``steps``: with the training step of each (a run whose dispatches name one)."""
    rows = []
    for item in rollouts:
        reward_text, reward_sort = _reward(item)
        rollout_id = _e(item["rollout_id"])
        if item.get("retry_of"):
            rollout_id += f"<small>retry of {_e(item['retry_of'])}</small>"
        if item.get("retried_by"):
            rollout_id += f"<small>retried as {_e(item['retried_by'])}</small>"
        if item["error_type"]:
            verdict, verdict_key = f"failed: {_e(item['error_type'].rsplit('.', 1)[-1])}", "failed"
        else:
            verdict_key = item["verdict"] or "none"
            verdict = _e(item["verdict"] or "-")
        bad = item["verdict"] == "unhealthy" or item["error_type"]
        cells = [
            _td(_name(item["task"]), text=True, css="name"),
            _td(_e(item["repeat"]), sort=item["repeat"] if item["repeat"] is not None else ""),
            *([_td(_e(item.get("step")), sort=item.get("step", ""))] if steps else []),
            _td(rollout_id, text=True, sort=item["rollout_id"] or ""),
            _td(_name(item["agent"]), text=True),
            _td(reward_text, sort=reward_sort),
            _td(verdict, text=True, title=item["error_type"]),
            _td(_name(", ".join(item["checks"])) if item["checks"] else "", text=True),
            _td(milliseconds(item["duration_ms"]), sort=item["duration_ms"] if item["duration_ms"] is not None else ""),
            _td(_trace(item), text=True),
        ]
        css = ' class="bad"' if bad else ""
        rows.append(f'<tr data-verdict="{html.escape(verdict_key)}"{css}>{"".join(cells)}</tr>')
    return rows


def _listed_rows(items: Sequence[dict[str, Any]]) -> list[str]:
    """Rollouts of a list (unhealthy, succeeded but unhealthy): task, rollout id, reward, checks, trace."""
    rows = []
    for item in items:
        reward_text, reward_sort = _reward(item)
        cells = [
            _td(_e(item["task"]), text=True),
            _td(_e(item["rollout_id"]), text=True),
            _td(reward_text, sort=reward_sort),
            _td(_e(", ".join(item["checks"]) or "-"), text=True),
            _td(_trace(item), text=True),
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return rows


LISTED_HEADER = [("task", True), ("rollout id", True), ("reward", False), ("failed checks", True), ("trace", True)]


def _crossed(reward_health: dict[str, Any], verdicts: Sequence[str]) -> str:
    counts = reward_health["counts"]
    columns = ["healthy", "unhealthy", "unobserved", *verdicts, "other verdict", "no verdict"]
    columns = [name for name in dict.fromkeys(columns) if any(row.get(name) for row in counts.values())]
    rows = []
    for name in reward_health["classes"]:
        row = counts.get(name)
        if not row:
            continue
        cells = [_td(_e(name), text=True)]
        for column in columns:
            value = row.get(column, 0)
            css = "bad" if name == "success" and column == "unhealthy" and value else ""
            cells.append(_td(value or "", sort=value, css=css))
        cells.append(_td(sum(row.values())))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = [("outcome \\ verdict", True), *((column, False) for column in columns), ("rollouts", False)]
    return _table(header, rows, table_id="reward-health", sortable=False, css="crossed")


def _group_table(groups: Sequence[dict[str, Any]], name: str) -> str:
    rows = []
    for group in groups:
        cells = [
            _td(_e(group["name"]), text=True),
            _td(group["tasks"]),
            _td(group["rollouts"]),
            _td(group["infra_failures"] or ""),
            _td(group["scored"]),
            _td(number(group["mean_reward"])),
            _td(percent(group["success_rate"])),
            _td(number(group["pass_at_1"])),
            _td(group["unhealthy"] or ""),
            _td(percent(group["unhealthy_rate"])),
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = [
        (name, True),
        ("tasks", False),
        ("rollouts", False),
        ("infra failures", False),
        ("scored", False),
        ("mean reward", False),
        ("success", False),
        ("pass@1", False),
        ("unhealthy", False),
        ("unhealthy rate", False),
    ]
    return _table(header, rows)


def _retries(retries: dict[str, Any]) -> str:
    if not retries["chains"] and not retries["retried_dispatches"]:
        return ""
    parts = [
        "<h2 id='retries'>Retries</h2>",
        f"<p class='note'>Retries (attempt ≥ 1): {retries['retried_dispatches']}. A retry is chained to what"
        " it retried by task index and repeat: <code>1-2</code> failed, <code>1-2-a1</code> is its next attempt."
        f" Recovered: {retries['recovered']}; still failed after the last attempt: {retries['still_failed']}.</p>",
    ]
    rows = []
    for chain in retries["chains"]:
        steps = []
        for attempt in chain["attempts"]:
            if attempt["error_type"]:
                outcome = f"failed ({_e(attempt['error_type'].rsplit('.', 1)[-1])})"
            else:
                reward_text, _ = _reward(attempt)
                outcome = f"reward {reward_text}, {_e(attempt.get('verdict') or 'no verdict')}"
            steps.append(f"{_trace(attempt)} <b>{_e(attempt['rollout_id'])}</b> {outcome}")
        cells = [
            _td(_e(chain["task"]), text=True),
            _td(f"{chain['task_index']}-{chain['repeat']}", text=True),
            _td(" → ".join(steps), text=True),
            _td(_e(chain["outcome"]), text=True),
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    parts.append(_table([("task", True), ("rollout", True), ("attempts, in order", True), ("outcome", True)], rows))
    return "".join(parts)


def infra_section(infra: dict[str, Any] | None, tasks: Sequence[dict[str, Any]]) -> str:
    """First on the page: rollouts that failed for the infrastructure, apart from honest rewards of 0, per task."""
    from gym_instrument.tools.report.text import infra_line, kinds_text

    line = infra_line(infra)
    if infra is None or line is None:
        return ""
    css = "infra over" if infra["over_limit"] else "infra"
    parts = [
        f"<section id='infra-failures' class='{css}'><h2>Infrastructure failures: {infra['failures']} of"
        f" {plural(infra['rollouts'], 'rollout')}</h2><p>{_e(line)}</p>",
        "<p class='note'>A rollout failed for the infrastructure, not for its answer, when its dispatch failed"
        " (<code>error.type</code>), or the verify that decides its reward (by its reward rule) names a failure kind"
        " (<code>nemo.gym.failure_kind</code>) or is masked. A trainer that reads such a rollout as reward 0 learns from a"
        " broken environment. Scored zero: a numeric reward of 0 with none of these. A rollout is either an"
        " infrastructure failure or scored, never both. A failed attempt that a retry replaced is not a rollout.</p>",
    ]
    failing = [task for task in tasks if (task.get("infra_failures") or {}).get("failures")]
    if failing:
        rows = [
            f"<tr>{_td(_e(task['task']), text=True)}{_td(task['infra_failures']['failures'])}"
            f"{_td(task['infra_failures']['rollouts'])}{_td(_e(kinds_text(task['infra_failures']['kinds'])), text=True)}"
            f"{_td(task['infra_failures']['scored_zero'])}</tr>"
            for task in failing
        ]
        header = [("task", True), ("failures", False), ("rollouts", False), ("kinds", True), ("scored zero", False)]
        parts.append(_table(header, rows, table_id="infra-table"))
    return "".join(parts) + "</section>"


STEP_HEADER = [
    ("step", False),
    ("policy version", True),
    ("rollouts", False),
    ("infra failures", False),
    ("scored", False),
    ("succeeded", False),
    ("mean reward", False),
    ("success", False),
    ("tokens / rollout", False),
]


def step_section(steps: Sequence[dict[str, Any]] | None) -> str:
    """Reward, success, infrastructure failures and tokens per training step (nothing when no dispatch named a step)."""
    from gym_instrument.tools.report.text import count_text, policy_text

    if not steps:
        return ""
    numbered = [step for step in steps if step["step"] is not None]

    def line(name: str, key: str, colour: str) -> Line:
        return Line(name, colour, [(step["step"], step[key]) for step in numbered if step[key] is not None])

    parts = [
        "<h2 id='steps'>Steps</h2>",
        "<p class='note'>Each rollout once, under the training step its dispatch names (<code>nemo.gym.train.step</code>,"
        " with its <code>nemo.gym.policy.version</code>); rollouts whose dispatch names none are under “(no step)”. Mean"
        " reward and success over the step's scored rollouts, infrastructure failures over its rollouts, tokens per rollout"
        " over those with tokens.</p>",
        "<div class='charts'>",
        _figure(
            "Mean reward per step (over scored rollouts)",
            line_chart([line("mean reward", "mean_reward", "#4e79a7")], "step", "mean reward", lambda value: f"{value:.3g}"),
        ),
        _figure(
            "Success (of scored) and infrastructure failures (of rollouts) per step",
            line_chart(
                [line("success", "success_rate", SUCCESS), line("infrastructure failures", "infra_share", FAILED)],
                "step",
                "share",
                lambda value: f"{value:.0%}",
                (0.0, 1.0),
            ),
        ),
    ]
    if any(step["tokens_mean"] is not None for step in numbered):
        parts.append(
            _figure(
                "Tokens per rollout per step (mean)",
                line_chart([line("tokens / rollout", "tokens_mean", "#76b7b2")], "step", "tokens", lambda value: f"{value:,.0f}"),
            )
        )
    parts.append("</div>")
    rows = []
    for step in steps:
        cells = [
            _td("(no step)" if step["step"] is None else step["step"], sort=step["step"] if step["step"] is not None else ""),
            _td(_e(policy_text(step)), text=True),
            _td(step["rollouts"]),
            _td(
                f"{step['infra_failures']} <span class='muted'>{percent(step['infra_share'])}</span>", sort=step["infra_failures"]
            ),
            _td(step["scored"]),
            _td(step["successes"]),
            _td(number(step["mean_reward"]), sort=step["mean_reward"] if step["mean_reward"] is not None else ""),
            _td(percent(step["success_rate"]), sort=step["success_rate"] if step["success_rate"] is not None else ""),
            _td(count_text(step["tokens_mean"]), sort=step["tokens_mean"] if step["tokens_mean"] is not None else ""),
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    parts.append(_table(STEP_HEADER, rows, table_id="steps-table"))
    return "".join(parts)


def token_section(tokens: dict[str, Any] | None) -> str:
    """Tokens per rollout and per task, against reward, and the slowest model calls (nothing when the spans have none)."""
    from gym_instrument.tools.report.text import count_text, token_lines

    lines = token_lines(tokens)
    if tokens is None or not lines:
        return ""
    parts = ["<h2 id='tokens'>Tokens</h2>", f"<p>{_e(lines[1])}</p>"]
    if tokens["by_reward"]:
        rows = [
            f"<tr>{_td(_e(item['reward']), text=True)}{_td(item['rollouts'])}{_td(count_text(item['mean']))}"
            f"{_td(count_text(item['p95']))}</tr>"
            for item in tokens["by_reward"]
        ]
        parts.append("<h3>Tokens against reward</h3>")
        header = [("reward", True), ("rollouts", False), ("mean tokens", False), ("p95", False)]
        parts.append(_table(header, rows, table_id="tokens-reward-table"))
    if tokens["tasks"]:
        rows = [
            f"<tr>{_td(_e(task), text=True)}{_td(item['rollouts'])}{_td(count_text(item['mean']))}"
            f"{_td(count_text(item['p95']))}{_td(count_text(item['max']))}</tr>"
            for task, item in tokens["tasks"].items()
        ]
        parts.append("<h3>Tokens per task (per rollout)</h3>")
        header = [("task", True), ("rollouts", False), ("mean", False), ("p95", False), ("max", False)]
        parts.append(_table(header, rows, table_id="tokens-task-table"))
    if tokens["slowest_model_calls"]:
        rows = [
            f"<tr>{_td(_e(item['name']), text=True)}{_td(_e(item['model'] or '-'), text=True)}"
            f"{_td(_e(item['rollout_id'] or '-'), text=True)}{_td(milliseconds(item['duration_ms']), sort=item['duration_ms'])}"
            f"{_td(count_text(item['input_tokens']))}{_td(count_text(item['output_tokens']))}{_td(_trace(item), text=True)}</tr>"
            for item in tokens["slowest_model_calls"]
        ]
        parts.append("<h3>Slowest model calls</h3>")
        header = [
            ("call", True),
            ("model", True),
            ("rollout id", True),
            ("time", False),
            ("input", False),
            ("output", False),
            ("trace", True),
        ]
        parts.append(_table(header, rows, table_id="model-calls-table"))
    return "".join(parts)


def render(figures: dict[str, Any], title: str = "gym-instrument report") -> str:
    """The whole page."""
    source, run, health, time, errors = figures["source"], figures["run"], figures["health"], figures["time"], figures["errors"]
    tasks = figures["tasks"]
    threshold = run["success_threshold"]
    parts: list[str] = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body><main>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='muted'>{source['spans']} spans of the package from {len(source['files'])} file(s)"
        + (f", <b>{source['replayed_spans']} replayed</b> from a run's files" if source["replayed_spans"] else "")
        + (f"; services: {_e(', '.join(source['services']))}" if source["services"] else "")
        + "</p>",
        infra_section(figures.get("infra_failures"), tasks),
        "<nav><a href='#rewards'>Rewards</a><a href='#reward-health-section'>Reward × health</a><a href='#tasks'>Tasks</a>"
        "<a href='#groups'>Agents</a><a href='#rollouts'>All rollouts</a><a href='#health'>Health</a>"
        "<a href='#time'>Time</a>" + ("<a href='#steps'>Steps</a>" if figures.get("steps") else "") + "</nav>",
        _cards(figures),
        "<p class='note'>A rollout is a dispatch (a failed attempt that a retry replaced is not one); each is counted"
        " once, by what the verify that decides its reward says (its reward rule: last, sum, max or first). <b>Mean"
        " reward</b> and <b>success</b> are over scored rollouts (a numeric reward, no failure, not masked): each counts"
        f" once, so a task with more repeats weighs more. <b>pass@k</b> is over tasks: per task, the unbiased chance that"
        f" at least one of k of its rollouts succeeds (reward ≥ {threshold:g}), then the mean over tasks with at least k"
        " scored rollouts, each task weighing the same. pass@1 is the mean of the tasks' success rates; it differs from"
        " the success rate when tasks have different numbers of scored rollouts.</p>",
    ]

    parts.append("<h2 id='rewards'>Rewards</h2><div class='charts'>")
    parts.append(
        _figure(
            f"Reward of every rollout ({plural(run['rollouts'], 'rollout')})"
            + (": a histogram, rewards are not binary" if figures["rewards"]["bins"] else ""),
            reward_chart(figures),
        )
    )
    shown = min(len(tasks), PICTURE_TASKS)
    parts.append(
        _figure(
            "Reward per task: share of its rollouts at each outcome, as the Tasks table counts them"
            f" ({shown} of {len(tasks)} tasks)",
            task_chart(tasks, threshold),
        )
    )
    parts.append("</div>")

    reward_health = figures["reward_health"]
    parts.append("<h2 id='reward-health-section'>Reward × health</h2>")
    if health["spans"]:
        parts.append(
            f"<p class='note'>Rollouts by outcome (success: reward ≥ {threshold:g}) and health verdict. A success the health"
            " pass calls unhealthy is a sign of reward hacking or of a broken judge: the reward was given to a rollout whose"
            " model calls or turns went wrong.</p>"
        )
        parts.append(_crossed(reward_health, list(health["verdicts"])))
        flagged = reward_health["succeeded_unhealthy"]
        parts.append(
            "<h3 id='succeeded-unhealthy'>Succeeded but unhealthy:"
            f" {plural(reward_health['succeeded_unhealthy_total'], 'rollout')}</h3>"
        )
        if flagged:
            if len(flagged) < reward_health["succeeded_unhealthy_total"]:
                parts.append(f"<p class='muted'>The first {len(flagged)} listed.</p>")
            parts.append(_table(LISTED_HEADER, _listed_rows(flagged), table_id="succeeded-unhealthy-table"))
        else:
            parts.append("<p class='muted'>None: no successful rollout has an unhealthy verdict.</p>")
    else:
        parts.append("<p class='muted'>No health spans: reward cannot be crossed with a verdict.</p>")

    parts.append("<h2 id='tasks'>Tasks</h2>")
    parts.append(
        "<p class='note'>One row per task, over its rollouts (as everywhere: a failed attempt that a retry replaced is"
        " not one); failures: its infrastructure failures (hover for their kinds), masked among them. pass@k at k ="
        " the task's own number of scored rollouts. A highlighted row is a group whose rewards"
        " are all equal: its advantages are all zero, so it teaches a GRPO-style update nothing. Click a column to sort.</p>"
    )
    parts.append(_table(TASK_HEADER, _task_rows(tasks), table_id="tasks-table", full=True))
    if len(tasks) > TABLE_TASKS:
        parts.append(f"<p class='muted'>{len(tasks) - TABLE_TASKS} more tasks in <code>--format json</code>.</p>")

    parts.append(step_section(figures.get("steps")))

    groups = figures["groups"]
    parts.append("<h2 id='groups'>Per agent</h2>")
    parts.append(
        "<p class='note'>The tasks' figures summed per <code>nemo.gym.agent.name</code> (a task run by several agents is"
        " under “(several)”): rollouts, rewards and verdicts over each agent's rollouts; pass@1 over its tasks.</p>"
    )
    parts.append(_group_table(groups["agent"], "agent"))
    if groups["taskset"]:
        parts.append("<h3>Per taskset</h3>")
        parts.append(_group_table(groups["taskset"], "taskset"))

    rollouts = figures["rollouts"]
    parts.append("<h2 id='rollouts'>All rollouts</h2>")
    parts.append(
        f"<p class='note'>Every dispatch, one row each ({rollouts['listed']} of {rollouts['total']}"
        + (": the first ones read; the figures above count all of them" if rollouts["listed"] < rollouts["total"] else "")
        + "). Click a column to sort; type to filter (every word must match)."
        + (
            ""
            if figures.get("trace_url")
            else " Trace ids link to a trace viewer with <code>--trace-url phoenix</code>"
            " (or <code>mlflow</code>, or a URL template with <code>{trace_id}</code>)."
        )
        + "</p>"
    )
    options = "".join(
        f"<option value='{value}'>{label}</option>"
        for value, label in (
            ("", "any verdict"),
            ("healthy", "healthy"),
            ("unhealthy", "unhealthy"),
            ("unobserved", "unobserved"),
            ("none", "no verdict"),
            ("failed", "failed dispatch"),
        )
    )
    parts.append(
        "<div class='filters' data-table='rollouts-table'><input type='search' id='rollouts-filter'"
        " placeholder='filter: task, rollout id, agent, check…' aria-label='filter the rollouts'>"
        f"<select id='rollouts-verdict' aria-label='verdict'>{options}</select><span class='shown muted'></span></div>"
    )
    parts.append(
        _table(
            [
                ("task", True),
                ("repeat", False),
                *([("step", False)] if figures.get("steps") else []),
                ("rollout id", True),
                ("agent", True),
                ("reward", False),
                ("verdict", True),
                ("failed checks", True),
                ("duration", False),
                ("trace", True),
            ],
            _rollout_rows(rollouts["rows"], steps=bool(figures.get("steps"))),
            table_id="rollouts-table",
            full=True,
        )
    )
    parts.append(_retries(figures["retries"]))

    if errors["by_type"]:
        parts.append("<h2 id='errors'>Failed dispatches</h2>")
        parts.append(
            _table(
                [("error.type", True), ("dispatches", False)],
                [f"<tr>{_td(_e(name), text=True)}{_td(count)}</tr>" for name, count in errors["by_type"].items()],
            )
        )

    parts.append("<h2 id='health'>Health</h2>")
    if health["spans"]:
        parts.append("<div class='charts'>")
        parts.append(_figure(f"Verdicts ({plural(health['spans'], 'rollout')})", verdict_chart(health)))
        parts.append(_figure("Failed checks, by rollouts hit", checks_chart(health)))
        parts.append("</div>")
        if health["unhealthy"]:
            listed = len(health["unhealthy"])
            parts.append(
                f"<h3>Unhealthy rollouts: {health['unhealthy_total']}"
                + (f" (the first {listed} listed)" if listed < health["unhealthy_total"] else "")
                + "</h3>"
            )
            parts.append(_table(LISTED_HEADER, _listed_rows(health["unhealthy"]), table_id="unhealthy-table"))
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
    parts.append("<div class='charts'>" + _figure("Dispatch durations (dispatches per bin)", duration_chart(time)) + "</div>")
    if time["slowest"]:
        parts.append("<h3>Slowest rollouts</h3>")
        parts.append(
            _table(
                [("task", True), ("rollout id", True), ("duration", False), ("trace", True)],
                [
                    f"<tr>{_td(_e(item['task']), text=True)}{_td(_e(item['rollout_id']), text=True)}"
                    f"{_td(milliseconds(item['duration_ms']), sort=item['duration_ms'])}{_td(_trace(item), text=True)}</tr>"
                    for item in time["slowest"]
                ],
            )
        )
    parts.append(token_section(figures.get("tokens")))
    parts.append(
        "<h2 id='source'>Source</h2><ul>" + "".join(f"<li><code>{_e(path)}</code></li>" for path in source["files"]) + "</ul>"
    )
    parts.append(f"<script>{SCRIPT}</script></main></body></html>")
    return "\n".join(parts)


def _ms(value: float | None) -> str:
    """Milliseconds in three figures or so, without the unit (the column names it)."""
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def times(measures: dict[str, Any]) -> str:
    """A task's p50 and p95 dispatch time, A → B each, in one cell."""
    return " · ".join(f"{_ms(measures[name]['a'])} → {_ms(measures[name]['b'])}" for name in ("p50_ms", "p95_ms"))


def _run_name(letter: str, run: dict[str, Any]) -> str:
    """A run on the comparison page: its service name(s), its path, a link to its own report."""
    from pathlib import Path

    services = ", ".join(run.get("services") or []) or "(no service.name)"
    link = f" · <a href='{_e(Path(run['report']).name)}'>its report</a>" if run.get("report") else ""
    return f"<b>{letter}</b>: {_e(services)} <code>{_e(run['name'])}</code>{link}"


def compare_step_section(steps: Sequence[dict[str, Any]] | None) -> str:
    """Both runs per training step, matched by number: a chart of mean reward, and every step A → B."""
    from gym_instrument.tools.report.compare import STEP_MEASURES, diff_text, value_text

    if not steps:
        return ""
    numbered = [step for step in steps if step["step"] is not None]

    def line(side: str, colour: str) -> Line:
        points = [(step["step"], step["measures"]["mean_reward"][side]) for step in numbered]
        return Line(f"mean reward, {side.upper()}", colour, [(x, y) for x, y in points if y is not None])

    parts = [
        "<h2 id='steps'>Steps</h2>",
        "<p class='note'>Training steps (<code>nemo.gym.train.step</code> of each rollout's dispatch) matched by number;"
        " a step only one run has shows “-” for the other. Mean reward and success over the step's scored rollouts,"
        " infrastructure failures over its rollouts, tokens per rollout over those with tokens.</p>",
        "<div class='charts'>",
        _figure(
            "Mean reward per step, A and B",
            line_chart([line("a", "#9c9c9c"), line("b", "#4e79a7")], "step", "mean reward", lambda value: f"{value:.3g}"),
        ),
        "</div>",
    ]
    rows = []
    for step in steps:
        cells = [
            _td("(no step)" if step["step"] is None else step["step"], sort=step["step"] if step["step"] is not None else "")
        ]
        for name, kind in STEP_MEASURES:
            item = step["measures"][name]
            shown = f"{value_text(item['a'], kind)} → {value_text(item['b'], kind)}"
            if item["diff"] is not None:
                shown += f" <span class='muted'>({diff_text(item['diff'], kind)})</span>"
            cells.append(_td(shown, sort=item["diff"] if item["diff"] is not None else ""))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = [
        ("step", False),
        ("rollouts A → B", False),
        ("mean reward A → B", False),
        ("success A → B", False),
        ("infra failures A → B", False),
        ("tokens / rollout A → B", False),
    ]
    parts.append(_table(header, rows, table_id="compare-steps"))
    return "".join(parts)


def render_compare(comparison: dict[str, Any], title: str = "gym-instrument compare") -> str:
    """The page of :func:`gym_instrument.tools.report.compare.compare`: overall, then every task, worse first."""
    from gym_instrument.tools.report.compare import diff_text, infra_lines, overall_rows, value_text

    overall = comparison["overall"]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body><main>",
        f"<h1>{html.escape(title)}</h1>",
        "<p>" + "<br>".join(_run_name(side.upper(), comparison[side]) for side in ("a", "b")) + "</p>",
    ]
    over = any((comparison[side].get("infra_failures") or {}).get("over_limit") for side in ("a", "b"))
    lines = infra_lines(comparison)
    if lines:
        parts.append(
            f"<section id='infra-failures' class='infra{' over' if over else ''}'>"
            + "".join(f"<p>{_e(line)}</p>" for line in lines)
            + "</section>"
        )
    changes = comparison["changes"]
    parts.append(
        "<div class='cards'>"
        + _card(
            "B against A",
            comparison["overall_change"],
            "worse = lower mean reward, then success, unhealthy, infrastructure failures; new = a score in B, none in A",
        )
        + _card("tasks worse", changes["worse"], f"of {comparison['tasks_compared']} in both runs")
        + _card("tasks the same", changes["same"])
        + _card("tasks better", changes["better"])
        + _card("tasks new", changes["new"], "a score in B, none in A")
        + _card("only in A / only in B", f"{len(comparison['only_in_a'])} / {len(comparison['only_in_b'])}", "tasks")
        + "</div>"
    )
    rows = []
    for label, key, kind in overall_rows(comparison):
        if key not in overall:
            continue
        item = overall[key]
        rows.append(
            f"<tr>{_td(_e(label), text=True)}{_td(value_text(item['a'], kind))}{_td(value_text(item['b'], kind))}"
            f"{_td(diff_text(item['diff'], kind))}</tr>"
        )
    parts.append("<h2 id='overall'>Overall</h2>")
    parts.append(
        "<p class='note'>Mean reward and success are over scored rollouts; pass@k over tasks (each task weighs the same);"
        " the unhealthy, infrastructure-failure, failed-dispatch and masked shares over rollouts.</p>"
    )
    parts.append(
        _table([("", True), ("A", False), ("B", False), ("B − A", False)], rows, table_id="overall-table", sortable=False)
    )
    parts.append("<h2 id='tasks'>Tasks, worse first</h2>")
    parts.append(
        "<p class='note'>Tasks in both runs, matched by task id. A task is new when it has a score in B and had none in A,"
        " worse when it had one and has none, else worse when its mean reward fell (when it did not move: its success rate"
        " fell, else its unhealthy or infrastructure-failure share rose); the same only when none of these moved. pass@k"
        " at the largest k both runs have for the task. Click a column to sort.</p>"
    )
    rows = []
    tokens = any(
        task["measures"].get("tokens_mean", {}).get(side) is not None for task in comparison["tasks"] for side in ("a", "b")
    )
    for task in comparison["tasks"]:
        m = task["measures"]
        k = m.get("pass_at_k")

        def pair(name: str, kind: str, m: dict[str, Any] = m) -> str:
            return f"{value_text(m[name]['a'], kind)} → {value_text(m[name]['b'], kind)}"

        def change(name: str, kind: str, m: dict[str, Any] = m) -> str:
            """A → B and the change in one cell, sorted by the change."""
            value = m[name]["diff"]
            shown = f"{value_text(m[name]['a'], kind)} → {value_text(m[name]['b'], kind)}"
            if value is not None:
                shown += f" <span class='muted'>({diff_text(value, kind)})</span>"
            return _td(shown, sort=value if value is not None else "")

        def diff(name: str, kind: str, m: dict[str, Any] = m) -> str:
            value = m[name]["diff"]
            return _td(diff_text(value, kind), sort=value if value is not None else "")

        cells = [
            _td(_e(task["task"]), text=True, css="name", title=task["task_id"]),
            _td(_e(task["change"]), text=True),
            _td(pair("mean_reward", "number")),
            diff("mean_reward", "number"),
            _td(pair("success_rate", "percent")),
            diff("success_rate", "percent"),
            _td(f"{number(k['a'])} → {number(k['b'])} <span class='muted'>k={k['k']}</span>" if k else "-"),
            _td(diff_text(k["diff"], "number") if k else "-", sort=k["diff"] if k else ""),
            _td(pair("unhealthy_rate", "percent")),
            diff("unhealthy_rate", "percent"),
            _td(pair("infra_rate", "percent")),
            diff("infra_rate", "percent"),
            _td(pair("masked_rate", "percent"), sort=m["masked_rate"]["diff"] if m["masked_rate"]["diff"] is not None else ""),
            _td(times(m), sort=m["p95_ms"]["diff"] if m["p95_ms"]["diff"] is not None else ""),
            *([change("tokens_mean", "tokens")] if tokens else []),
        ]
        css = {"worse": ' class="bad"', "better": ' class="good"'}.get(task["change"], "")
        rows.append(f'<tr data-change="{task["change"]}"{css}>{"".join(cells)}</tr>')
    header = [
        ("task", True),
        ("change", True),
        ("mean reward A → B", False),
        ("Δ", False),
        ("success A → B", False),
        ("Δ", False),
        ("pass@k A → B", False),
        ("Δ", False),
        ("unhealthy A → B", False),
        ("Δ", False),
        ("infra failures A → B", False),
        ("Δ", False),
        ("masked A → B", False),
        ("time p50 · p95, ms A → B", False),
        *([("tokens / rollout A → B (Δ)", False)] if tokens else []),
    ]
    parts.append(_table(header, rows, table_id="compare-tasks", full=True))
    parts.append(compare_step_section(comparison.get("steps")))
    for side, key in (("A", "only_in_a"), ("B", "only_in_b")):
        if comparison[key]:
            shown = comparison[key][:200]
            parts.append(
                f"<h3>Tasks only in {side}: {len(comparison[key])}</h3><p>"
                + ", ".join(_e(name) for name in shown)
                + (" …" if len(comparison[key]) > len(shown) else "")
                + "</p>"
            )
    parts.append(f"<script>{SCRIPT}</script></main></body></html>")
    return "\n".join(parts)
