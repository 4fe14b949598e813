"""Zero-code: a script with no telemetry code, run under ``opentelemetry-instrument``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gym_instrument import semconv

LOOP = '''
"""A rollout loop with no telemetry code at all."""

import asyncio


class Agent:
    async def run(self, row):
        return await Scorer().verify({"answer": row["answer"]})


class Scorer:
    async def verify(self, body):
        return {"reward": 1.0 if body["answer"] == "B" else 0.0}


def health_pass(rows):
    return [{"task_index": r["_ng_task_index"], "rollout_index": r["_ng_rollout_index"],
             "verdict": "healthy" if r["answer"] == "B" else "unhealthy",
             "findings": [] if r["answer"] == "B" else [{"check": "wrong_answer"}]} for r in rows]


async def main():
    rows = [{"task_id": f"t{t}", "_ng_task_index": t, "_ng_rollout_index": r, "answer": "B" if r == 0 else "C"}
            for t in range(2) for r in range(2)]
    rewards = [await Agent().run(row) for row in rows]
    health_pass(rows)
    print("REWARDS", [reward["reward"] for reward in rewards])

'''

TARGETS = (
    "rollout_loop:Agent.run=dispatch@nemo_gym,rollout_loop:Scorer.verify=verify@nemo_gym,rollout_loop:health_pass=health@nemo_gym"
)

MAIN = "import asyncio\n\nimport rollout_loop\n\nasyncio.run(rollout_loop.main())\n"


def run_instrumented(
    tmp_path: Path, main: str = MAIN, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    (tmp_path / "rollout_loop.py").write_text(LOOP)
    (tmp_path / "main.py").write_text(main)
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "PYTHONPATH": str(tmp_path),
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "rollout-loop",
        **env,
    }
    process = subprocess.run(
        [str(launcher), sys.executable, str(tmp_path / "main.py")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    return process, console_spans(process.stdout)


def console_objects(stdout: str) -> Iterator[dict[str, Any]]:
    """The JSON objects the console exporters printed, one after another, in order."""
    decoder, index = json.JSONDecoder(), stdout.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(stdout, index)
        except json.JSONDecodeError:
            index = stdout.find("{", index + 1)
            continue
        if isinstance(value, dict):
            yield value
        index = stdout.find("{", end)


def console_spans(stdout: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed."""
    return [value for value in console_objects(stdout) if "context" in value]


def test_three_span_kinds_with_no_code(tmp_path: Path) -> None:
    process, spans = run_instrumented(tmp_path, OTEL_PYTHON_GYM_TARGETS=TARGETS)
    assert process.returncode == 0, process.stderr
    assert "REWARDS [1.0, 0.0, 1.0, 0.0]" in process.stdout
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    assert len(by_name[semconv.SPAN_DISPATCH]) == 4
    assert len(by_name[semconv.SPAN_VERIFY]) == 4
    assert len(by_name[semconv.SPAN_HEALTH]) == 4
    dispatch_ids = {span["context"]["span_id"]: span for span in by_name[semconv.SPAN_DISPATCH]}
    for verify in by_name[semconv.SPAN_VERIFY]:
        parent = dispatch_ids[verify["parent_id"]]
        assert verify["attributes"][semconv.ROLLOUT_ID] == parent["attributes"][semconv.ROLLOUT_ID]
    for health in by_name[semconv.SPAN_HEALTH]:
        parent = dispatch_ids[health["parent_id"]]
        assert health["context"]["trace_id"] == parent["context"]["trace_id"]
        healthy = parent["attributes"][semconv.ROLLOUT_REPEAT] == 0
        assert health["attributes"][semconv.HEALTH_VERDICT] == ("healthy" if healthy else "unhealthy")
        assert health["attributes"][semconv.HEALTH_CHECKS] == ([] if healthy else ["wrong_answer"])


