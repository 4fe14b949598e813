"""``gym-instrument compare RUN_A RUN_B``: is run B better or worse than run A, overall and per task?

Each run is read once by the report's own reader and figures (:func:`gym_instrument.tools.report.build_report`):
OTLP/JSON span files or folders of them, a replayed run included (what ``gym-instrument replay
RUN_DIR --output FILE`` wrote). Tasks are matched by ``nemo.gym.task.id`` (by ``#<task index>``
when a run has no task ids). Per task and overall: mean reward and success rate (over scored
rollouts), pass@1 and pass@k, the unhealthy, infrastructure-failure, failed and masked shares (over
rollouts, as the report counts them), for A, for B, and B − A; the tasks whose reward fell come
first.

A task's change: ``new`` when it has a score in B and had none in A; ``worse`` when it had one and
has none; else the first of mean reward, success rate, unhealthy share, infrastructure-failure share
that moved decides ``worse`` or ``better``; ``same`` only when none moved. The run's change is
decided the same way.

When either run's dispatches name a training step (``nemo.gym.train.step``), its steps are compared
too, matched by number: rollouts, mean reward, success rate, infrastructure-failure share and tokens
per rollout, for A, for B, and B − A (``comparison["steps"]``, absent otherwise).
"""

from __future__ import annotations

from typing import Any

from gym_instrument.tools.report.text import (
    kinds_text,
    milliseconds,
    number,
    percent,
    plural,
    render_table,
    shown_steps,
    steps_head,
)

EPSILON = 1e-9
# What "worse" means, in order: a lower mean reward, then a lower success rate, then more unhealthy, then more
# infrastructure failures.
ORDER = (("mean_reward", 1), ("success_rate", 1), ("unhealthy_rate", -1), ("infra_rate", -1))
CHANGES = ("worse", "new", "same", "better")


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _task_key(task: dict[str, Any]) -> str:
    return str(task["task_id"]) if task.get("task_id") is not None else str(task["task"])


