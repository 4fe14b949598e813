"""Any rollout loop by configuration alone: a loop nobody wrote rules for, shaped like a
Gymnasium-style environment library driven by a user's own loop (several env classes overriding
one base ``step``, a reward on every step, the user's own verdict records, one raising episode)."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from gym_instrument import Target, semconv
from gym_instrument.config.declare import target_from_mapping
from gym_instrument.schema import GENERIC
from gym_instrument.tools.report.figures import RunFigures
from gym_instrument.tools.report.otlp import Span

LOOP = """
class Env:
    def init(self, prompt):
        self.steps = 0
        return {"observations": prompt}

    def step(self, action):
        raise NotImplementedError


class Walk(Env):
    def step(self, action):
        self.steps += 1
        return {"observations": self.steps, "reward": 0.25 * action, "done": self.steps >= 3, "metadata": {}}


class Broken(Env):
    def step(self, action):
        raise RuntimeError("the environment fell over")


ENVS = {"walk": Walk, "broken": Broken}
TASKS = [{"task_id": "walk-a", "env": "walk"}, {"task_id": "walk-b", "env": "walk"}, {"task_id": "boom", "env": "broken"}]


def run_episode(task, repeat):
    env = ENVS[task["env"]]()
    env.init(task["task_id"])
    total, step = 0.0, None
    while step is None or not step["done"]:
        step = env.step(repeat + 1)
        total += step["reward"]
    return {"task_id": task["task_id"], "repeat": repeat, "reward": total}


def judge_episodes(results):
    return [
        {
            "task_id": result["task_id"],
            "repeat": result["repeat"],
            "verdict": "ok" if "reward" in result else "bad",
            "problems": ["raised", "no_reward"] if "reward" not in result else [],
        }
        for result in results
    ]


def main():
    results = []
    for index, task in enumerate(TASKS):
        for repeat in range(2):
            try:
                results.append(run_episode(task, repeat))
            except RuntimeError:
                results.append({"task_id": task["task_id"], "repeat": repeat})
    return results, judge_episodes(results)
