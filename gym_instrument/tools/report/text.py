"""The terminal summary of a run's figures (the same figures ``--format json`` prints)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TASK_ROWS = 30  # tasks shown in the terminal; the HTML page and the JSON have them all
STEP_ROWS = 30  # training steps shown in the terminal, evenly spaced (the first and the last always)
ROLLOUT_ROWS = 10


def number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def milliseconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{value:.1f} ms" if value >= 1 else f"{value:.3f} ms"


def render_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(str(column[0])), *(len(row[index]) for row in cells)) for index, column in enumerate(zip(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()

    return "\n".join([line(list(header)), line(["-" * width for width in widths]), *(line(row) for row in cells)])


def pass_text(pass_at_k: dict[str, Any]) -> str:
    parts = []
    for k, value in pass_at_k.items():
        parts.append(f"pass@{k} {number(value['value'] if isinstance(value, dict) else value)}")
    return "  ".join(parts) or "-"


def task_rows(tasks: Sequence[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for task in tasks:
        pass_at = task["pass_at_k"]
        last_k = next(reversed(pass_at), None)
        rows.append(
            [
                task["task"],
                task["rollouts"],
                task["infra_failures"]["failures"],
                task["scored"],
                task["successes"],
                number(task["mean_reward"]),
                number(task["reward_std"]),
                percent(task["success_rate"]),
                f"{number(pass_at[last_k])} (k={last_k})" if last_k else "-",
                "yes" if task["zero_variance"] else "",
                task["unhealthy"] or "",
                milliseconds(task["mean_duration_ms"]),
            ]
        )
    return rows


TASK_HEADER = [
    "task",
    "rollouts",
    "infra failures",
    "scored",
    "succeeded",
    "mean",
    "std",
    "success",
    "pass@k",
    "all equal",
    "unhealthy",
    "mean time",
]


def span_text(source: dict[str, Any]) -> str:
    """The run's start and end in UTC (first dispatch start, last dispatch end), the end's date only when it differs."""
    import datetime

    start, end = source.get("first_start_unix_nano"), source.get("last_end_unix_nano")
    if not start or not end:
        return "no dispatch with a start and an end"
    first = datetime.datetime.fromtimestamp(start / 1e9, datetime.timezone.utc)
    last = datetime.datetime.fromtimestamp(end / 1e9, datetime.timezone.utc)
    shown = "%H:%M:%S" if last.date() == first.date() else "%Y-%m-%d %H:%M:%S"
    return f"{first:%Y-%m-%d %H:%M:%S} to {last.strftime(shown)} UTC"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 rollout``, ``2 rollouts``: a count and its noun."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def kinds_text(kinds: dict[str, int]) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in kinds.items())


def infra_line(infra: dict[str, Any] | None) -> str | None:
    """The first line of a report: infrastructure failures, apart from honest zeros, against the limit."""
    if not infra or not infra["rollouts"]:
        return None
    limit = f"--max-infra-failures {infra['limit']:.0%}"
    if not infra["failures"]:
        return (
            f"infrastructure failures: none of {plural(infra['rollouts'], 'rollout')} (limit {limit});"
            f" scored zero (reward 0, no failure): {infra['scored_zero']}"
        )
    head = "OVER THE LIMIT: " if infra["over_limit"] else ""
    where = "over" if infra["over_limit"] else "within"
    return (
        f"{head}infrastructure failures: {infra['failures']} of {plural(infra['rollouts'], 'rollout')}"
        f" ({infra['share']:.0%}, {where} {limit}): {kinds_text(infra['kinds'])};"
        f" scored zero (reward 0, no failure): {infra['scored_zero']}"
    )


def rollouts_line(figures: dict[str, Any]) -> str:
    """Every rollout once, by outcome (the parts add up to the rollouts), and how many are unhealthy."""
    run, health = figures["run"], figures["health"]
    threshold = f"{run['success_threshold']:g}"
    parts = [f"{run['successes']} succeeded (reward >= {threshold})", f"{run['scored_zero']} scored zero"]
    below = run["scored_below"] - run["scored_zero"]
    if below:
        parts.append(f"{below} scored below {threshold} (not zero)")
    parts.append(f"{plural(run['infra_failures'], 'infrastructure failure')} ({run['masked']} masked)")
    if run["unscored"]:
        parts.append(f"{run['unscored']} unscored (no numeric reward)")
    if run["unverified"]:
        parts.append(f"{run['unverified']} not verified")
    extra = ""
    if run["dispatches"] != run["rollouts"]:
        replaced = run["replaced_attempts"]
        extra = f"; {plural(run['dispatches'], 'dispatch', 'dispatches')}" + (
            f", {replaced} a failed attempt that a retry replaced" if replaced else ""
        )
    unhealthy = (
        f"{run['unhealthy']} unhealthy (of {run['judged']} with a verdict)" if health["spans"] else "unhealthy: no verdicts read"
    )
    return f"rollouts: {run['rollouts']} ({plural(run['tasks'], 'task')}{extra}) = {' + '.join(parts)}; {unhealthy}"


def wall_and_tokens_line(figures: dict[str, Any]) -> str:
    source, tokens = figures["source"], figures.get("tokens")
    if source.get("wall_ms") is not None:
        wall = f"wall time: {milliseconds(source['wall_ms'])} ({span_text(source)})"
    else:
        wall = "wall time: - (no dispatch with a start and an end)"
    if tokens and tokens["rollouts"]:
        total = tokens["input_tokens"] + tokens["output_tokens"]
        used = (
            f"tokens: {total:,} over {plural(tokens['rollouts'], 'rollout')}"
            f" (mean {count_text(tokens['per_rollout']['mean'])} per rollout)"
        )
    else:
        used = "tokens: none on these spans"
    return f"{wall}; {used}"


def summary(figures: dict[str, Any], html_path: str | None = None) -> str:
    """A few screens at most, whatever the size of the run."""
    source, run, health, time = figures["source"], figures["run"], figures["health"], figures["time"]
    out: list[str] = []
    first = infra_line(figures.get("infra_failures"))
    if first:
        out.append(first)
    out.append(rollouts_line(figures))
    out.append(wall_and_tokens_line(figures))
    out.append(
        f"reward: mean {number(run['mean_reward'])} over {plural(run['scored'], 'scored rollout')},"
        f" std {number(run['reward_std'])}; success {percent(run['success_rate'])} of scored;  {pass_text(run['pass_at_k'])}"
    )
    out.append("  (scored: a numeric reward and no failure; pass@k over tasks, each task weighing the same)")
    replayed = f", {source['replayed_spans']} replayed" if source["replayed_spans"] else ""
    out.append(
        f"spans: {source['spans']} of the package{replayed} from {len(source['files'])} file(s)"
        + (f"; services: {', '.join(source['services'])}" if source["services"] else "")
    )
    if source.get("unreadable_lines"):
        out.append(
            f"{source['unreadable_lines']} lines could not be read (not OTLP/JSON: a program's own output in the"
            " span file? the gym_json_file exporter writes to a file of its own)"
        )
    if source.get("spans_not_kept") or source.get("verifies_not_kept"):
        out.append(
            f"not joined (the report's memory bound): {source.get('spans_not_kept', 0)} spans of rollouts beyond the first"
            f" millions, {source.get('verifies_not_kept', 0)} verifies"
        )
    if run["groups"]:
        flat = ", ".join(f"{item['task']} (all {item['reward']:g})" for item in run["zero_variance_tasks"][:8])
        more = len(run["zero_variance_tasks"]) - 8
        out.append(
            f"groups with all rewards equal (no learning signal): {run['zero_variance_groups']} of {run['groups']}"
            + (f": {flat}" if flat else "")
            + (f" and {more} more" if more > 0 else "")
        )
    if run["rollouts_without_dispatch"]:
        out.append(
            f"rollouts verified whose dispatch was not read: {run['rollouts_without_dispatch']}"
            f" ({run['rollouts_without_dispatch_scored']} scored); in no figure above"
        )
    if health.get("without_rollout"):
        out.append(
            f"verdicts of no rollout above (dispatch not read, or an attempt a retry replaced): {health['without_rollout']}"
        )
    tasks = figures["tasks"]
    failing = [task for task in tasks if (task.get("infra_failures") or {}).get("failures")]
    if failing:
        out += ["", "infrastructure failures per task (not rewards of 0):"]
        out.append(
            render_table(
                ["task", "failures", "of rollouts", "kinds", "scored zero"],
                [
                    [
                        task["task"],
                        task["infra_failures"]["failures"],
                        task["infra_failures"]["rollouts"],
                        kinds_text(task["infra_failures"]["kinds"]),
                        task["infra_failures"]["scored_zero"],
                    ]
                    for task in failing[:TASK_ROWS]
                ],
            )
        )
    if tasks:
        out += ["", render_table(TASK_HEADER, task_rows(tasks[:TASK_ROWS]))]
        if len(tasks) > TASK_ROWS:
            out.append(f"... and {len(tasks) - TASK_ROWS} more tasks (all of them in the HTML page and in --format json)")
    out += step_lines(figures.get("steps"))
    errors = figures["errors"]
    if errors["by_type"]:
        out += ["", "errors by error.type: " + ", ".join(f"{name} {count}" for name, count in errors["by_type"].items())]
    if health["spans"]:
        out += ["", "health: " + ", ".join(f"{name} {count}" for name, count in health["verdicts"].items())]
        if health["checks"]:
            out.append("failed checks: " + ", ".join(f"{item['check']} {item['rollouts']}" for item in health["checks"]))
        if health["unhealthy"]:
            out.append("unhealthy rollouts:")
            out.append(
                render_table(
                    ["task", "rollout id", "reward", "checks", "trace"],
                    [
                        [
                            item["task"] or "-",
                            item["rollout_id"] or "-",
                            reward_text(item),
                            ", ".join(item["checks"]) or "-",
                            link(item),
                        ]
                        for item in health["unhealthy"][:ROLLOUT_ROWS]
                    ],
                )
            )
            if health["unhealthy_total"] > ROLLOUT_ROWS:
                out.append(f"... {health['unhealthy_total'] - ROLLOUT_ROWS} more")
    crossed = figures.get("reward_health")
    if crossed and health["spans"]:
        flagged = crossed["succeeded_unhealthy"]
        out.append(
            f"succeeded but unhealthy (a success the health pass flags: reward hacking or a broken judge?):"
            f" {crossed['succeeded_unhealthy_total']}"
            + (": " + ", ".join(f"{item['rollout_id']} ({item['task']})" for item in flagged[:ROLLOUT_ROWS]) if flagged else "")
            + (" ..." if crossed["succeeded_unhealthy_total"] > ROLLOUT_ROWS else "")
        )
    retries = figures.get("retries")
    if retries and (retries["retried_dispatches"] or retries["chains"]):
        chains = [
            " -> ".join(str(step["rollout_id"]) for step in chain["attempts"])
            + (f" (step {chain['step']})" if "step" in chain else "")
            for chain in retries["chains"][:5]
        ]
        out += [
            "",
            f"retries: {plural(retries['retried_dispatches'], 'dispatch', 'dispatches')};"
            f" {plural(retries['recovered'], 'rollout')} recovered,"
            f" {retries['still_failed']} still failed" + (": " + ", ".join(chains) if chains else ""),
        ]
    agents = (figures.get("groups") or {}).get("agent") or []
    if len(agents) > 1:
        out += ["", "per agent:"]
        out.append(
            render_table(
                ["agent", "tasks", "rollouts", "infra failures", "scored", "mean reward", "success", "unhealthy"],
                [
                    [
                        group["name"],
                        group["tasks"],
                        group["rollouts"],
                        group["infra_failures"],
                        group["scored"],
                        number(group["mean_reward"]),
                        percent(group["success_rate"]),
                        percent(group["unhealthy_rate"]) if health["spans"] else "-",
                    ]
                    for group in agents[:8]
                ],
            )
        )
    if time["measured"] or time["without_duration"]:
        out += [
            "",
            f"dispatch time: p50 {milliseconds(time['p50_ms'])}, p95 {milliseconds(time['p95_ms'])},"
            f" max {milliseconds(time['max_ms'])} over {time['measured']} dispatches"
            + (f"; {time['without_duration']} without a recorded duration" if time["without_duration"] else ""),
        ]
        if time["slowest"]:
            out.append("slowest:")
            out.append(
                render_table(
                    ["task", "rollout id", "time", "trace"],
                    [
                        [item["task"] or "-", item["rollout_id"] or "-", milliseconds(item["duration_ms"]), link(item)]
                        for item in time["slowest"][:5]
                    ],
                )
            )
    out += token_lines(figures.get("tokens"))
    if html_path:
        out += ["", f"report: {html_path}"]
    return "\n".join(out)


def shown_steps(steps: Sequence[dict[str, Any]], rows: int = STEP_ROWS) -> list[dict[str, Any]]:
    """At most ``rows`` of the steps, evenly spaced, the first and the last among them; then the rollouts of no step."""
    numbered = [step for step in steps if step["step"] is not None]
    if len(numbered) > rows:
        numbered = [numbered[index] for index in sorted({round(i * (len(numbered) - 1) / (rows - 1)) for i in range(rows)})]
    return numbered + [step for step in steps if step["step"] is None]


def steps_head(opening: str, steps: Sequence[dict[str, Any]], shown: Sequence[dict[str, Any]]) -> str:
    """A per-step table's head: ``opening``, how many steps, and how many of them are shown."""
    counted = sum(step["step"] is not None for step in steps)
    head = f"{opening}{plural(counted, 'step')}"
    if len(shown) < len(steps):
        return head + f", {len(shown)} evenly spaced shown, all of them in the HTML page and in --format json):"
    return head + "):"