def _largest_common_k(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    common = [k for k in a if k in b]
    return max(common, key=int) if common else None


def _pass_value(item: Any) -> float | None:
    if item is None:
        return None
    return float(item["value"]) if isinstance(item, dict) else float(item)


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def task_measures(task: dict[str, Any], health_pass: bool = True) -> dict[str, Any]:
    """One task's measures; without a health pass in its run, no unhealthy share (not 0 %)."""
    rollouts = task["rollouts"]
    infra = task["infra_failures"]["failures"]
    return {
        "dispatches": task["dispatches"],
        "rollouts": rollouts,
        "scored": task["scored"],
        "successes": task["successes"],
        "mean_reward": task["mean_reward"],
        "success_rate": task["success_rate"],
        "pass_at_1": task["pass_at_k"].get("1"),
        "unhealthy": task["unhealthy"],
        "unhealthy_rate": _share(task["unhealthy"], rollouts) if health_pass else None,
        "infra_failures": infra,
        "infra_rate": _share(infra, rollouts),
        "failed": task["failed"],
        "failed_rate": _share(task["failed"], rollouts),
        "masked_rate": _share(task["masked"], rollouts),
        "p50_ms": task.get("p50_ms"),
        "p95_ms": task.get("p95_ms"),
        "tokens_mean": (task.get("tokens") or {}).get("mean"),
        "tokens_p95": (task.get("tokens") or {}).get("p95"),
    }


def run_measures(figures: dict[str, Any]) -> dict[str, Any]:
    run, health = figures["run"], figures["health"]
    rollouts = run["rollouts"]
    return {
        "tasks": run["tasks"],
        "dispatches": run["dispatches"],
        "rollouts": rollouts,
        "scored": run["scored"],
        "successes": run["successes"],
        "mean_reward": run["mean_reward"],
        "success_rate": run["success_rate"],
        "pass_at_1": _pass_value(run["pass_at_k"].get("1")),
        "unhealthy": run["unhealthy"],
        "unhealthy_rate": _share(run["unhealthy"], rollouts) if health["spans"] else None,
        "succeeded_unhealthy": figures["reward_health"]["succeeded_unhealthy_total"],
        "infra_failures": run["infra_failures"],
        "infra_rate": _share(run["infra_failures"], rollouts),
        "failed": run["failed"],
        "failed_rate": _share(run["failed"], rollouts),
        "masked": run["masked"],
        "masked_rate": _share(run["masked"], rollouts),
        "p50_ms": figures["time"]["p50_ms"],
        "p95_ms": figures["time"]["p95_ms"],
        "tokens_mean": _tokens(figures, "mean"),
        "tokens_p95": _tokens(figures, "p95"),
    }


def _tokens(figures: dict[str, Any], name: str) -> float | None:
    """Tokens per rollout (mean or p95), None when the run's spans carry none."""
    tokens = figures.get("tokens")
    return tokens["per_rollout"][name] if tokens and tokens["rollouts"] else None


def _side(figures: dict[str, Any], name: str) -> dict[str, Any]:
    """A run as the comparison names it: its service name(s) and file(s), and its infrastructure failures."""
    services = figures["source"]["services"]
    return {
        "name": name,
        "services": services,
        "label": f"{', '.join(services) or '(no service.name)'} ({name})",
        "files": figures["source"]["files"],
        "infra_failures": _infra(figures),
        "report": None,
    }


def _side_by_side(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: {"a": a[name], "b": b[name], "diff": _diff(a[name], b[name])} for name in a if name in b}


def _change(measures: dict[str, dict[str, Any]]) -> str:
    """new (a score in B, none in A), worse (a score in A, none in B), else worse, better or same: the first
    of ``ORDER`` that moved decides."""
    reward = measures.get("mean_reward", {})
    if reward.get("a") is None and reward.get("b") is not None:
        return "new"
    if reward.get("a") is not None and reward.get("b") is None:
        return "worse"
    for name, sign in ORDER:
        diff = measures.get(name, {}).get("diff")
        if diff is not None and abs(diff) > EPSILON:
            return "worse" if diff * sign < 0 else "better"
    return "same"


def _sort_key(task: dict[str, Any]) -> tuple[Any, ...]:
    rank = CHANGES.index(task["change"])
    diffs = []
    for name, sign in ORDER:
        diff = task["measures"].get(name, {}).get("diff")
        diffs.append(0.0 if diff is None else diff * sign)
    return (rank, *diffs, task["task"])


# A step's measures, as the report's per-step figures name them, and how each is shown.
STEP_MEASURES = (
    ("rollouts", "count"),
    ("mean_reward", "number"),
    ("success_rate", "percent"),
    ("infra_share", "percent"),
    ("tokens_mean", "tokens"),
)


def _step_order(step: int | None) -> tuple[bool, int]:
    return (step is None, step or 0)


def compare_steps(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Each training step of either run (matched by number; rollouts of no step last), A, B and B − A;
    None when neither run's dispatches name a step."""
    steps_a = {step["step"]: step for step in a.get("steps") or []}
    steps_b = {step["step"]: step for step in b.get("steps") or []}
    if not steps_a and not steps_b:
        return None
    compared = []
    for step_number in sorted(steps_a.keys() | steps_b.keys(), key=_step_order):
        step_a, step_b = steps_a.get(step_number), steps_b.get(step_number)
        measures = {}
        for name, _ in STEP_MEASURES:
            value_a = None if step_a is None else step_a[name]
            value_b = None if step_b is None else step_b[name]
            measures[name] = {"a": value_a, "b": value_b, "diff": _diff(value_a, value_b)}
        compared.append({"step": step_number, "measures": measures})
    return compared


def _infra(figures: dict[str, Any]) -> dict[str, Any]:
    """A run's infrastructure failures, without the per-task counts (those are in the tasks' measures)."""
    return {key: value for key, value in figures["infra_failures"].items() if key != "tasks"}


def compare(a: dict[str, Any], b: dict[str, Any], a_name: str = "A", b_name: str = "B") -> dict[str, Any]:
    """The comparison of two runs' figures (both from :func:`~gym_instrument.tools.report.build_report`)."""
    overall = _side_by_side(run_measures(a), run_measures(b))
    k = _largest_common_k(a["run"]["pass_at_k"], b["run"]["pass_at_k"])
    if k is not None and k != "1":
        overall[f"pass_at_{k}"] = {
            "a": _pass_value(a["run"]["pass_at_k"][k]),
            "b": _pass_value(b["run"]["pass_at_k"][k]),
            "diff": _diff(_pass_value(a["run"]["pass_at_k"][k]), _pass_value(b["run"]["pass_at_k"][k])),
        }
    tasks_a = {_task_key(task): task for task in a["tasks"]}
    tasks_b = {_task_key(task): task for task in b["tasks"]}
    tasks = []
    for key, task_a in tasks_a.items():
        task_b = tasks_b.get(key)
        if task_b is None:
            continue
        measures = _side_by_side(
            task_measures(task_a, bool(a["health"]["spans"])), task_measures(task_b, bool(b["health"]["spans"]))
        )
        task_k = _largest_common_k(task_a["pass_at_k"], task_b["pass_at_k"])
        if task_k is not None:
            pa, pb = task_a["pass_at_k"][task_k], task_b["pass_at_k"][task_k]
            measures["pass_at_k"] = {"a": pa, "b": pb, "diff": pb - pa, "k": int(task_k)}
        tasks.append({"task": task_a["task"], "task_id": task_a["task_id"], "measures": measures, "change": _change(measures)})
    tasks.sort(key=_sort_key)
    only_a = [task["task"] for key, task in tasks_a.items() if key not in tasks_b]
    only_b = [task["task"] for key, task in tasks_b.items() if key not in tasks_a]
    changes = {name: sum(task["change"] == name for task in tasks) for name in CHANGES}
    steps = compare_steps(a, b)
    return {
        **({"steps": steps} if steps is not None else {}),
        "a": _side(a, a_name),
        "b": _side(b, b_name),
        "success_threshold": a["run"]["success_threshold"],
        "overall": overall,
        "overall_change": _change(overall),
        "tasks": tasks,
        "tasks_compared": len(tasks),
        "changes": changes,
        "only_in_a": only_a,
        "only_in_b": only_b,
    }


# -- the terminal -----------------------------------------------------------------------------------

OVERALL_ROWS = [
    ("tasks", "tasks", "count"),
    ("rollouts", "rollouts", "count"),
    ("scored rollouts", "scored", "count"),
    ("succeeded rollouts", "successes", "count"),
    ("mean reward (over scored)", "mean_reward", "number"),
    ("success (of scored)", "success_rate", "percent"),
    ("pass@1 (over tasks)", "pass_at_1", "number"),
    ("unhealthy rollouts", "unhealthy", "count"),
    ("unhealthy share", "unhealthy_rate", "percent"),
    ("succeeded but unhealthy", "succeeded_unhealthy", "count"),
    ("infrastructure failures", "infra_failures", "count"),
    ("infrastructure failure share", "infra_rate", "percent"),
    ("failed dispatch share", "failed_rate", "percent"),
    ("masked share", "masked_rate", "percent"),
    ("dispatch time p50", "p50_ms", "ms"),
    ("dispatch time p95", "p95_ms", "ms"),
    ("tokens per rollout, mean", "tokens_mean", "tokens"),
    ("tokens per rollout, p95", "tokens_p95", "tokens"),
]


def value_text(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "ms":
        return milliseconds(value)
    if kind == "tokens":
        return f"{value:,.0f}"
    if kind == "percent":
        return percent(value)
    if kind == "number":
        return number(value)
    return str(value)


def diff_text(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "ms":
        return ("+" if value >= 0 else "-") + milliseconds(abs(value))
    if kind == "tokens":
        return f"{value:+,.0f}"
    if kind == "percent":
        return f"{value * 100:+.0f} pts"
    if kind == "number":
        return f"{value:+.2f}"
    return f"{value:+d}" if isinstance(value, int) else f"{value:+g}"


def overall_rows(comparison: dict[str, Any]) -> list[tuple[str, str, str]]:
    overall = comparison["overall"]
    rows = [
        row
        for row in OVERALL_ROWS
        if row[2] != "tokens" or any(overall.get(row[1], {}).get(side) is not None for side in ("a", "b"))
    ]
    for name in comparison["overall"]:
        if name.startswith("pass_at_") and name != "pass_at_1":
            rows.insert(7, (f"pass@{name.removeprefix('pass_at_')} (over tasks)", name, "number"))
    return rows


def infra_lines(comparison: dict[str, Any]) -> list[str]:
    """The first lines of a comparison: each run over ``--max-infra-failures``, or one line for both within it."""
    sides = [(side, comparison[side].get("infra_failures")) for side in ("a", "b")]
    over = [(side, infra) for side, infra in sides if infra and infra["over_limit"]]
    lines = [
        f"OVER THE LIMIT: infrastructure failures in {side.upper()}:"
        f" {infra['failures']} of {plural(infra['rollouts'], 'rollout')}"
        f" ({infra['share']:.0%}, over --max-infra-failures {infra['limit']:.0%}): {kinds_text(infra['kinds'])}"
        for side, infra in over
    ]
    if not over and all(infra for _, infra in sides):
        parts = [
            f"{side.upper()} {infra['failures']} of {plural(infra['rollouts'], 'rollout')} ({percent(infra['share'])})"
            for side, infra in sides
            if infra
        ]
        limit = sides[0][1]["limit"] if sides[0][1] else 0.05
        lines.append(f"infrastructure failures: {', '.join(parts)}; within --max-infra-failures {limit:.0%}")
    return lines


TASK_HEADER = [
    "task",
    "change",
    "mean reward",
    "diff",
    "success",
    "pass@k",
    "unhealthy",
    "infra failures",
    "masked",
    "p95 time",
    "tokens",
]


def tokens_change(measures: dict[str, Any]) -> str:
    """A task's mean tokens per rollout, A -> B and the change; ``-`` when neither run has tokens."""
    tokens = measures.get("tokens_mean") or {}
    if tokens.get("a") is None and tokens.get("b") is None:
        return "-"
    change = f" ({diff_text(tokens['diff'], 'tokens')})" if tokens.get("diff") is not None else ""
    return f"{value_text(tokens.get('a'), 'tokens')} -> {value_text(tokens.get('b'), 'tokens')}{change}"


def summary(comparison: dict[str, Any], html_path: str | None = None, task_rows: int = 30) -> str:
    overall = comparison["overall"]
    out = [*infra_lines(comparison)]
    for side in ("a", "b"):
        named = comparison[side]
        out.append(
            f"{side.upper()}: {named.get('label', named['name'])}"
            + (f"; its report: {named['report']}" if named.get("report") else "")
        )
    out.append("")
    out.append(
        render_table(
            ["overall", "A", "B", "B - A"],
            [
                [
                    label,
                    value_text(overall[key]["a"], kind),
                    value_text(overall[key]["b"], kind),
                    diff_text(overall[key]["diff"], kind),
                ]
                for label, key, kind in overall_rows(comparison)
                if key in overall
            ],
        )
    )
    changes = comparison["changes"]
    out += [
        "",
        f"B against A: {comparison['overall_change']} overall; per task: {changes['worse']} worse, {changes['same']} the same,"
        f" {changes['better']} better, {changes['new']} new (of {comparison['tasks_compared']} tasks in both; worse = lower"
        " mean reward, then lower success, then more unhealthy, then more infrastructure failures; new = a score in B,"
        " none in A)",
    ]
    if comparison["only_in_a"] or comparison["only_in_b"]:
        out.append(f"tasks only in A: {len(comparison['only_in_a'])}; only in B: {len(comparison['only_in_b'])}")
    tasks = comparison["tasks"]
    if tasks:
        rows = []
        for task in tasks[:task_rows]:
            m = task["measures"]
            k = m.get("pass_at_k", {})
            rows.append(
                [
                    task["task"],
                    task["change"],
                    f"{number(m['mean_reward']['a'])} -> {number(m['mean_reward']['b'])}",
                    diff_text(m["mean_reward"]["diff"], "number"),
                    f"{percent(m['success_rate']['a'])} -> {percent(m['success_rate']['b'])}",
                    f"{number(k.get('a'))} -> {number(k.get('b'))} (k={k['k']})" if k else "-",
                    f"{percent(m['unhealthy_rate']['a'])} -> {percent(m['unhealthy_rate']['b'])}",
                    f"{percent(m['infra_rate']['a'])} -> {percent(m['infra_rate']['b'])}",
                    f"{percent(m['masked_rate']['a'])} -> {percent(m['masked_rate']['b'])}",
                    f"{milliseconds(m['p95_ms']['a'])} -> {milliseconds(m['p95_ms']['b'])}",
                    tokens_change(m),
                ]
            )
        out += [
            "",
            "tasks, worse first:",
            render_table(TASK_HEADER, rows),
        ]
        if len(tasks) > task_rows:
            out.append(f"... and {len(tasks) - task_rows} more tasks (all of them in the HTML page and in --format json)")
    out += step_comparison_lines(comparison.get("steps"))
    if html_path:
        out += ["", f"comparison: {html_path}"]
    return "\n".join(out)


def step_pair(step: dict[str, Any], name: str, kind: str) -> str:
    """A step's measure A -> B, with the change when both have it."""
    item = step["measures"][name]
    change = f" ({diff_text(item['diff'], kind)})" if item["diff"] is not None else ""
    return f"{value_text(item['a'], kind)} -> {value_text(item['b'], kind)}{change}"


def step_comparison_lines(steps: list[dict[str, Any]] | None) -> list[str]:
    """Per training step, A -> B; nothing when neither run names a step."""
    if not steps:
        return []
    shown = shown_steps(steps)
    head = steps_head("per training step, A -> B (", steps, shown)
    rows = [
        [
            "(no step)" if step["step"] is None else step["step"],
            *(step_pair(step, name, kind) for name, kind in STEP_MEASURES),
        ]
        for step in shown
    ]
    header = ["step", "rollouts", "mean reward", "success", "infra failures", "tokens / rollout"]
    return ["", head, render_table(header, rows)]
