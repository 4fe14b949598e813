"""The declarative form (gym_instrument.declare) and the extractor return convention (extract)."""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from gym_instrument import Target, at_start, semconv
from gym_instrument.config.declare import FieldPath, parse_config, read_document, target_from_mapping
from gym_instrument.config.settings import GymConfig
from gym_instrument.frameworks import DEFAULT_SCHEMA as SCHEMA
from gym_instrument.target.patcher import make_plan

# A loop whose failures come back as data, as verifiers' do: no telemetry code.
LOOP = """
import asyncio
from pydantic import BaseModel


class Error(BaseModel):
    kind: str


class Episode(BaseModel):
    id: str
    ok: bool = True
    errors: list[Error] = []
    scores: dict[str, float] = {}

    @property
    def reward(self):
        return sum(self.scores.values())


seen_baggage = []


class Runner:
    async def run_episode(self, task, episode_id, *, retries=0):
        from opentelemetry import baggage
        seen_baggage.append(baggage.get_baggage("nemo.gym.rollout.id"))
        episode = Episode(id=episode_id, ok=not task.get("fail"))
        if task.get("fail"):
            episode.errors.append(Error(kind="ModelDown"))
        else:
            await score(episode)
        return episode


async def score(episode):
    episode.scores["correct"] = 0.5
    episode.scores["format"] = 0.25
    return None
"""

DISPATCH = {
    "role": "dispatch",
    "row": "task",
    "schema": "generic",
    "framework": "my_loop",
    "start": {
        semconv.TASK_ID: ["row.id", "row.name"],
        semconv.TASK_INDEX: "row.idx",
        semconv.ROLLOUT_ID: "arg.episode_id",
    },
    "failure": {"when": "result.ok", "equals": False, "error_type": "result.errors[-1].kind"},
}
VERIFY = {
    "role": "verify",
    "row": "episode",
    "schema": "generic",
    "framework": "my_loop",
    "end": {semconv.ROLLOUT_REWARD: "row.reward"},
}


@pytest.fixture
def loop(make_module: Any) -> Any:
    return make_module(LOOP)


def _run(module: Any, *tasks: dict[str, Any]) -> list[Any]:
    import asyncio

    async def main() -> list[Any]:
        return [await module.Runner().run_episode(task, f"ep-{i}") for i, task in enumerate(tasks)]

    return asyncio.run(main())


def test_a_declared_target_reads_its_attributes_from_paths(loop: str, instrument: Any, telemetry: Any) -> None:
    instrument(config={"targets": [{"path": f"{loop}:Runner.run_episode", **DISPATCH}, {"path": f"{loop}:score", **VERIFY}]})
    module = importlib.import_module(loop)
    _run(module, {"id": "t-a", "idx": 0}, {"name": "named", "idx": 1}, {"idx": 2})
    dispatches = telemetry.spans(semconv.SPAN_DISPATCH)
    assert [dict(span.attributes) for span in dispatches] == [
        {semconv.FRAMEWORK: "my_loop", semconv.TASK_ID: "t-a", semconv.TASK_INDEX: 0, semconv.ROLLOUT_ID: "ep-0"},
        {semconv.FRAMEWORK: "my_loop", semconv.TASK_ID: "named", semconv.TASK_INDEX: 1, semconv.ROLLOUT_ID: "ep-1"},
        {semconv.FRAMEWORK: "my_loop", semconv.TASK_INDEX: 2, semconv.ROLLOUT_ID: "ep-2"},  # neither id nor name
    ]
    # A rollout id read at the start is the baggage entry too, so verify below it names its rollout.
    assert module.seen_baggage == ["ep-0", "ep-1", "ep-2"]
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert [(span.attributes[semconv.ROLLOUT_ID], span.attributes[semconv.ROLLOUT_REWARD]) for span in verifies] == [
        ("ep-0", 0.75),
        ("ep-1", 0.75),
        ("ep-2", 0.75),
    ]
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 3