def policy_text(step: dict[str, Any]) -> str:
    """A step's policy version(s): one name, several, or ``-``."""
    versions = ", ".join(step["policy_versions"]) or "-"
    return versions + (f" (+{step['more_policy_versions']})" if step["more_policy_versions"] else "")


def step_rows(steps: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            "(no step)" if step["step"] is None else step["step"],
            policy_text(step),
            step["rollouts"],
            f"{step['infra_failures']} ({percent(step['infra_share'])})",
            step["scored"],
            number(step["mean_reward"]),
            percent(step["success_rate"]),
            count_text(step["tokens_mean"]),
        ]
        for step in steps
    ]


STEP_HEADER = ["step", "policy version", "rollouts", "infra failures", "scored", "mean reward", "success", "tokens / rollout"]


def step_lines(steps: Sequence[dict[str, Any]] | None) -> list[str]:
    """Reward, success, infrastructure failures and tokens per training step; nothing when no dispatch named a step."""
    if not steps:
        return []
    shown = shown_steps(steps)
    head = steps_head("per training step (nemo.gym.train.step of each rollout's dispatch; ", steps, shown)
    return ["", head, render_table(STEP_HEADER, step_rows(shown))]


def token_lines(tokens: dict[str, Any] | None) -> list[str]:
    """Tokens per rollout and per task, against reward, and the slowest model calls; nothing without them."""
    if not tokens or not (tokens["rollouts"] or tokens["model_call_spans"]):
        return []
    per = tokens["per_rollout"]
    out = [
        "",
        f"tokens: {tokens['input_tokens'] + tokens['output_tokens']:,} (input {tokens['input_tokens']:,}, output"
        f" {tokens['output_tokens']:,}) in {plural(tokens['model_calls'], 'model call')} over"
        f" {plural(tokens['rollouts'], 'rollout')}; per rollout mean {count_text(per['mean'])}, p95 {count_text(per['p95'])}"
        f" ({tokens['from_dispatch_totals']} from the dispatch's totals, {tokens['from_model_call_spans']} summed from"
        " model-call spans)",
    ]
    if tokens["by_reward"]:
        out.append(
            "tokens against reward: "
            + "; ".join(
                f"reward {item['reward']}: mean {count_text(item['mean'])}, p95 {count_text(item['p95'])}"
                f" ({plural(item['rollouts'], 'rollout')})"
                for item in tokens["by_reward"]
            )
        )
    if tokens["tasks"]:
        out.append("tokens per task:")
        out.append(
            render_table(
                ["task", "rollouts", "mean", "p95", "max"],
                [
                    [task, item["rollouts"], count_text(item["mean"]), count_text(item["p95"]), count_text(item["max"])]
                    for task, item in list(tokens["tasks"].items())[:TASK_ROWS]
                ],
            )
        )
    if tokens["model_call_errors"]:
        out.append("failed model calls: " + kinds_text(tokens["model_call_errors"]))
    if tokens["slowest_model_calls"]:
        out.append("slowest model calls:")
        out.append(
            render_table(
                ["call", "rollout id", "time", "input", "output", "trace"],
                [
                    [
                        item["name"],
                        item["rollout_id"] or "-",
                        milliseconds(item["duration_ms"]),
                        count_text(item["input_tokens"]),
                        count_text(item["output_tokens"]),
                        link(item),
                    ]
                    for item in tokens["slowest_model_calls"][:5]
                ],
            )
        )
    return out


def count_text(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


OUTCOME_TEXT = {"no verify": "-", "failed dispatch": "failed"}


def reward_text(rollout: dict[str, Any]) -> str:
    """A listed rollout's reward: a number, else its outcome (``masked``, ``failure: KIND``, ``unscored``,
    ``failed``, ``-`` when no verify was read)."""
    reward = rollout.get("reward")
    if isinstance(reward, (int, float)):
        return f"{reward:g}"
    outcome = rollout.get("outcome")
    if outcome == "failure kind":
        return f"failure: {rollout.get('failure_kind')}"
    return "-" if outcome is None else OUTCOME_TEXT.get(outcome, str(outcome))


def link(rollout: dict[str, Any]) -> str:
    return str(rollout.get("trace_url") or rollout["trace_id"])
