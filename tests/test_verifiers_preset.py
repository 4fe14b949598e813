"""The verifiers preset, on a stand-in for verifiers 0.4.0 (the real wheel runs in make e2e).

The stand-in keeps what the preset relies on, with 0.4.0's names, signatures and types:
``verifiers.v1.env:Env.run_episode(self, task, ctx, *, on_trace=None, on_discard=None) -> Episode``
(failures returned as data, never raised), ``verifiers.v1.task:Task.score(self, trace,
runtime=None) -> None`` awaited inside the episode through ``asyncio.gather`` (as
``Rollout.close`` does), the pydantic ``TaskData`` (``idx``, ``id``, ``name``), ``Episode``
(``id``, ``ok``, ``errors``, ``traces``) and ``Trace`` (``id``, ``rewards``, ``ok``, ``errors``,
and ``reward`` a property, not a field).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from gym_instrument import semconv
from gym_instrument.config.declare import preset_targets

TASK = """
import asyncio
import uuid

from pydantic import BaseModel, ConfigDict, Field


class TaskData(BaseModel):
    model_config = ConfigDict(frozen=True)
    idx: int | None = None
    id: str | None = None
    name: str | None = None
    prompt: str | None = None


class Error(BaseModel):
    type: str
    message: str
    status_code: int | None = None


class Reward(BaseModel):
    score: float
    weight: float = 1.0

    @property
    def value(self):
        return self.score * self.weight