def test_start_and_end_rules_name_a_rollouts_facts_by_the_short_names_of_verdicts(
    loop: str, instrument: Any, telemetry: Any
) -> None:
    # The same configuration as above, in the vocabulary of a verdicts table: no nemo.gym.* name.
    dispatch = {**DISPATCH, "start": {"task_id": ["row.id", "row.name"], "task_index": "row.idx", "rollout_id": "arg.episode_id"}}
    verify = {**VERIFY, "end": {"reward": "row.reward", "masked": "row.ok", "my.own": "row.id"}}
    instrument(config={"targets": [{"path": f"{loop}:Runner.run_episode", **dispatch}, {"path": f"{loop}:score", **verify}]})
    module = importlib.import_module(loop)
    _run(module, {"id": "t-a", "idx": 0}, {"name": "named", "idx": 1})
    assert [dict(span.attributes) for span in telemetry.spans(semconv.SPAN_DISPATCH)] == [
        {semconv.FRAMEWORK: "my_loop", semconv.TASK_ID: "t-a", semconv.TASK_INDEX: 0, semconv.ROLLOUT_ID: "ep-0"},
        {semconv.FRAMEWORK: "my_loop", semconv.TASK_ID: "named", semconv.TASK_INDEX: 1, semconv.ROLLOUT_ID: "ep-1"},
    ]
    assert module.seen_baggage == ["ep-0", "ep-1"]  # a short rollout_id at the start is the baggage entry too
    # masked = the episode's ok (true): a masked verify has no reward, by the rule of the long name.
    assert [dict(span.attributes) for span in telemetry.spans(semconv.SPAN_VERIFY)] == [
        {semconv.FRAMEWORK: "my_loop", semconv.ROLLOUT_ID: rollout_id, semconv.VERIFY_MASKED: True, "my.own": rollout_id}
        for rollout_id in ("ep-0", "ep-1")
    ]


def test_a_table_naming_one_fact_by_its_short_and_its_long_name_is_refused() -> None:
    entry = {"path": "m:f", "role": "dispatch", "start": {"task_id": "row.id", semconv.TASK_ID: "row.name"}}
    with pytest.raises(ValueError, match=r"start: 'nemo.gym.task.id': the table names nemo.gym.task.id already, as 'task_id'"):
        target_from_mapping(entry)


def test_a_failure_that_comes_back_as_data_marks_the_span_and_counts_as_error(loop: str, instrument: Any, telemetry: Any) -> None:
    instrument(targets=[{"path": f"{loop}:Runner.run_episode", **DISPATCH}])
    module = importlib.import_module(loop)
    episodes = _run(module, {"id": "fine"}, {"id": "broken", "fail": True})
    assert [episode.ok for episode in episodes] == [True, False]  # the same objects come back
    fine, broken = telemetry.spans(semconv.SPAN_DISPATCH)
    assert fine.status.status_code is StatusCode.UNSET and semconv.ERROR_TYPE not in fine.attributes
    assert broken.status.status_code is StatusCode.ERROR
    assert broken.status.description == "ModelDown"
    assert broken.attributes[semconv.ERROR_TYPE] == "ModelDown"
    outcomes = {point.attributes["outcome"]: point.value for point in telemetry.metric_points(semconv.METRIC_DISPATCHES)}
    assert outcomes == {"ok": 1, "error": 1}


def test_a_failure_without_a_type_is_other(loop: str, instrument: Any, telemetry: Any) -> None:
    failure = {"when": "result.ok", "equals": False, "error_type": "result.errors[5].kind"}
    instrument(targets=[{"path": f"{loop}:Runner.run_episode", **DISPATCH, "failure": failure}])
    _run(importlib.import_module(loop), {"fail": True})
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.attributes[semconv.ERROR_TYPE] == semconv.ERROR_TYPE_OTHER


# -- the extractor return convention, for extractors written in Python -----------------------------


