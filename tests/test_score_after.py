"""Loops that score after the rollout: generate every rollout first, then score them (TRL, verl,
most GRPO loops), by configuration alone. A verify that names its rollout finds its ended dispatch
the way a health verdict does, and becomes its child."""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from gym_instrument import semconv
from gym_instrument.tools.report.figures import RunFigures
from tests.test_any_loop import report_span

REPO = Path(__file__).resolve().parents[1]

LOOP = """
TASKS = [{"task_id": "add", "answer": "4"}, {"task_id": "mul", "answer": "6"}]


def generate(task, repeat):
    # A scripted model: right on even repeats, wrong on odd ones.
    return {"task_id": task["task_id"], "repeat": repeat, "completion": task["answer"] if repeat % 2 == 0 else "0"}


def score(completion, task_id, repeat):
    answer = {t["task_id"]: t["answer"] for t in TASKS}[task_id]
    return 1.0 if completion == answer else 0.0


def main(repeats=3):
    rollouts = [generate(task, repeat) for task in TASKS for repeat in range(repeats)]
    return [(r["task_id"], r["repeat"], score(r["completion"], r["task_id"], r["repeat"])) for r in rollouts]
"""


def config(module: str, verify_start: dict[str, Any], health: bool = False) -> dict[str, Any]:
    targets: list[dict[str, Any]] = [
        {
            "path": f"{module}:generate",
            "role": "dispatch",
            "row": "task",
            "start": {"task_id": "row.task_id", "repeat": "arg.repeat", "rollout_id": {"template": "{task_id}-r{repeat}"}},
        },
        {"path": f"{module}:score", "role": "verify", "reward_rule": "sum", "start": verify_start},
    ]
    if health:
        targets.append({"path": f"{module}:judge", "role": "health", "verdicts": {"rollout_id": "item.id", "verdict": "item.ok"}})
    return {"targets": targets}


BY_TEMPLATE = {"task_id": "arg.task_id", "repeat": "arg.repeat", "rollout_id": {"template": "{task_id}-r{repeat}"}}
BY_TASK = {"task_id": "arg.task_id", "repeat": "arg.repeat"}  # the dispatch's declared identity names it: no template again


@pytest.fixture
def loop(make_module: Any) -> str:
    return make_module(LOOP)