def test_disabled_instrumentations_turns_it_off(tmp_path: Path) -> None:
    process, spans = run_instrumented(tmp_path, OTEL_PYTHON_GYM_TARGETS=TARGETS, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="gym")
    assert process.returncode == 0, process.stderr
    assert "REWARDS [1.0, 0.0, 1.0, 0.0]" in process.stdout
    assert [span for span in spans if span["name"].startswith("gym.")] == []


def test_bad_target_is_logged_by_name_and_the_app_still_runs(tmp_path: Path) -> None:
    process, spans = run_instrumented(
        tmp_path,
        OTEL_PYTHON_GYM_TARGETS="rollout_loop:Agent.run=judge,no_such_package.mod:f=verify@nemo_gym," + TARGETS,
        OTEL_PYTHON_GYM_LINK_CAPACITY="lots",
    )
    assert process.returncode == 0, process.stderr
    assert "REWARDS [1.0, 0.0, 1.0, 0.0]" in process.stdout
    assert "OTEL_PYTHON_GYM_TARGETS" in process.stderr and "unknown role 'judge'" in process.stderr
    assert "no module named 'no_such_package'" in process.stderr
    assert "OTEL_PYTHON_GYM_LINK_CAPACITY" in process.stderr
    assert len([span for span in spans if span["name"] == semconv.SPAN_DISPATCH]) == 4  # the good targets still apply


def test_presets_none_and_the_nemo_gym_preset_absent(tmp_path: Path) -> None:
    """The default preset arms NeMo Gym targets; without NeMo Gym installed that is silent."""
    process, spans = run_instrumented(tmp_path, OTEL_PYTHON_GYM_TARGETS=TARGETS, OTEL_PYTHON_GYM_PRESETS="nemo_gym")
    assert process.returncode == 0, process.stderr
    assert "gym_instrument" not in process.stderr
    assert len([span for span in spans if span["name"] == semconv.SPAN_VERIFY]) == 4


def test_a_job_started_with_traceparent_links_every_rollout(tmp_path: Path) -> None:
    """A shell script or CI job that opened a span starts the collector with TRACEPARENT set."""
    job_trace, job_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    process, spans = run_instrumented(tmp_path, OTEL_PYTHON_GYM_TARGETS=TARGETS, TRACEPARENT=f"00-{job_trace}-{job_span}-01")
    assert process.returncode == 0, process.stderr
    dispatches = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    assert len(dispatches) == 4
    for span in dispatches:
        assert span["parent_id"] is None
        assert [(link["context"]["trace_id"], link["context"]["span_id"]) for link in span["links"]] == [
            (f"0x{job_trace}", f"0x{job_span}")
        ]
    assert len({span["context"]["trace_id"] for span in dispatches}) == 4


# A script that instruments its own functions, as it would without the launcher.
SCRIPT_INSTRUMENTS = """
import asyncio

import rollout_loop
from gym_instrument import GymInstrumentor


def warm_up(row):
    return row["answer"]


def answer_of(call):
    return {"loop.answer": call.row["answer"]}


GymInstrumentor().instrument(
    targets=["__main__:warm_up=dispatch@nemo_gym", "rollout_loop:Agent.run=dispatch@nemo_gym"],
    extractors={"dispatch": [answer_of]},
)
warm_up({"task_id": "warm", "_ng_task_index": 9, "_ng_rollout_index": 0, "answer": "A"})
asyncio.run(rollout_loop.main())
"""