"""


def config(module: str, **dispatch: Any) -> dict[str, Any]:
    return {
        "targets": [
            {
                "path": f"{module}:run_episode",
                "role": "dispatch",
                "row": "task",
                "schema": "generic",
                "start": {
                    semconv.TASK_ID: "row.task_id",
                    semconv.ROLLOUT_REPEAT: "arg.repeat",
                    semconv.ROLLOUT_ID: {"template": "{task_id}-{repeat}"},
                },
                **dispatch,
            },
            {
                "path": f"{module}:Env.step",
                "role": "verify",
                "schema": "generic",
                "reward_rule": "sum",
                "end": {semconv.ROLLOUT_REWARD: "result.reward"},
            },
            {
                "path": f"{module}:judge_episodes",
                "role": "health",
                "verdicts": {
                    "items": "result",
                    "task_id": "item.task_id",
                    "repeat": "item.repeat",
                    "rollout_id": {"template": "{task_id}-{repeat}"},
                    "verdict": {"path": "item.verdict", "map": {"ok": "healthy", "bad": "unhealthy"}},
                    "checks": "item.problems",
                },
            },
        ]
    }


@pytest.fixture
def loop(make_module: Any) -> str:
    return make_module(LOOP)


def test_identity_verdicts_and_failed_episodes_by_configuration_alone(loop: str, instrument: Any, telemetry: Any) -> None:
    instrument(config=config(loop))
    results, _ = importlib.import_module(loop).main()
    dispatches = telemetry.spans(semconv.SPAN_DISPATCH)
    names = [(span.attributes[semconv.TASK_ID], span.attributes[semconv.ROLLOUT_REPEAT]) for span in dispatches]
    assert names == [(task, repeat) for task in ("walk-a", "walk-b", "boom") for repeat in (0, 1)]
    # The rollout id is composed from two declared values, on the dispatch and through baggage on each step's verify.
    ids = {span.context.span_id: span.attributes[semconv.ROLLOUT_ID] for span in dispatches}
    assert sorted(ids.values()) == sorted(f"{task}-{repeat}" for task, repeat in names)
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == 4 * 3 + 2  # three steps of each walk, one raising step of each broken episode
    for verify in verifies:
        assert verify.parent is not None and verify.attributes[semconv.ROLLOUT_ID] == ids[verify.parent.span_id]
        assert verify.attributes[semconv.REWARD_RULE] == "sum"
    steps = [
        span.attributes.get(semconv.ROLLOUT_REWARD) for span in verifies if span.attributes[semconv.ROLLOUT_ID] == "walk-a-1"
    ]
    assert steps == [0.5, 0.5, 0.5]
    # One health span per judged rollout, under its dispatch, the raising episodes included.
    health = telemetry.spans(semconv.SPAN_HEALTH)
    by_id = {span.attributes[semconv.ROLLOUT_ID]: span for span in health}
    assert sorted(by_id) == sorted(ids.values())
    for span in health:
        assert span.parent is not None and ids[span.parent.span_id] == span.attributes[semconv.ROLLOUT_ID]
    assert by_id["walk-a-0"].attributes[semconv.HEALTH_VERDICT] == "healthy"
    assert list(by_id["walk-a-0"].attributes[semconv.HEALTH_CHECKS]) == []
    assert by_id["boom-1"].attributes[semconv.HEALTH_VERDICT] == "unhealthy"
    assert list(by_id["boom-1"].attributes[semconv.HEALTH_CHECKS]) == ["no_reward", "raised"]
    failed = [span for span in dispatches if span.status.status_code is StatusCode.ERROR]
    assert sorted(span.attributes[semconv.ROLLOUT_ID] for span in failed) == ["boom-0", "boom-1"]
    # The report's per-rollout reward is the loop's own, by the declared rule; no verify is an orphan.
    figures = RunFigures().add_all(map(report_span, [*verifies, *dispatches, *health])).figures()
    rewards = {task["task"]: task["mean_reward"] for task in figures["tasks"]}
    expected = {result["task_id"]: [] for result in results if "reward" in result}
    for result in results:
        if "reward" in result:
            expected[result["task_id"]].append(result["reward"])
    assert rewards["walk-a"] == sum(expected["walk-a"]) / 2 == 1.125
    assert figures["run"]["scored"] == 4  # rollouts, not verify spans; the failed ones are not scored
    assert figures["run"]["rollouts_without_dispatch"] == 0


def report_span(span: Any) -> Span:
    """A finished SDK span as the report reads it from a span file."""
    parent = f"{span.parent.span_id:016x}" if span.parent is not None else None
    status = 2 if span.status.status_code is StatusCode.ERROR else 0
    return Span(
        span.name,
        f"{span.context.trace_id:032x}",
        f"{span.context.span_id:016x}",
        parent,
        span.start_time,
        span.end_time,
        status,
        {key: list(value) if isinstance(value, tuple) else value for key, value in span.attributes.items()},
        {},
    )


def test_declared_indices_name_the_rollout_by_the_index_form(loop: str, instrument: Any, telemetry: Any) -> None:
    start = {semconv.TASK_ID: "row.task_id", semconv.TASK_INDEX: "arg.repeat", semconv.ROLLOUT_REPEAT: "arg.repeat"}
    instrument(config=config(loop, start=start))
    importlib.import_module(loop).run_episode({"task_id": "walk-a", "env": "walk"}, 1)
    (dispatch,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert dispatch.attributes[semconv.ROLLOUT_ID] == "1-1"
    assert {span.attributes[semconv.ROLLOUT_ID] for span in telemetry.spans(semconv.SPAN_VERIFY)} == {"1-1"}


def test_a_result_that_yields_no_verdict_is_reported_once(
    loop: str, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = config(loop)
    settings["targets"][2]["verdicts"]["items"] = "result.rollouts"
    instrument(config=settings)
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        importlib.import_module(loop).main()
        importlib.import_module(loop).main()
    messages = [record.getMessage() for record in caplog.records if "verdicts" in record.getMessage()]
    assert len(messages) == 1
    assert f"{loop}:judge_episodes" in messages[0] and "'result.rollouts' is absent" in messages[0]
    assert telemetry.spans(semconv.SPAN_HEALTH) == []


@pytest.mark.parametrize(
    ("verdicts", "problem"),
    [
        ({"verdict": "item.ok"}, "needs rollout_id, or task_index or task_id and repeat"),
        ({"rollout_id": "item.id"}, "needs verdict"),
        ({"rollout_id": "row.id", "verdict": "item.ok"}, "a verdict record's fields start with item"),
        ({"rollout_id": {"template": "{task_id}"}, "verdict": "item.ok", "items": "item.x"}, "items"),
        ({"rollout_id": {"template": "{task_id}-{repeat}"}, "task_id": "item.t", "verdict": "item.ok"}, "names {repeat}"),
    ],
)
def test_a_verdict_mapping_that_cannot_work_is_refused(verdicts: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        target_from_mapping({"path": "my_loop:judge", "role": "health", "verdicts": verdicts})
    with pytest.raises(ValueError, match="applies to a health target"):
        target_from_mapping(
            {"path": "my_loop:run", "role": "dispatch", "verdicts": {"rollout_id": "item.id", "verdict": "item.ok"}}
        )


def test_the_generic_schema_reads_common_field_names(make_module: Any, instrument: Any, telemetry: Any) -> None:
    module = make_module(
        "def run(row):\n    return score({'rollout_id': None, 'step': 1})\n"
        "def score(request):\n    return {'reward': 0.5}\n"
        "def judge(results):\n    return {'verdicts': [{'task_index': 3, 'repeat': 1, 'verdict': False,"
        " 'checks': [{'name': 'b'}, {'name': 'a'}]}]}\n"
    )
    instrument(
        targets=[
            Target(f"{module}:run", "dispatch", schema=GENERIC),
            Target(f"{module}:score", "verify", schema=GENERIC),
            Target(f"{module}:judge", "health", schema=GENERIC),
        ]
    )
    loaded = importlib.import_module(module)
    loaded.run({"task_id": "t", "task_index": 3, "repeat": 1})
    loaded.judge([])
    (dispatch,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert dict(dispatch.attributes) == {
        semconv.TASK_ID: "t",
        semconv.TASK_INDEX: 3,
        semconv.ROLLOUT_REPEAT: 1,
        semconv.ROLLOUT_ID: "3-1",
    }
    (verify,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert verify.attributes[semconv.ROLLOUT_REWARD] == 0.5 and verify.attributes[semconv.ROLLOUT_ID] == "3-1"
    (health,) = telemetry.spans(semconv.SPAN_HEALTH)
    assert health.parent is not None and health.parent.span_id == dispatch.context.span_id
    assert health.attributes[semconv.HEALTH_VERDICT] == "unhealthy"
    assert list(health.attributes[semconv.HEALTH_CHECKS]) == ["a", "b"]


def _span(name: str, span_id: int, attributes: dict[str, Any], start: int, status: int = 0) -> Span:
    return Span(name, f"{1:032x}", f"{span_id:016x}", None, start, start + 1, status, attributes, {})


@pytest.mark.parametrize(("rule", "reward"), [(None, 1.0), ("last", 1.0), ("sum", 1.5), ("max", 1.0), ("first", 0.5)])
def test_the_report_scores_a_rollout_once_by_its_reward_rule(rule: str | None, reward: float) -> None:
    extra = {} if rule is None else {semconv.REWARD_RULE: rule}
    steps = [(3, 1.0), (1, 0.5), (2, 0.0)]  # (start, reward), read out of order
    verifies = [
        _span("gym.verify", 10 + at, {semconv.ROLLOUT_ID: "r", semconv.ROLLOUT_REWARD: value, **extra}, at) for at, value in steps
    ]
    dispatch = _span("gym.rollout.dispatch", 1, {semconv.TASK_ID: "t", semconv.ROLLOUT_ID: "r"}, 0)
    failed = _span("gym.rollout.dispatch", 2, {semconv.TASK_ID: "t", semconv.ROLLOUT_ID: "f"}, 0, status=2)
    failed_verify = _span("gym.verify", 20, {semconv.ROLLOUT_ID: "f", semconv.ROLLOUT_REWARD: 1.0}, 1)
    for order in ([*verifies, failed_verify, dispatch, failed], [dispatch, failed, *verifies, failed_verify]):
        figures = RunFigures().add_all(order).figures()
        (task,) = figures["tasks"]
        assert (task["scored"], task["mean_reward"]) == (1, reward)
        assert figures["run"]["rollouts_without_dispatch"] == 0


def test_a_target_in_a_script_says_how_to_trace_it(instrument: Any) -> None:
    """A script's functions are defined after instrumentation starts (the launcher runs first):
    one line says what to do instead."""
    with pytest.raises(ValueError, match=r"module '__main__' has no attribute 'run_episode'; a script's own functions") as error:
        instrument(targets=["__main__:run_episode=dispatch"])
    assert "put them in a module beside the script, import it from the script" in str(error.value)


def test_a_decorator_reads_the_common_field_names_not_nemo_gyms(instrument: Any, telemetry: Any) -> None:
    import gym_instrument

    instrument()

    @gym_instrument.dispatch
    def run(row: Any) -> Any:
        return row

    run({"task_id": "t", "task_index": 1, "repeat": 0})
    run({"task_id": "u", "_ng_task_index": 4, "_ng_rollout_index": 2})  # NeMo Gym's fields: its preset's schema reads them
    first, second = telemetry.spans(semconv.SPAN_DISPATCH)
    assert dict(first.attributes) == {
        semconv.TASK_ID: "t",
        semconv.TASK_INDEX: 1,
        semconv.ROLLOUT_REPEAT: 0,
        semconv.ROLLOUT_ID: "1-0",
    }
    assert dict(second.attributes) == {semconv.TASK_ID: "u"}


USER_LOOP = """
def run_episode(row):
    return {"reward": 1.0}