def check_children(telemetry: Any, scored: list[tuple[str, int, float]]) -> None:
    """Each verify is a child of its own rollout's ended dispatch, with the loop's reward, counted once."""
    dispatches = {span.attributes[semconv.ROLLOUT_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == len(scored)
    for (task_id, repeat, reward), verify in zip(scored, verifies, strict=True):
        rollout_id = f"{task_id}-r{repeat}"
        dispatch = dispatches[rollout_id]
        assert verify.context.trace_id == dispatch.context.trace_id
        assert verify.parent is not None and verify.parent.span_id == dispatch.context.span_id
        assert verify.start_time >= dispatch.end_time  # scored after its dispatch had ended
        assert verify.attributes[semconv.ROLLOUT_ID] == rollout_id
        assert verify.attributes[semconv.ROLLOUT_REWARD] == reward
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == len(dispatches)
    figures = RunFigures().add_all(map(report_span, [*verifies, *dispatches.values()])).figures()
    rewards: dict[str, list[float]] = {}
    for task_id, _, reward in scored:
        rewards.setdefault(task_id, []).append(reward)
    assert {task["task"]: task["mean_reward"] for task in figures["tasks"]} == {
        task_id: sum(values) / len(values) for task_id, values in rewards.items()
    }
    assert figures["run"]["rollouts_without_dispatch"] == 0


@pytest.mark.parametrize("verify_start", [BY_TEMPLATE, BY_TASK], ids=["by-rollout-id", "by-task-and-repeat"])
def test_a_verify_after_its_dispatch_ended_is_its_child_with_no_health_target(
    loop: str, instrument: Any, telemetry: Any, verify_start: dict[str, Any]
) -> None:
    # No health target: the verify that names its rollout is what keeps the dispatches remembered.
    instrument(config=config(loop, verify_start))
    scored = importlib.import_module(loop).main()
    check_children(telemetry, scored)


def test_a_verify_after_its_dispatch_keeps_what_else_its_context_holds(loop: str, instrument: Any, telemetry: Any) -> None:
    """Its parent is the ended dispatch; everything else in the caller's context (the trainer's
    baggage) is in the parent context a span processor or a sampler is given, and an empty one
    stays empty (as a baggage span processor would read it)."""
    from opentelemetry import baggage, context
    from opentelemetry.sdk.trace import SpanProcessor

    class BaggageSeen(SpanProcessor):
        def __init__(self) -> None:
            self.seen: list[tuple[str, dict[str, object]]] = []

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            self.seen.append((span.name, dict(baggage.get_all(parent_context))))

    seen = BaggageSeen()
    telemetry.tracer_provider.add_span_processor(seen)
    instrument(config=config(loop, BY_TEMPLATE))
    module = importlib.import_module(loop)
    rollouts = [module.generate(task, 0) for task in module.TASKS]
    token = context.attach(baggage.set_baggage("trainer.step", "7"))
    try:
        module.score(rollouts[0]["completion"], rollouts[0]["task_id"], 0)
    finally:
        context.detach(token)
    module.score(rollouts[1]["completion"], rollouts[1]["task_id"], 0)
    assert [baggage_seen for name, baggage_seen in seen.seen if name == semconv.SPAN_VERIFY] == [{"trainer.step": "7"}, {}]
    dispatches = {span.context.span_id: span.attributes[semconv.ROLLOUT_ID] for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    assert [dispatches[span.parent.span_id] for span in telemetry.spans(semconv.SPAN_VERIFY)] == ["add-r0", "mul-r0"]


@pytest.mark.parametrize("verify_start", [BY_TEMPLATE, BY_TASK], ids=["by-rollout-id", "by-task-and-repeat"])
def test_several_verifies_of_one_rollout_each_find_it_and_its_health_verdict_still_does(
    loop: str, make_module: Any, instrument: Any, telemetry: Any, verify_start: dict[str, Any]
) -> None:
    judge = make_module("def judge(rollout_ids):\n    return [{'id': rollout_id, 'ok': True} for rollout_id in rollout_ids]\n")
    settings = config(loop, verify_start)
    settings["targets"].append(
        {"path": f"{judge}:judge", "role": "health", "verdicts": {"rollout_id": "item.id", "verdict": "item.ok"}}
    )
    instrument(config=settings)
    module = importlib.import_module(loop)
    rollouts = [module.generate(task, 0) for task in module.TASKS]
    for _ in range(2):  # scored twice (two steps, two reward functions): found both times
        for rollout in rollouts:
            module.score(rollout["completion"], rollout["task_id"], 0)
    importlib.import_module(judge).judge(["add-r0", "mul-r0"])
    dispatches = {span.context.span_id: span.attributes[semconv.ROLLOUT_ID] for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert [dispatches[span.parent.span_id] for span in verifies] == ["add-r0", "mul-r0", "add-r0", "mul-r0"]
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 2  # rollouts, not verifies
    health = telemetry.spans(semconv.SPAN_HEALTH)
    assert sorted(dispatches[span.parent.span_id] for span in health) == ["add-r0", "mul-r0"]


def test_a_verify_inside_its_dispatch_keeps_its_parent(make_module: Any, instrument: Any, telemetry: Any) -> None:
    """Scoring inside the rollout (the context names it) is the usual verify: its parent is the span it runs in."""
    module = make_module(
        "def generate(task, repeat):\n    return {'completion': step(task['task_id'], repeat)}\n"
        "def step(task_id, repeat):\n    return score('4', task_id, repeat)\n"
        "def score(completion, task_id, repeat):\n    return 1.0\n"
    )
    settings = config(module, BY_TEMPLATE)
    instrument(config=settings)
    importlib.import_module(module).generate({"task_id": "add"}, 0)
    (dispatch,) = telemetry.spans(semconv.SPAN_DISPATCH)
    (verify,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert verify.parent is not None and verify.parent.span_id == dispatch.context.span_id
    assert verify.attributes[semconv.ROLLOUT_ID] == "add-r0"


def test_a_verify_whose_rollout_is_found_nowhere_is_reported_once_with_the_id(
    loop: str, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    instrument(config=config(loop, BY_TEMPLATE))
    module = importlib.import_module(loop)
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        module.score("4", "add", 7)  # never generated
        module.score("4", "add", 8)
    messages = [record.getMessage() for record in caplog.records if "found no dispatch" in record.getMessage()]
    assert len(messages) == 1
    assert f"target {loop}:score" in messages[0] and "rollout id 'add-r7'" in messages[0]
    first, second = telemetry.spans(semconv.SPAN_VERIFY)
    assert first.parent is None and first.attributes[semconv.ROLLOUT_ID] == "add-r7"  # a span of its own, still named
    assert second.attributes[semconv.ROLLOUT_REWARD] == 1.0


@pytest.mark.parametrize("by_task", [False, True], ids=["by-rollout-id", "by-task-and-repeat"])
def test_a_verify_in_another_process_finds_its_dispatch_in_the_persisted_links(tmp_path: Path, by_task: bool) -> None:
    """Generate in one process, score in another, one configuration for both: each verify is a
    child of its dispatch, found in the links the first process persisted in the folder both name."""
    env = {"OTEL_PYTHON_GYM_LINK_DIR": str(tmp_path / "links")}
    rollouts, generated = run_process("generate", {"repeats": 2, "by_task": by_task}, env)
    rewards, scored = run_process("score", {"rollouts": rollouts, "by_task": by_task}, env)
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    dispatches = {span["attributes"][semconv.ROLLOUT_ID]: span for span in generated if span["name"] == semconv.SPAN_DISPATCH}
    verifies = [span for span in scored if span["name"] == semconv.SPAN_VERIFY]
    assert len(dispatches) == len(verifies) == 4
    for rollout, reward, verify in zip(rollouts, rewards, verifies, strict=True):
        dispatch = dispatches[f"{rollout['task_id']}-r{rollout['repeat']}"]
        assert (verify["trace_id"], verify["parent"]) == (dispatch["trace_id"], dispatch["span_id"])
        assert verify["attributes"][semconv.ROLLOUT_REWARD] == reward


def run_process(action: str, given: dict[str, Any], env: dict[str, str]) -> tuple[Any, list[dict[str, Any]]]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_PYTHON_GYM_")}
    environ.update(PYTHONPATH=str(REPO), **env)
    argv = [sys.executable, "-m", "tests.crossprocess.score_after_main", action, json.dumps(given)]
    done = subprocess.run(argv, cwd=REPO, env=environ, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return lines[0]["result"], lines[1:]


# -- a batch verify: one call scores many rollouts (TRL's reward functions) ----------------------------

REWARDS = """
ANSWERS = {"add": "4", "mul": "6"}


def accuracy_reward(prompts, completions, task_id, **kwargs):
    return [1.0 if completion == ANSWERS[task] else 0.0 for completion, task in zip(completions, task_id)]


def format_reward(prompts, completions, **kwargs):
    return [0.5 if completion.isdigit() and completion != "0" else 0.0 for completion in completions]
"""

BATCH = {"task_id": "arg.task_id[i]", "repeat": "arg.repeat[i]"}


def batch_config(loop: str, rewards: str, batch: dict[str, Any]) -> dict[str, Any]:
    settings = config(loop, BY_TEMPLATE)
    settings["targets"][1:] = [
        {"path": f"{rewards}:{name}", "role": "verify", "reward_rule": "sum", "batch": batch}
        for name in ("accuracy_reward", "format_reward")
    ]
    return settings


def score_batch(loop: str, rewards: str) -> dict[str, list[float]]:
    """The user's loop: every rollout generated first, then each reward function over the whole batch."""
    module, functions = importlib.import_module(loop), importlib.import_module(rewards)
    rollouts = [module.generate(task, repeat) for task in module.TASKS for repeat in range(3)]
    columns = {"task_id": [r["task_id"] for r in rollouts], "repeat": [r["repeat"] for r in rollouts]}
    prompts, completions = [f"{r['task_id']}?" for r in rollouts], [r["completion"] for r in rollouts]
    return {f.__name__: f(prompts, completions, **columns) for f in (functions.accuracy_reward, functions.format_reward)}


@pytest.mark.parametrize(
    "batch",
    [BATCH, {**BATCH, "rollout_id": {"template": "{task_id}-r{repeat}"}, "reward": "item"}],
    ids=["by-task-and-repeat", "by-rollout-id"],
)
def test_a_batch_reward_function_gives_each_rollout_its_verify_under_its_dispatch(
    loop: str, make_module: Any, instrument: Any, telemetry: Any, batch: dict[str, Any]
) -> None:
    rewards = make_module(REWARDS)
    instrument(config=batch_config(loop, rewards, batch))
    scored = score_batch(loop, rewards)
    dispatches = {span.context.span_id: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == 2 * len(dispatches) == 12  # one per rollout per reward function
    order = [f"{task}-r{repeat}" for task in ("add", "mul") for repeat in range(3)]
    for function, values in scored.items():
        own = [span for span in verifies if span.attributes[semconv.VERIFY_FUNCTION] == function]
        assert [span.attributes[semconv.ROLLOUT_ID] for span in own] == order
        assert [span.attributes[semconv.ROLLOUT_REWARD] for span in own] == values
        for span in own:
            dispatch = dispatches[span.parent.span_id]
            assert span.context.trace_id == dispatch.context.trace_id
            assert dispatch.attributes[semconv.ROLLOUT_ID] == span.attributes[semconv.ROLLOUT_ID]
            assert span.start_time >= dispatch.end_time and span.attributes[semconv.REWARD_RULE] == "sum"
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 6  # rollouts, once each
    # The report's per-task reward is the loop's own: the sum of the functions' rewards, averaged per task.
    figures = RunFigures().add_all(map(report_span, [*verifies, *dispatches.values()])).figures()
    totals = [a + b for a, b in zip(scored["accuracy_reward"], scored["format_reward"], strict=True)]
    assert {task["task"]: task["mean_reward"] for task in figures["tasks"]} == {
        "add": sum(totals[:3]) / 3,
        "mul": sum(totals[3:]) / 3,
    }
    assert figures["run"]["rollouts_without_dispatch"] == 0


def test_a_batch_reward_function_that_raises_fails_the_verify_of_each_rollout_its_arguments_name(
    loop: str, make_module: Any, instrument: Any, telemetry: Any
) -> None:
    rewards = make_module(REWARDS + "\n\ndef judge_reward(prompts, completions, **kwargs):\n    raise TimeoutError('judge')\n")
    settings = batch_config(loop, rewards, BATCH)
    settings["targets"][2]["path"] = f"{rewards}:judge_reward"
    instrument(config=settings)
    module, functions = importlib.import_module(loop), importlib.import_module(rewards)
    rollouts = [module.generate(task, 0) for task in module.TASKS]
    with pytest.raises(TimeoutError, match="judge"):  # the same exception, to the caller
        functions.judge_reward(["?", "?"], ["4", "6"], task_id=["add", "mul"], repeat=[0, 0])
    dispatches = {span.context.span_id: span.attributes[semconv.ROLLOUT_ID] for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert [dispatches[span.parent.span_id] for span in verifies] == [f"{r['task_id']}-r0" for r in rollouts]
    for span in verifies:
        assert span.status.status_code is StatusCode.ERROR and span.attributes[semconv.ERROR_TYPE] == "TimeoutError"
        assert semconv.ROLLOUT_REWARD not in span.attributes and span.attributes[semconv.VERIFY_FUNCTION] == "judge_reward"
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 0


def test_a_batch_whose_items_find_no_list_or_no_dispatch_is_reported_once(
    loop: str, make_module: Any, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rewards = make_module(REWARDS)
    settings = batch_config(loop, rewards, BATCH)
    settings["targets"][2]["batch"] = {**BATCH, "items": "result.scores"}
    instrument(config=settings)
    functions = importlib.import_module(rewards)
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        for _ in range(2):
            functions.accuracy_reward(["?"], ["4"], task_id=["add"], repeat=[9])  # never generated
            functions.format_reward(["?"], ["4"], task_id=["add"], repeat=[9])
    messages = [record.getMessage() for record in caplog.records]
    assert [m for m in messages if "found no dispatch" in m] == [
        f"gym_instrument: target {rewards}:accuracy_reward: a batch item found no dispatch of repeat 9, task id 'add' (none"
        " traced in this process, none in the persisted links it can read); its verify span is a root span of its own."
        " Reported once per target"
    ]
    assert [m for m in messages if "not a list" in m] == [
        f"gym_instrument: target '{rewards}:format_reward': batch: 'result.scores' is absent, not a list of scores;"
        " no verify span is made"
    ]
    assert [span.parent for span in telemetry.spans(semconv.SPAN_VERIFY)] == [None, None]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"role": "verify", "batch": {"reward": "item"}}, "batch: needs rollout_id, or task_index or task_id and repeat"),
        ({"role": "dispatch", "batch": BATCH}, "batch: applies to a verify target"),
        ({"role": "verify", "end": {"reward": "arg.scores[i]"}}, r"\[i\] is the position of a batch's item, only in batch"),
        ({"role": "verify", "batch": {**BATCH, "items": "arg.x"}}, "items: path 'arg.x': the items are a list in the result"),
        ({"role": "verify", "batch": {**BATCH, "score": "item"}}, "batch: unknown key 'score'"),
    ],
)
def test_a_batch_that_cannot_work_is_refused(entry: dict[str, Any], problem: str) -> None:
    from gym_instrument.config.declare import target_from_mapping

    with pytest.raises(ValueError, match=problem):
        target_from_mapping({"path": "my_loop:reward", **entry})


CAPTURED = (
    REWARDS
    + """
REWARD_FUNCS = [accuracy_reward, format_reward]  # taken when the module runs: before it is wrapped
BY_NAME = {"format": format_reward}
"""
)


def test_a_reward_function_held_by_its_module_before_it_was_wrapped_is_reported(
    make_module: Any, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    from gym_instrument.tools.cli import main as cli

    rewards = make_module(CAPTURED)
    targets = [{"path": f"{rewards}:{name}", "role": "verify", "batch": BATCH} for name in ("accuracy_reward", "format_reward")]
    instrument(config={"targets": targets})
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        functions = importlib.import_module(rewards)  # wrapped when its import ends: REWARD_FUNCS holds the originals
        for function in functions.REWARD_FUNCS:
            function(["?"], ["4"], task_id=["add"], repeat=[0])
    assert telemetry.spans(semconv.SPAN_VERIFY) == []  # calls through the copies are not traced (what the message says)
    messages = [record.getMessage() for record in caplog.records if "taken before it was wrapped" in record.getMessage()]
    assert [message.split("; calls through")[0] for message in messages] == [
        f"gym_instrument: target {rewards}:accuracy_reward=verify: module {rewards!r} holds it in REWARD_FUNCS[0],"
        " taken before it was wrapped",
        f"gym_instrument: target {rewards}:format_reward=verify: module {rewards!r} holds it in REWARD_FUNCS[1],"
        " BY_NAME['format'], taken before it was wrapped",
    ]
    assert all("Build such a list where the function is imported" in message for message in messages)
    # config check says so before a run (exit 2), never "no problems".
    functions.accuracy_reward(["?"], ["4"], task_id=["add"], repeat=[0])  # (the wrapped one, through its module, is traced)
    assert len(telemetry.spans(semconv.SPAN_VERIFY)) == 1
    instrument_off(rewards)
    assert cli(["config", "check", json.dumps({"targets": targets})]) == 2
    out = capsys.readouterr().out
    assert f"problem: target {rewards}:format_reward: module {rewards!r} holds it in REWARD_FUNCS[1], BY_NAME['format']" in out
    assert "no problems" not in out


def instrument_off(module: str) -> None:
    """Uninstrumented, and the module forgotten: config check imports it afresh, as a run would."""
    from gym_instrument import GymInstrumentor

    GymInstrumentor().uninstrument()
    sys.modules.pop(module, None)


def test_the_docs_examples_of_scoring_after_the_rollout_parse_into_what_they_say() -> None:
    from gym_instrument.config.declare import parse_config
    from gym_instrument.role import ROLES
    from gym_instrument.role.verify import BatchVerifyRole, VerifyAfterRole

    page = (REPO / "docs" / "your-own-framework.md").read_text()
    section = page.split("### Scoring after the rollout", 1)[1].split("### Letters", 1)[0]
    blocks = [block.split("```", 1)[0] for block in section.split("```toml\n")[1:]]
    _, score = parse_config(blocks[0])
    assert isinstance(ROLES["verify"].for_target(score.schema, score.extractors), VerifyAfterRole)
    accuracy, fmt = parse_config(blocks[1])
    for target in (accuracy, fmt):
        assert isinstance(ROLES["verify"].for_target(target.schema, target.extractors), BatchVerifyRole)
        assert [(name, rule.paths[0].text) for name, rule in target.schema.batch.names] == [
            (semconv.TASK_ID, "arg.task_id[i]"),
            (semconv.ROLLOUT_REPEAT, "arg.repeat[i]"),
        ]