def test_a_script_instrument_call_under_the_launcher_adds_its_targets_and_extractors(tmp_path: Path) -> None:
    """The launcher instrumented at startup (verify and health from the environment); the script's
    own instrument() adds its dispatch targets and extractor instead of being dropped."""
    process, spans = run_instrumented(
        tmp_path,
        SCRIPT_INSTRUMENTS,
        OTEL_PYTHON_GYM_TARGETS="rollout_loop:Scorer.verify=verify@nemo_gym,rollout_loop:health_pass=health@nemo_gym",
        OTEL_PYTHON_GYM_PRESETS="none",
    )
    assert process.returncode == 0, process.stderr
    assert "REWARDS [1.0, 0.0, 1.0, 0.0]" in process.stdout
    assert "already instrumented" not in process.stderr
    dispatches = {span["context"]["span_id"]: span for span in spans if span["name"] == semconv.SPAN_DISPATCH}
    assert sorted((span["attributes"][semconv.TASK_ID], span["attributes"]["loop.answer"]) for span in dispatches.values()) == [
        ("t0", "B"),
        ("t0", "C"),
        ("t1", "B"),
        ("t1", "C"),
        ("warm", "A"),
    ]
    # The launcher's targets run under the script's dispatch spans: one trace per rollout.
    verifies = [span for span in spans if span["name"] == semconv.SPAN_VERIFY]
    health = [span for span in spans if span["name"] == semconv.SPAN_HEALTH]
    assert len(verifies) == len(health) == 4
    for span in verifies + health:
        parent = dispatches[span["parent_id"]]
        assert span["attributes"][semconv.ROLLOUT_ID] == parent["attributes"][semconv.ROLLOUT_ID]


# The framework of docs/your-own-framework.md's "The declarative form", with no telemetry code.
MY_RL = """
import asyncio
from dataclasses import dataclass, field


@dataclass
class Problem:
    position: int
    id: str | None = None
    title: str | None = None


@dataclass
class Failure:
    kind: str


@dataclass
class Attempt:
    uid: str
    ok: bool = True
    failures: list = field(default_factory=list)
    points: dict = field(default_factory=dict)

    @property
    def score(self):
        return sum(self.points.values()) if self.points else None


class Grader:
    async def grade(self, attempt):
        attempt.points["correct"] = 1.0 if attempt.uid.endswith("0") else 0.0


class Runner:
    async def rollout(self, problem, *, attempt_id):
        attempt = Attempt(attempt_id)
        if problem.title == "flaky":
            attempt.ok = False
            attempt.failures.append(Failure("ModelTimeout"))
            return attempt
        await Grader().grade(attempt)
        return attempt


async def main():
    problems = [Problem(0, id="p-0"), Problem(1, title="titled"), Problem(2), Problem(3, title="flaky")]
    attempts = [await Runner().rollout(p, attempt_id=f"{p.position}-a{r}") for p in problems for r in range(2)]
    print("OK", [a.ok for a in attempts])
"""

MY_RL_MAIN = "import asyncio\n\nimport my_rl.episodes\n\nasyncio.run(my_rl.episodes.main())\n"