def score(request):
    return {"reward": 0.5}
"""


def test_a_users_own_function_reads_the_common_field_names_by_default(make_module: Any, instrument: Any, telemetry: Any) -> None:
    """A plain decorator and a target that names no schema read ``task_id``, ``repeat`` and
    ``rollout_id``, never NeMo Gym's ``_ng_*`` fields; ``@nemo_gym`` after the role reads those."""
    import gym_instrument

    name = make_module(USER_LOOP)
    instrument(targets=[f"{name}:run_episode=dispatch", f"{name}:score=verify"])
    loop = importlib.import_module(name)

    @gym_instrument.dispatch
    def decorated(row: Any) -> Any:
        return loop.score({"rollout_id": row.get("rollout_id")})

    user_row = {"task_id": "maze-3", "task_index": 3, "repeat": 1, "rollout_id": "maze-3-r1"}
    nemo_row = {"task_id": "maze-4", "_ng_task_index": 4, "_ng_rollout_index": 0, "_ng_rollout_id": "ng-4-0"}
    for row in (user_row, nemo_row):
        decorated(row)
        loop.run_episode(row)
    expected_user = {
        semconv.TASK_ID: "maze-3",
        semconv.TASK_INDEX: 3,
        semconv.ROLLOUT_REPEAT: 1,
        semconv.ROLLOUT_ID: "maze-3-r1",
    }
    assert [dict(span.attributes) for span in telemetry.spans(semconv.SPAN_DISPATCH)] == [
        expected_user,
        expected_user,
        {semconv.TASK_ID: "maze-4"},  # no _ng_* field read
        {semconv.TASK_ID: "maze-4"},
    ]
    assert [span.attributes.get(semconv.ROLLOUT_ID) for span in telemetry.spans(semconv.SPAN_VERIFY)] == ["maze-3-r1", None]

    # The same function, its target naming NeMo Gym's schema in the short form.
    telemetry.clear()
    gym_instrument.GymInstrumentor().uninstrument()
    instrument(targets=[f"{name}:run_episode=dispatch@nemo_gym"])
    loop.run_episode(nemo_row)
    (dispatch,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert dict(dispatch.attributes) == {
        semconv.TASK_ID: "maze-4",
        semconv.TASK_INDEX: 4,
        semconv.ROLLOUT_REPEAT: 0,
        semconv.ROLLOUT_ID: "ng-4-0",
    }


def test_the_short_form_names_a_schema() -> None:
    from gym_instrument.config.settings import parse_target
    from gym_instrument.frameworks import FRAMEWORKS

    assert parse_target("a.b:C.d=dispatch").schema is None  # the generic schema, handed down
    assert parse_target(" a.b:C.d = dispatch @ nemo_gym ").schema is FRAMEWORKS["nemo_gym"].schema
    assert parse_target("a.b:f=verify@generic").schema is GENERIC
    with pytest.raises(ValueError, match=r"target 'a.b:f=dispatch@nemo': schema: unknown schema 'nemo'; expected nemo_gym"):
        parse_target("a.b:f=dispatch@nemo")


def test_every_preset_target_names_its_schema() -> None:
    from gym_instrument.frameworks import FRAMEWORKS

    for framework in FRAMEWORKS.values():
        for target in framework.preset["targets"]:
            assert "schema" in target, (framework.name, target["path"])


# -- verdicts by task and repeat: the dispatch's declared identity names the rollout --------------


def test_a_verdict_by_task_and_repeat_finds_its_rollout_without_the_template(loop: str, instrument: Any, telemetry: Any) -> None:
    settings = config(loop)
    del settings["targets"][2]["verdicts"]["rollout_id"]  # task_id and repeat alone: the dispatch's template is not repeated
    instrument(config=settings)
    importlib.import_module(loop).main()
    dispatches = {span.context.span_id: span.attributes[semconv.ROLLOUT_ID] for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    health = telemetry.spans(semconv.SPAN_HEALTH)
    assert len(health) == len(dispatches) == 6
    for span in health:
        assert span.parent is not None and dispatches[span.parent.span_id] == span.attributes[semconv.ROLLOUT_ID]
    verdicts = {span.attributes[semconv.ROLLOUT_ID]: span.attributes[semconv.HEALTH_VERDICT] for span in health}
    assert verdicts["boom-0"] == "unhealthy"


RETRIED = """
def run(task, repeat, attempt):
    return {"task_id": task, "repeat": repeat}


def judge(records):
    return records
"""


def test_records_of_a_users_loop_name_task_and_repeat_through_the_generic_schema(
    make_module: Any, instrument: Any, telemetry: Any
) -> None:
    """No verdicts table: the generic schema reads task_id and repeat (and attempt) from the
    records; the latest attempt of a retried rollout wins, an attempt a retry replaced finds nothing."""
    module = make_module(RETRIED)
    start = {"task_id": "arg.task", "repeat": "arg.repeat", "attempt": "arg.attempt"}
    targets = [{"path": f"{module}:run", "role": "dispatch", "start": start}, {"path": f"{module}:judge", "role": "health"}]
    instrument(config={"targets": targets})
    loaded = importlib.import_module(module)
    for task, repeat, attempt in (("sum", 0, 0), ("sum", 0, 1), ("sum", 1, 0), ("max", 0, 0)):
        loaded.run(task, repeat, attempt)
    loaded.judge(
        [
            {"task_id": "sum", "repeat": 0, "verdict": True},  # the retry, attempt 1
            {"task_id": "sum", "repeat": 1, "attempt": 0, "verdict": False},
            {"task_id": "max", "repeat": 0, "attempt": 3, "verdict": True},  # an attempt never made
        ]
    )
    dispatches = {span.context.span_id: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    judged = [
        (
            dispatches[span.parent.span_id].attributes[semconv.TASK_ID],
            dispatches[span.parent.span_id].attributes[semconv.ROLLOUT_REPEAT],
            dispatches[span.parent.span_id].attributes[semconv.ROLLOUT_ATTEMPT],
            span.attributes[semconv.HEALTH_VERDICT],
        )
        for span in telemetry.spans(semconv.SPAN_HEALTH)
    ]
    assert judged == [("sum", 0, 1, "healthy"), ("sum", 1, 0, "unhealthy")]


def test_a_health_result_that_yields_no_verdict_is_reported_once(
    make_module: Any, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    module = make_module("def judge(results):\n    return {'passed': 3, 'failed': 1}\n\ndef empty(results):\n    return []\n")
    instrument(targets=[f"{module}:judge=health", f"{module}:empty=health"])
    loaded = importlib.import_module(module)
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        for _ in range(3):
            loaded.judge([])
            loaded.empty([])  # a pass with nothing to judge: nothing to say
    messages = [record.getMessage() for record in caplog.records if "yields no verdict" in record.getMessage()]
    assert messages == [
        f"gym_instrument: target {module}:judge: its health result (a dict with keys ['failed', 'passed']) yields no verdict"
        " (schema generic): no health span is made; say what it returns with verdicts. Reported once per target"
    ]