class Trace(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    rewards: dict[str, Reward | None] = Field(default_factory=dict)
    ok: bool = False
    errors: list[Error] = Field(default_factory=list)

    @property
    def reward(self) -> float:
        return sum(r.value for r in self.rewards.values() if r is not None)


class Task:
    def __init__(self, data, config=None):
        self.data = data
        self.config = config

    async def score(self, trace, runtime=None) -> None:
        trace.rewards["correct"] = Reward(score=1.0 if self.data.prompt == "right" else 0.0, weight=0.5)
        trace.rewards["format"] = Reward(score=1.0, weight=0.25)
"""

ENV = """
import asyncio
import uuid

from pydantic import BaseModel, Field

from verifiers.v1.task import Error, Trace


class Episode(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    ok: bool = False
    errors: list[Error] = Field(default_factory=list)
    traces: list[Trace] = Field(default_factory=list)


class Env:
    async def run_episode(self, task, ctx, *, on_trace=None, on_discard=None):
        episode = Episode()
        if ctx == "hook fails":
            episode.errors.append(Error(type="EnvError", message="setup() failed"))
            return episode
        trace = Trace()
        episode.traces.append(trace)
        if ctx == "model fails":
            trace.errors.append(Error(type="ProviderError", message="upstream 400", status_code=400))
            return episode  # a failed rollout is not scored
        await asyncio.sleep(0)
        await asyncio.gather(task.score(trace, None))  # Rollout.close: the context is copied
        trace.ok = episode.ok = True
        return episode

    def slots(self, task, n=1):
        return [task for _ in range(n)]
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A ``verifiers`` package on sys.path, not yet imported (so the preset's hooks patch it)."""
    package = tmp_path / "verifiers" / "v1"
    package.mkdir(parents=True)
    (tmp_path / "verifiers" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(TASK)
    (package / "env.py").write_text(ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "verifiers" not in sys.modules
    yield
    for name in [name for name in sys.modules if name == "verifiers" or name.startswith("verifiers.")]:
        del sys.modules[name]


def _episodes(*runs: tuple[dict[str, Any], str]) -> list[Any]:
    task_module = importlib.import_module("verifiers.v1.task")
    env = importlib.import_module("verifiers.v1.env").Env()

    async def main() -> list[Any]:
        episodes = []
        for data, ctx in runs:
            task = task_module.Task(task_module.TaskData(**data))
            episodes.append(await env.run_episode(task, ctx, on_trace=None))
        return episodes

    return asyncio.run(main())


def test_the_preset_is_armed_by_default(stand_in: None, instrument: Any, telemetry: Any) -> None:
    instrument(presets=None)  # the default: every shipped preset
    _episodes(({"idx": 0, "id": "t0", "prompt": "right"}, "ok"))
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 1 and len(telemetry.spans(semconv.SPAN_VERIFY)) == 1


def test_dispatch_and_verify_spans_of_an_evaluation(stand_in: None, instrument: Any, telemetry: Any) -> None:
    instrument(presets="verifiers")
    episodes = _episodes(
        ({"idx": 0, "id": "astro-1", "name": "Astro", "prompt": "right"}, "ok"),
        ({"idx": 0, "id": "astro-1", "name": "Astro", "prompt": "wrong"}, "ok"),
        ({"idx": 1, "name": "named-only", "prompt": "right"}, "ok"),
        ({"idx": 2, "prompt": "right"}, "ok"),  # neither id nor name
    )
    dispatches = telemetry.spans(semconv.SPAN_DISPATCH)
    assert [dict(span.attributes) for span in dispatches] == [
        {
            semconv.FRAMEWORK: "verifiers",
            semconv.TASK_ID: "astro-1",
            semconv.TASK_INDEX: 0,
            semconv.ROLLOUT_ID: episodes[0].traces[0].id,
        },
        {
            semconv.FRAMEWORK: "verifiers",
            semconv.TASK_ID: "astro-1",
            semconv.TASK_INDEX: 0,
            semconv.ROLLOUT_ID: episodes[1].traces[0].id,
        },
        {
            semconv.FRAMEWORK: "verifiers",
            semconv.TASK_ID: "named-only",
            semconv.TASK_INDEX: 1,
            semconv.ROLLOUT_ID: episodes[2].traces[0].id,
        },
        {semconv.FRAMEWORK: "verifiers", semconv.TASK_INDEX: 2, semconv.ROLLOUT_ID: episodes[3].traces[0].id},
    ]
    assert all(span.status.status_code is StatusCode.UNSET for span in dispatches)
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == 4
    for dispatch, verify, episode in zip(dispatches, verifies, episodes, strict=True):
        assert verify.context.trace_id == dispatch.context.trace_id
        assert verify.parent is not None and verify.parent.span_id == dispatch.context.span_id
        assert verify.attributes[semconv.ROLLOUT_ID] == dispatch.attributes[semconv.ROLLOUT_ID]
        assert verify.attributes[semconv.ROLLOUT_REWARD] == episode.traces[0].reward  # the weighted sum
        assert verify.attributes[semconv.FRAMEWORK] == "verifiers"
    assert [span.attributes[semconv.ROLLOUT_REWARD] for span in verifies] == [0.75, 0.25, 0.75, 0.75]
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 4
    assert len({span.context.trace_id for span in dispatches}) == 4  # one trace per episode


def test_failed_episodes_are_errors_with_the_framework_error_type(stand_in: None, instrument: Any, telemetry: Any) -> None:
    instrument(presets="verifiers")
    episodes = _episodes(
        ({"idx": 0, "id": "t0", "prompt": "right"}, "model fails"),
        ({"idx": 1, "id": "t1", "prompt": "right"}, "hook fails"),
        ({"idx": 2, "id": "t2", "prompt": "right"}, "ok"),
    )
    assert [episode.ok for episode in episodes] == [False, False, True]
    model_failed, hook_failed, fine = telemetry.spans(semconv.SPAN_DISPATCH)
    assert model_failed.status.status_code is StatusCode.ERROR
    assert model_failed.attributes[semconv.ERROR_TYPE] == "ProviderError"  # trace.errors[-1].type
    assert model_failed.attributes[semconv.ROLLOUT_ID] == episodes[0].traces[0].id
    assert hook_failed.status.status_code is StatusCode.ERROR
    assert hook_failed.attributes[semconv.ERROR_TYPE] == "EnvError"  # episode.errors[-1].type
    assert hook_failed.attributes[semconv.ROLLOUT_ID] == episodes[1].id  # no trace: the episode's id
    assert fine.status.status_code is StatusCode.UNSET and semconv.ERROR_TYPE not in fine.attributes
    assert len(telemetry.spans(semconv.SPAN_VERIFY)) == 1  # a failed rollout is not scored
    outcomes = {point.attributes["outcome"]: point.value for point in telemetry.metric_points(semconv.METRIC_DISPATCHES)}
    assert outcomes == {"ok": 1, "error": 2}
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 1


def test_a_task_subclass_that_overrides_score_is_reached(stand_in: None, instrument: Any, telemetry: Any) -> None:
    instrument(presets="verifiers")
    task_module = importlib.import_module("verifiers.v1.task")

    class Graded(task_module.Task):  # type: ignore[name-defined,misc]
        async def score(self, trace: Any, runtime: Any = None) -> None:
            trace.rewards["graded"] = task_module.Reward(score=0.5)

    trace = task_module.Trace()
    asyncio.run(Graded(task_module.TaskData(idx=0)).score(trace))
    (verify,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert (verify.attributes[semconv.ROLLOUT_ID], verify.attributes[semconv.ROLLOUT_REWARD]) == (trace.id, 0.5)


def test_no_repeat_or_attempt_index_is_made_up(stand_in: None, instrument: Any, telemetry: Any) -> None:
    """verifiers has no repeat index (Env.slots makes identical slots): none is derived."""
    instrument(presets="verifiers")
    _episodes(*[({"idx": 0, "id": "t0", "prompt": "right"}, "ok")] * 3)
    for span in telemetry.spans(semconv.SPAN_DISPATCH):
        assert semconv.ROLLOUT_REPEAT not in span.attributes and semconv.ROLLOUT_ATTEMPT not in span.attributes


def test_without_verifiers_the_preset_costs_an_import_hook_only(instrument: Any) -> None:
    assert "verifiers" not in sys.modules
    instrument(presets="verifiers")
    assert "verifiers" not in sys.modules and "verifiers.v1.env" not in sys.modules


def test_the_engine_knows_no_verifiers_field() -> None:
    """Every verifiers name lives in frameworks/verifiers/ (its preset and its schema)."""
    package = Path(__file__).parents[1] / "gym_instrument"
    framework_names = ("verifiers.v1", "run_episode", "Task.score", "traces[", "row.data", '"idx"')
    for source in package.rglob("*.py"):
        if source.parent.name == "verifiers" and source.parent.parent.name == "frameworks":
            continue
        text = source.read_text()
        assert not [name for name in framework_names if name in text], source


def test_the_preset_is_written_in_the_declarative_form() -> None:
    """The same targets come out of the form read back from JSON (what a user could write)."""
    import json

    from gym_instrument.config.declare import parse_config
    from gym_instrument.frameworks.verifiers import preset

    assert parse_config(json.dumps(preset.PRESET)) == preset_targets("verifiers")
    assert {target.role for target in preset_targets("verifiers")} == {"dispatch", "verify"}