def test_an_extractor_rollout_id_at_start_is_the_attribute_and_the_baggage(loop: str, instrument: Any, telemetry: Any) -> None:
    @at_start
    def episode_id(call: Any) -> dict[str, Any]:
        return {semconv.ROLLOUT_ID: f"mine-{call.argument('episode_id')}"}

    instrument(targets=[Target(f"{loop}:Runner.run_episode", "dispatch", row_arg="task", extractors=(episode_id,))])
    module = importlib.import_module(loop)
    _run(module, {"id": "a"})
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.attributes[semconv.ROLLOUT_ID] == "mine-ep-0"
    assert module.seen_baggage == ["mine-ep-0"]


def test_an_extractor_rollout_id_after_the_call_is_an_attribute_only(loop: str, instrument: Any, telemetry: Any) -> None:
    def episode_id(call: Any) -> dict[str, Any]:
        return {semconv.ROLLOUT_ID: call.result.id}

    instrument(targets=[Target(f"{loop}:Runner.run_episode", "dispatch", row_arg="task", extractors=(episode_id,))])
    module = importlib.import_module(loop)
    _run(module, {"id": "a"})
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.attributes[semconv.ROLLOUT_ID] == "ep-0"
    assert module.seen_baggage == [None]  # not known while it ran


def test_an_extractor_error_type_declares_the_call_failed(loop: str, instrument: Any, telemetry: Any) -> None:
    def failed_as_data(call: Any) -> dict[str, Any] | None:
        return None if call.result.ok else {semconv.ERROR_TYPE: call.result.errors[-1].kind}

    instrument(targets=[Target(f"{loop}:Runner.run_episode", "dispatch", row_arg="task", extractors=(failed_as_data,))])
    _run(importlib.import_module(loop), {"id": "a"}, {"id": "b", "fail": True})
    ok, failed = telemetry.spans(semconv.SPAN_DISPATCH)
    assert (ok.status.status_code, failed.status.status_code) == (StatusCode.UNSET, StatusCode.ERROR)
    assert failed.attributes[semconv.ERROR_TYPE] == "ModelDown"
    outcomes = {point.attributes["outcome"]: point.value for point in telemetry.metric_points(semconv.METRIC_DISPATCHES)}
    assert outcomes == {"ok": 1, "error": 1}