def readme_own_framework_toml() -> str:
    """The TOML block of docs/your-own-framework.md's "The declarative form", as a reader would copy it."""
    page = (Path(__file__).parents[1] / "docs" / "your-own-framework.md").read_text()
    section = page.split("## The declarative form", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("given_as", ["text", "file"])
def test_your_own_framework_from_the_readme_by_environment_alone(tmp_path: Path, given_as: str) -> None:
    """The docs' configuration, by environment variables only: no Python of the user's in the process."""
    package = tmp_path / "my_rl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "episodes.py").write_text(MY_RL)
    toml = readme_own_framework_toml()
    if given_as == "file":
        (tmp_path / "gym.toml").write_text(toml)
        config = str(tmp_path / "gym.toml")
    else:
        config = toml
    process, spans = run_instrumented(tmp_path, MY_RL_MAIN, OTEL_PYTHON_GYM_CONFIG=config)
    assert process.returncode == 0, process.stderr
    assert "gym_instrument" not in process.stderr
    assert "OK [True, True, True, True, True, True, False, False]" in process.stdout
    dispatches = {span["context"]["span_id"]: span for span in spans if span["name"] == semconv.SPAN_DISPATCH}
    assert len(dispatches) == 8
    by_rollout = {span["attributes"][semconv.ROLLOUT_ID]: span for span in dispatches.values()}
    assert {
        rid: (span["attributes"].get(semconv.TASK_ID), span["attributes"][semconv.TASK_INDEX]) for rid, span in by_rollout.items()
    } == {
        "0-a0": ("p-0", 0),
        "0-a1": ("p-0", 0),
        "1-a0": ("titled", 1),
        "1-a1": ("titled", 1),
        "2-a0": (None, 2),
        "2-a1": (None, 2),
        "3-a0": ("flaky", 3),
        "3-a1": ("flaky", 3),
    }
    for rollout_id, span in by_rollout.items():
        assert span["attributes"][semconv.FRAMEWORK] == "my_rl"
        failed = rollout_id.startswith("3-")
        assert span["status"]["status_code"] == ("ERROR" if failed else "UNSET")
        assert span["attributes"].get(semconv.ERROR_TYPE) == ("ModelTimeout" if failed else None)
    verifies = [span for span in spans if span["name"] == semconv.SPAN_VERIFY]
    assert len(verifies) == 6
    for verify in verifies:
        parent = dispatches[verify["parent_id"]]
        # The attempt id came in as baggage: the verify needs no rule of its own for it.
        assert verify["attributes"][semconv.ROLLOUT_ID] == parent["attributes"][semconv.ROLLOUT_ID]
        expected = 1.0 if verify["attributes"][semconv.ROLLOUT_ID].endswith("0") else 0.0
        assert verify["attributes"][semconv.ROLLOUT_REWARD] == expected


def test_a_bad_config_rule_is_logged_by_variable_target_and_key_and_the_rest_applies(tmp_path: Path) -> None:
    package = tmp_path / "my_rl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "episodes.py").write_text(MY_RL)
    toml = readme_own_framework_toml().replace('"row.score"', '"score"')
    process, spans = run_instrumented(tmp_path, MY_RL_MAIN, OTEL_PYTHON_GYM_CONFIG=toml)
    assert process.returncode == 0, process.stderr
    assert "OTEL_PYTHON_GYM_CONFIG" in process.stderr
    assert "target 'my_rl.episodes:Grader.grade': end: 'reward': path 'score'" in process.stderr
    assert "this rule is dropped" in process.stderr
    assert len([span for span in spans if span["name"] == semconv.SPAN_DISPATCH]) == 8  # the good target applies
    # The target with the bad rule still applies, without that rule: verify spans, no reward.
    verifies = [span for span in spans if span["name"] == semconv.SPAN_VERIFY]
    assert verifies and all(semconv.ROLLOUT_REWARD not in span["attributes"] for span in verifies)


def console_metric_points(stdout: str) -> dict[str, dict[tuple[tuple[str, Any], ...], Any]]:
    """The last value of every metric point the console metric exporter printed, by metric name."""
    points: dict[str, dict[tuple[tuple[str, Any], ...], Any]] = {}
    for value in console_objects(stdout):
        for resource in value.get("resource_metrics", ()):
            for scope in resource["scope_metrics"]:
                for metric in scope["metrics"]:
                    for point in metric["data"]["data_points"]:
                        points.setdefault(metric["name"], {})[tuple(sorted(point["attributes"].items()))] = point["value"]
    return points


def test_metrics_reach_the_launchers_meter_provider(tmp_path: Path) -> None:
    process, _ = run_instrumented(
        tmp_path, OTEL_PYTHON_GYM_TARGETS=TARGETS, OTEL_METRICS_EXPORTER="console", OTEL_TRACES_EXPORTER="none"
    )
    assert process.returncode == 0, process.stderr
    points = console_metric_points(process.stdout)
    assert points[semconv.METRIC_DISPATCHES] == {(("outcome", "ok"),): 4}
    assert points[semconv.METRIC_REWARDED] == {(): 4}
    assert points[semconv.METRIC_VERDICTS] == {(("verdict", "healthy"),): 2, (("verdict", "unhealthy"),): 2}