def test_a_raised_exception_keeps_its_own_error_type(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module("def send(row):\n    raise KeyError(row)\n")

    def says_failed(call: Any) -> dict[str, Any]:
        return {semconv.ERROR_TYPE: "declared"}

    instrument(targets=[Target(f"{name}:send", "dispatch", extractors=(says_failed,))])
    module = importlib.import_module(name)
    with pytest.raises(KeyError):
        module.send({"task_id": "x"})
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.attributes[semconv.ERROR_TYPE] == "KeyError"


def test_targets_that_declare_nothing_pay_nothing_new() -> None:
    """Decided when wrapping: a plain target makes no Call, runs no rule and names no framework."""

    def send(row: Any) -> Any:
        return row

    plain = make_plan(send, Target("m:send", "dispatch"), SCHEMA)
    assert (plain.makes_call, plain.start_extractors, plain.end_extractors, plain.framework) == (False, (), (), None)
    declared = make_plan(send, target_from_mapping({"path": "m:send", **DISPATCH}), SCHEMA)
    assert declared.makes_call and declared.framework == "my_loop"
    assert len(declared.start_extractors) == 1 and len(declared.end_extractors) == 1


# -- paths -------------------------------------------------------------------------------------


class _Row(BaseModel):
    idx: int
    items: list[int] = [1, 2, 3]

    @property
    def doubled(self) -> int:
        return self.idx * 2


class _Call:
    def __init__(self, row: Any = None, result: Any = None, **arguments: Any) -> None:
        self.row, self.result, self.instance, self._arguments = row, result, None, arguments

    def argument(self, name: str) -> Any:
        return self._arguments.get(name)


@pytest.mark.parametrize(
    ("path", "call", "expected"),
    [
        ("row.idx", _Call(_Row(idx=3)), 3),
        ("row.doubled", _Call(_Row(idx=3)), 6),  # a property, as verifiers' Trace.reward
        ("row.items[-1]", _Call(_Row(idx=3)), 3),
        ("row.items[3]", _Call(_Row(idx=3)), "MISSING"),
        ("row.nothing.deeper", _Call(_Row(idx=3)), "MISSING"),
        ("result.a[0].b", _Call(result={"a": [{"b": "x"}]}), "x"),
        ("arg.task.id", _Call(task={"id": "t"}), "t"),
        ("row.items[0]", _Call({"items": "abc"}), "MISSING"),  # a string is not a list here
        ("row.scores.*.value", _Call({"scores": {"includes": {"value": "C"}}}), "C"),
        ("row.scores.*.value", _Call({"scores": {"gone": None, "second": {"value": 2}}}), 2),  # the first present
        ("row.scores.*", _Call({"scores": {}}), "MISSING"),
        ("row.scores.*", _Call({"scores": [1, 2]}), "MISSING"),  # a list is not a mapping
    ],
)
def test_a_path_reads_fields_items_and_properties(path: str, call: Any, expected: Any) -> None:
    value = FieldPath(path).read(call)
    assert (repr(value) if expected == "MISSING" else value) == expected


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("task.id", "must start with row, arg.NAME, self or result"),
        ("row.__class__", "is not readable"),
        ("row.a[x]", r"expected .field, \[N\], \[i\] or .\*"),
        ("row..a", r"expected .field, \[N\], \[i\] or .\*"),
        ("row.a*", r"expected .field, \[N\], \[i\] or .\*"),
        ("arg", "must start with"),
    ],
)
def test_a_bad_path_is_refused(path: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FieldPath(path)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"role": "dispatch"}, "target without a path: path is required"),
        ({"path": "m:f", "role": "judge"}, "unknown role 'judge'"),
        ({"path": "m:f", "role": "dispatch", "rows": "x"}, "target 'm:f': unknown key 'rows'"),
        ({"path": "m:f", "role": "dispatch", "start": {semconv.ROLLOUT_ID: "result.id"}}, "start: 'nemo.gym.rollout.id'"),
        ({"path": "m:f", "role": "dispatch", "end": {"a": 3}}, "end: 'a': expected a path"),
        ({"path": "m:f", "role": "dispatch", "failure": {"equals": 1}}, "failure: needs when"),
        ({"path": "m:f", "role": "dispatch", "end": {"a": {"paths": "row.x"}}}, "end: 'a': unknown key 'paths'"),
        ({"path": "m:f", "role": "dispatch", "end": {"a": {"map": {"C": 1}}}}, "end: 'a': a rule table needs path"),
        ({"path": "m:f", "role": "dispatch", "end": {"a": {"path": "row.x", "map": {"C": [1]}}}}, "end: 'a': map: 'C'"),
        ({"path": "m:f", "role": "dispatch", "end": {"a": {"path": "row.x", "default": 0}}}, "end: 'a': default: .* no map"),
        ({"path": "m:f", "role": "dispatch", "end": {"a": {"path": "row.x", "offset": 1.5}}}, "offset: expected an int"),
        ({"path": "m:f", "role": "dispatch", "end": {"a": {"path": "row.x", "offset": True}}}, "offset: expected an int"),
        ({"path": "m:f", "role": "dispatch", "failure": {"when": "result.ok", "equals": [1]}}, "failure: equals"),
        ({"path": "m:f", "role": "dispatch", "when": {"url": ["x"]}}, "when: url"),
        ({"path": "m:f", "role": "dispatch", "extractors": ["no_such_module_x:f"]}, "extractors: cannot import"),
        ({"path": "m:f", "role": "dispatch", "schema": "gym_instrument.semconv:TASK_ID"}, "schema: .* is not a RolloutSchema"),
        ({"path": "m:f", "role": "dispatch", "defaults": "no"}, "defaults: expected true or false"),
    ],
)
def test_a_bad_entry_raises_naming_the_target_and_key(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        target_from_mapping(entry)


def test_extractors_by_import_path(make_module: Any) -> None:
    name = make_module("def tag(call):\n    return {'my.tag': 1}\n")
    target = target_from_mapping(
        {"path": "m:f", "role": "verify", "extractors": [f"{name}:tag"], "start_extractors": [f"{name}:tag"]}
    )
    plan = make_plan(lambda body: body, target, SCHEMA)
    assert len(plan.start_extractors) == 1 and len(plan.end_extractors) == 1


# -- documents: code, environment, file ----------------------------------------------------------

TOML = """
[[targets]]
path = "my_loop.run:Runner.run_episode"
role = "dispatch"
row = "task"
start = { "nemo.gym.task.index" = "row.idx" }
failure = { when = "result.ok", equals = false, error_type = ["result.errors[-1].type"] }
"""


def test_one_form_from_code_file_and_text(tmp_path: Path) -> None:
    toml_file = tmp_path / "gym.toml"
    toml_file.write_text(TOML)
    from_toml = parse_config(str(toml_file))
    from_text = parse_config(TOML)
    document = read_document(TOML)
    json_file = tmp_path / "gym.json"
    json_file.write_text(json.dumps(document))
    from_json = parse_config(str(json_file))
    from_code = parse_config(dict(document))
    assert from_toml == from_text == from_json == from_code
    (target,) = from_code
    assert (target.path, target.role, target.row_arg) == ("my_loop.run:Runner.run_episode", "dispatch", "task")


def test_the_environment_logs_a_bad_rule_by_variable_and_key_and_keeps_its_target(caplog: pytest.LogCaptureFixture) -> None:
    text = (
        TOML
        + '\n[[targets]]\npath = "my_loop.run:score"\nrole = "verify"\n'
        + 'end = { "nemo.gym.rollout.reward" = "score", "my.kept" = "row.kept" }\n'
        + '\n[[targets]]\npath = "my_loop.run:judge"\nrole = "judge"\n'
    )
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        config = GymConfig.resolve({}, environ={"OTEL_PYTHON_GYM_CONFIG": text})
    # The bad rule is dropped, not its target; a bad target (an unknown role) is skipped whole.
    assert [target.path for target in config.config] == ["my_loop.run:Runner.run_episode", "my_loop.run:score"]
    (kept,) = config.config[1].extractors
    assert [name for name, _ in kept.rules] == ["my.kept"]
    rule, target = caplog.records
    assert "OTEL_PYTHON_GYM_CONFIG" in rule.getMessage()
    assert "target 'my_loop.run:score': end: 'nemo.gym.rollout.reward': path 'score'" in rule.getMessage()
    assert "this rule is dropped" in rule.getMessage()
    assert "unknown role 'judge'" in target.getMessage()
    # The same entry in code: the same message, as a ValueError.
    with pytest.raises(ValueError, match=r"target 'my_loop.run:score': end: 'nemo.gym.rollout.reward': path 'score'"):
        GymConfig.resolve({"config": text})


def test_a_bad_failure_rule_from_the_environment_drops_that_rule_only(caplog: pytest.LogCaptureFixture) -> None:
    entry = '[[targets]]\npath = "m:f"\nrole = "dispatch"\nstart = { "nemo.gym.task.id" = "row.id" }\nfailure = { when = "ok" }\n'
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        (target,) = GymConfig.resolve({}, environ={"OTEL_PYTHON_GYM_CONFIG": entry}).config
    assert len(target.extractors) == 1  # the start rules
    assert "target 'm:f': failure: when: path 'ok'" in caplog.text


def test_an_unreadable_config_is_logged_and_the_application_runs(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        config = GymConfig.resolve({}, environ={"OTEL_PYTHON_GYM_CONFIG": str(tmp_path / "missing.toml")})
    assert config.config == ()
    assert "OTEL_PYTHON_GYM_CONFIG" in caplog.text and "cannot read" in caplog.text
    with pytest.raises(ValueError, match="cannot parse"):
        GymConfig.resolve({"config": "[[targets]\npath="})


def test_without_tomllib_toml_asks_for_tomli_and_json_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10 has no tomllib: TOML then needs tomli, with a clear message; JSON needs nothing."""
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(ValueError, match=r"Python 3.11\+ \(tomllib\) or the tomli package"):
        parse_config(TOML)
    assert len(parse_config(json.dumps(_TOML_AS_DICT))) == 1


_TOML_AS_DICT = {
    "targets": [
        {
            "path": "my_loop.run:Runner.run_episode",
            "role": "dispatch",
            "row": "task",
            "start": {"nemo.gym.task.index": "row.idx"},
        }
    ]
}


def test_a_mapping_is_a_target_wherever_targets_are_given() -> None:
    config = GymConfig.resolve({"targets": [{"path": "a.b:f", "role": "verify"}, "a.b:g=dispatch"]})
    assert [str(target) for target in config.targets] == ["a.b:f=verify", "a.b:g=dispatch"]


def test_a_target_with_a_condition_is_hashable() -> None:
    """A second instrument() puts targets in sets: a ``when`` dict must not break that."""
    target = Target("a.b:f", "dispatch", when={"url_path": "/run"})
    assert target in {target} and len({target, Target("a.b:f", "dispatch", when={"url_path": "/run"})}) == 1


def test_the_verify_role_takes_no_baggage_from_a_start_extractor(loop: str, instrument: Any, telemetry: Any) -> None:
    """An extracted rollout id names a verify span; only a dispatch puts it into baggage."""

    @at_start
    def named(call: Any) -> dict[str, Any]:
        return {semconv.ROLLOUT_ID: "verify-own"}

    instrument(targets=[Target(f"{loop}:score", "verify", extractors=(named,))])
    module = importlib.import_module(loop)
    import asyncio

    asyncio.run(module.score(module.Episode(id="e")))
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert span.attributes[semconv.ROLLOUT_ID] == "verify-own"


# -- what a framework like inspect-ai needs: letters, 1-based counts, unknown keys, errors as data --

SAMPLES = """
class Runner:
    async def run_sample(self, sample, *, epoch, sample_uuid):
        await sample_end(sample)
        return sample


async def sample_end(sample):
    return None
"""

SAMPLE_DISPATCH = {
    "role": "dispatch",
    "row": "sample",
    "schema": "generic",
    "start": {
        semconv.TASK_ID: "row.id",
        semconv.ROLLOUT_REPEAT: {"path": "arg.epoch", "offset": -1},
        semconv.ROLLOUT_ID: "arg.sample_uuid",
    },
    "failure": {"when": "result.error", "error_type": "result.error_kind"},
}
SAMPLE_END = {
    "role": "verify",
    "row": "sample",
    "schema": "generic",
    "end": {
        semconv.ROLLOUT_REWARD: {
            "path": "row.scores.*.value",
            "map": {"C": 1.0, "I": 0.0, "P": 0.5, "true": 1.0, "false": 0.0},
        }
    },
}


def _run_samples(module: Any, *samples: tuple[dict[str, Any], int]) -> list[Any]:
    import asyncio

    async def main() -> list[Any]:
        runner = module.Runner()
        return [await runner.run_sample(sample, epoch=epoch, sample_uuid=f"u{i}") for i, (sample, epoch) in enumerate(samples)]

    return asyncio.run(main())


def test_a_value_map_an_offset_and_the_first_value_of_a_mapping(make_module: Any, instrument: Any, telemetry: Any) -> None:
    loop = make_module(SAMPLES)
    targets = [{"path": f"{loop}:Runner.run_sample", **SAMPLE_DISPATCH}, {"path": f"{loop}:sample_end", **SAMPLE_END}]
    instrument(config={"targets": targets})
    module = importlib.import_module(loop)
    samples = [
        ({"id": "a", "scores": {"includes": {"value": "C"}}}, 1),
        ({"id": "b", "scores": {"match": {"value": "I"}}}, 2),
        ({"id": "c", "scores": {"model_graded": {"value": "P"}}}, 1),
        ({"id": "d", "scores": {"exact": {"value": 0.25}}}, 1),  # a number is kept
        ({"id": "e", "scores": {"flag": {"value": True}}}, 1),  # a bool is looked up as "true"
        ({"id": "f", "scores": {"odd": {"value": "X"}}}, 1),  # not in the map, no default: no reward
    ]
    returned = _run_samples(module, *samples)
    assert returned == [sample for sample, _ in samples]
    dispatches = telemetry.spans(semconv.SPAN_DISPATCH)
    assert [(s.attributes[semconv.TASK_ID], s.attributes[semconv.ROLLOUT_REPEAT]) for s in dispatches] == [
        ("a", 0),
        ("b", 1),
        ("c", 0),
        ("d", 0),
        ("e", 0),
        ("f", 0),
    ]
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    rewards = [(s.attributes[semconv.ROLLOUT_ID], s.attributes.get(semconv.ROLLOUT_REWARD)) for s in verifies]
    assert rewards == [("u0", 1.0), ("u1", 0.0), ("u2", 0.5), ("u3", 0.25), ("u4", 1.0), ("u5", None)]
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 5


def test_a_value_map_default_takes_every_other_string(make_module: Any, instrument: Any, telemetry: Any) -> None:
    loop = make_module(SAMPLES)
    end = {semconv.ROLLOUT_REWARD: {"path": "row.scores.*.value", "map": {"C": 1.0}, "default": 0.0}}
    instrument(config={"targets": [{"path": f"{loop}:sample_end", **SAMPLE_END, "end": end}]})
    module = importlib.import_module(loop)
    _run_samples(module, ({"scores": {"s": {"value": "C"}}}, 1), ({"scores": {"s": {"value": "huh"}}}, 1))
    assert [s.attributes.get(semconv.ROLLOUT_REWARD) for s in telemetry.spans(semconv.SPAN_VERIFY)] == [1.0, 0.0]


def test_a_failure_rule_without_equals_fires_when_its_path_is_present(make_module: Any, instrument: Any, telemetry: Any) -> None:
    loop = make_module(SAMPLES)
    instrument(config={"targets": [{"path": f"{loop}:Runner.run_sample", **SAMPLE_DISPATCH}]})
    module = importlib.import_module(loop)
    _run_samples(
        module,
        ({"id": "fine", "error": None}, 1),
        ({"id": "typed", "error": {"message": "boom"}, "error_kind": "ValueError"}, 1),
        ({"id": "untyped", "error": "it broke"}, 1),
        ({"id": "absent"}, 1),
    )
    spans = {span.attributes[semconv.TASK_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    assert spans["fine"].status.status_code is StatusCode.UNSET
    assert spans["absent"].status.status_code is StatusCode.UNSET
    assert spans["typed"].status.status_code is StatusCode.ERROR
    assert spans["typed"].attributes[semconv.ERROR_TYPE] == "ValueError"
    assert spans["untyped"].attributes[semconv.ERROR_TYPE] == semconv.ERROR_TYPE_OTHER


def test_a_path_that_never_resolves_is_logged_once_with_target_rule_and_path(
    make_module: Any, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from gym_instrument.schema.declared import WATCHED_CALLS

    loop = make_module(SAMPLES)
    end = {
        semconv.ROLLOUT_REWARD: "row.scores.numm.value",  # misspelled
        "my.present": "row.id",
        "my.sometimes": "row.rare",  # resolves on one call only: not reported
    }
    instrument(config={"targets": [{"path": f"{loop}:sample_end", **SAMPLE_END, "end": end}]})
    module = importlib.import_module(loop)
    samples = [({"id": str(i), "scores": {"num": {"value": 1}}}, 1) for i in range(WATCHED_CALLS * 2)]
    samples[3][0]["rare"] = "x"
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        _run_samples(module, *samples[: WATCHED_CALLS - 1])
        assert caplog.records == []  # not before the last watched call
        _run_samples(module, *samples[WATCHED_CALLS - 1 :])
    (record,) = caplog.records
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert f"target '{loop}:sample_end': end" in message
    assert "'nemo.gym.rollout.reward'" in message
    assert "'row.scores.numm.value' (resolves up to 'row.scores')" in message


def test_the_docs_example_of_the_new_rules_parses_into_what_it_says() -> None:
    page = (Path(__file__).parents[1] / "docs" / "your-own-framework.md").read_text()
    section = page.split("### Letters, counts from 1, unknown keys, errors as data", 1)[1]
    (target,) = parse_config(section.split("```toml\n", 1)[1].split("```", 1)[0])
    start, end, failure = target.extractors
    assert dict(start.rules)[semconv.ROLLOUT_REPEAT].offset == -1
    reward = dict(end.rules)[semconv.ROLLOUT_REWARD]
    assert (reward.paths[0].text, reward.value_map, reward.default) == ("result.scores.*.value", {"C": 1.0, "I": 0.0}, 0.0)
    assert failure.when.text == "result.error" and [path.text for path in failure.error_type] == ["result.error.kind"]


# A scorer whose result says the sample is dropped from training in a field of its own.
JUDGE = """
def judge(episode):
    reward, dropped = episode["reward"], episode["dropped"]
    return {"reward": reward, "dropped": dropped, "score": reward, "mask_sample": dropped}


def flagged(call):
    return {"nemo.gym.verify.masked": call.result["dropped"]}


from gym_instrument.schema import RolloutSchema


class OwnSchema(RolloutSchema):  # a user's own schema, which says both as it reads them
    def verify_attributes(self, request, result):
        return {"nemo.gym.rollout.reward": result["reward"], "nemo.gym.verify.masked": result["dropped"]}


SCHEMA = OwnSchema()
"""

MASKED_BY_A_RULE = """
[[targets]]
path = "{module}:judge"
role = "verify"
schema = "generic"
end = {{ "nemo.gym.verify.masked" = "result.dropped" }}
"""
REWARDED_BY_A_RULE = """
[[targets]]
path = "{module}:judge"
role = "verify"
schema = "nemo_gym"
end = {{ "nemo.gym.rollout.reward" = "result.score" }}
"""
SAID_BY_ITS_OWN_SCHEMA = """
[[targets]]
path = "{module}:judge"
role = "verify"
schema = "{module}:SCHEMA"
"""
MASKED_BY_AN_EXTRACTOR = """
[[targets]]
path = "{module}:judge"
role = "verify"
schema = "generic"
extractors = ["{module}:flagged"]
"""


@pytest.mark.parametrize(
    "config",
    [MASKED_BY_A_RULE, REWARDED_BY_A_RULE, SAID_BY_ITS_OWN_SCHEMA, MASKED_BY_AN_EXTRACTOR],
    ids=[
        "the schema's reward, a rule's mask",
        "the schema's mask, a rule's reward",
        "a user's schema says both",
        "the schema's reward, an extractor's mask",
    ],
)
def test_a_masked_verify_carries_no_reward_whichever_rule_says_either(
    config: str, make_module: Any, instrument: Any, telemetry: Any
) -> None:
    module = make_module(JUDGE)
    instrument(config=config.format(module=module))
    judge = importlib.import_module(module).judge
    episodes = [{"reward": 1.0, "dropped": True}, {"reward": 0.5, "dropped": False}, {"reward": 1.0, "dropped": True}]
    returned = [judge(episode) for episode in episodes]
    assert returned == [{**e, "score": e["reward"], "mask_sample": e["dropped"]} for e in episodes]
    spans = telemetry.spans(semconv.SPAN_VERIFY)
    assert [(s.attributes.get(semconv.VERIFY_MASKED), s.attributes.get(semconv.ROLLOUT_REWARD)) for s in spans] == [
        (True, None),
        (False, 0.5),
        (True, None),
    ]
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 1  # the unmasked one alone
