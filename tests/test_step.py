"""The trainer's step and policy version on every dispatch of the rollouts it launched: from the W3C
baggage it sets (in this process, in another one over real HTTP, from ``BAGGAGE`` in the
environment) or from the ``train_step`` setting. Real SDK, real propagators, real processes."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, context

from gym_instrument import semconv
from tests.otlp_receiver import OtlpReceiver
from tests.test_crossprocess import LAUNCHER, ROOT, environment, free_port, wait_until_listening
from tests.test_zero_code import TARGETS, run_instrumented

ROW = {"task_id": "t0", "_ng_task_index": 0, "_ng_rollout_index": 0}


@contextmanager
def trainer_baggage(**entries: str) -> Iterator[None]:
    """What a trainer does around one step's rollouts: its baggage entries current."""
    current = context.get_current()
    for name, value in entries.items():
        current = baggage.set_baggage(name, value, current)
    token = context.attach(current)
    try:
        yield
    finally:
        context.detach(token)


STEP_3 = {semconv.BAGGAGE_TRAIN_STEP: "3", semconv.BAGGAGE_POLICY_VERSION: "ckpt-3"}


@pytest.fixture
def loop(make_module: Any, instrument: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sample pipeline's ``send_row`` (dispatch) and ``score`` (verify), instrumented with ``settings``
    in an environment of ``environ`` (no BAGGAGE or train step setting of the test runner's own)."""

    def build(environ: dict[str, str] | None = None, **settings: Any) -> Any:
        for name in ("BAGGAGE", "TRACEPARENT", "OTEL_PYTHON_GYM_TRAIN_STEP"):
            monkeypatch.delenv(name, raising=False)
        for name, value in (environ or {}).items():
            monkeypatch.setenv(name, value)
        name = make_module()
        instrument(targets=[f"{name}:send_row=dispatch@nemo_gym", f"{name}:score=verify@nemo_gym"], **settings)
        return importlib.import_module(name)

    return build


def steps_of(telemetry: Any) -> list[tuple[Any, Any]]:
    """(step, policy version) of each dispatch span, in the order they ended."""
    return [
        (span.attributes.get(semconv.TRAIN_STEP), span.attributes.get(semconv.POLICY_VERSION))
        for span in telemetry.spans(semconv.SPAN_DISPATCH)
    ]


def test_the_step_in_the_trainers_baggage_is_on_each_dispatch(loop: Any, telemetry: Any) -> None:
    module = loop()
    with trainer_baggage(**STEP_3):
        assert module.send_row(dict(ROW)) == {"echo": ROW}
    with trainer_baggage(**{semconv.BAGGAGE_TRAIN_STEP: "3", semconv.BAGGAGE_POLICY_VERSION: "ckpt-3b"}):
        module.send_row(dict(ROW))  # the same step, from another policy (an asynchronous trainer's)
    with trainer_baggage(**{semconv.BAGGAGE_TRAIN_STEP: "4"}):
        module.send_row(dict(ROW))
    with trainer_baggage(**{semconv.BAGGAGE_POLICY_VERSION: "ckpt-5"}):
        module.send_row(dict(ROW))
    assert steps_of(telemetry) == [(3, "ckpt-3"), (3, "ckpt-3b"), (4, None), (None, "ckpt-5")]
    assert type(telemetry.spans(semconv.SPAN_DISPATCH)[0].attributes[semconv.TRAIN_STEP]) is int


def test_a_dispatch_with_no_step_anywhere_gets_nothing_new(loop: Any, telemetry: Any) -> None:
    module = loop()
    module.send_row(dict(ROW))
    with trainer_baggage(**{"other.entry": "x"}):
        module.send_row(dict(ROW))
    for span in telemetry.spans(semconv.SPAN_DISPATCH):
        assert set(span.attributes) == {semconv.TASK_ID, semconv.TASK_INDEX, semconv.ROLLOUT_REPEAT, semconv.ROLLOUT_ID}


def test_concurrent_rollouts_of_two_steps_each_carry_their_own(loop: Any, telemetry: Any, make_module: Any) -> None:
    module = loop()

    async def step(number: int) -> None:
        with trainer_baggage(**{semconv.BAGGAGE_TRAIN_STEP: str(number)}):
            for repeat in range(3):
                await asyncio.sleep(0)  # the other step's rollouts run in between
                module.send_row({"task_id": f"s{number}", "_ng_task_index": number, "_ng_rollout_index": repeat})

    async def both() -> None:
        await asyncio.gather(step(1), step(2))

    asyncio.run(both())
    spans = telemetry.spans(semconv.SPAN_DISPATCH)
    assert len(spans) == 6
    assert all(span.attributes[semconv.TRAIN_STEP] == int(str(span.attributes[semconv.TASK_ID])[1:]) for span in spans)


def test_only_dispatches_carry_it_and_never_a_metric_point(loop: Any, telemetry: Any) -> None:
    module = loop()
    with trainer_baggage(**STEP_3):
        module.send_row(dict(ROW))
        module.score({"result": {"reward": 1.0}})
    assert steps_of(telemetry) == [(3, "ckpt-3")]
    (verify,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert semconv.TRAIN_STEP not in verify.attributes
    points = [point for name in (semconv.METRIC_DISPATCHES, semconv.METRIC_REWARDED) for point in telemetry.metric_points(name)]
    assert points and all(
        semconv.TRAIN_STEP not in point.attributes and semconv.POLICY_VERSION not in point.attributes for point in points
    )


def test_a_decorated_dispatch_and_one_whose_defaults_are_replaced_carry_it_too(
    make_module: Any, instrument: Any, telemetry: Any
) -> None:
    import gym_instrument

    name = make_module()
    instrument(
        targets=[f"{name}:send_row=dispatch"],
        extractors={"dispatch": [lambda call: {"test.mine": 1}]},
        replace_default_extractors=["dispatch"],
    )
    module = importlib.import_module(name)

    @gym_instrument.dispatch
    def run_rollout(row: dict[str, Any]) -> str:
        return "done"

    with trainer_baggage(**STEP_3):
        module.send_row(dict(ROW))
        assert run_rollout(dict(ROW)) == "done"
    replaced, decorated = telemetry.spans(semconv.SPAN_DISPATCH)
    assert replaced.attributes == {"test.mine": 1, semconv.TRAIN_STEP: 3, semconv.POLICY_VERSION: "ckpt-3"}
    assert (decorated.attributes[semconv.TRAIN_STEP], decorated.attributes[semconv.POLICY_VERSION]) == (3, "ckpt-3")


def test_baggage_in_the_environment_reaches_every_dispatch_and_the_context_wins(loop: Any, telemetry: Any) -> None:
    # No TRACEPARENT: BAGGAGE is read on its own.
    module = loop({"BAGGAGE": "nemo.gym.train.step=7,nemo.gym.policy.version=ckpt%2D7,ci.job=nightly"})
    module.send_row(dict(ROW))
    with trainer_baggage(**STEP_3):
        module.send_row(dict(ROW))
    assert steps_of(telemetry) == [(7, "ckpt-7"), (3, "ckpt-3")]


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_fixed_step_setting_is_on_every_dispatch_of_the_process(loop: Any, telemetry: Any, how: str) -> None:
    if how == "argument":
        module = loop(train_step="12:policy:v2")
    else:
        module = loop({"OTEL_PYTHON_GYM_TRAIN_STEP": " 12:policy:v2 ", "BAGGAGE": "nemo.gym.train.step=7"})
    module.send_row(dict(ROW))
    with trainer_baggage(**STEP_3):  # the setting is the declared source: the baggage is not read
        module.send_row(dict(ROW))
    assert steps_of(telemetry) == [(12, "policy:v2"), (12, "policy:v2")]


def test_a_fixed_step_without_a_policy_version(loop: Any, telemetry: Any) -> None:
    module = loop(train_step=5)
    module.send_row(dict(ROW))
    assert steps_of(telemetry) == [(5, None)]


def test_off_reads_no_step_at_all(loop: Any, telemetry: Any) -> None:
    module = loop({"BAGGAGE": "nemo.gym.train.step=7"}, train_step="off")
    with trainer_baggage(**STEP_3):
        module.send_row(dict(ROW))
    assert steps_of(telemetry) == [(None, None)]


def test_a_later_instrument_call_changes_the_source(loop: Any, instrument: Any, telemetry: Any) -> None:
    module = loop(train_step="off")
    instrument(train_step="baggage")  # a script under the launcher
    with trainer_baggage(**STEP_3):
        module.send_row(dict(ROW))
    assert steps_of(telemetry) == [(3, "ckpt-3")]


@pytest.mark.parametrize("value", ["-1", "three", "1.5", "4:", True, 2**63, "9" * 5000])
def test_a_bad_setting_in_code_raises(instrument: Any, value: Any) -> None:
    with pytest.raises(ValueError, match="train step"):
        instrument(train_step=value)


def test_a_bad_setting_in_the_environment_is_logged_and_the_default_applies(
    loop: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        module = loop({"OTEL_PYTHON_GYM_TRAIN_STEP": "latest"})
    assert "OTEL_PYTHON_GYM_TRAIN_STEP" in caplog.text
    with trainer_baggage(**STEP_3):
        module.send_row(dict(ROW))
    assert steps_of(telemetry) == [(3, "ckpt-3")]


@pytest.mark.parametrize("step", ["step-3", "9" * 5000, "٣", "9223372036854775808"])
def test_a_step_that_is_no_whole_number_is_logged_once_and_the_dispatch_still_traced(
    loop: Any, telemetry: Any, caplog: pytest.LogCaptureFixture, step: str
) -> None:
    module = loop()
    with (
        caplog.at_level(logging.WARNING, logger="gym_instrument"),
        trainer_baggage(**{semconv.BAGGAGE_TRAIN_STEP: step, semconv.BAGGAGE_POLICY_VERSION: "ckpt-3"}),
    ):
        results = [module.send_row(dict(ROW)) for _ in range(3)]
    assert results == [{"echo": ROW}] * 3
    assert steps_of(telemetry) == [(None, "ckpt-3")] * 3
    # The rest of the span as without a step (the rollout still named), and one warning.
    assert all(span.attributes[semconv.ROLLOUT_ID] == "0-0" for span in telemetry.spans(semconv.SPAN_DISPATCH))
    assert caplog.text.count(f"nemo.gym.train.step={step[:64]!r} is not a whole number") == 1


# -- across processes -------------------------------------------------------------------------------

TRAINER = "tests.crossprocess.trainer"
STEPS, ROWS = 3, 2


@pytest.mark.parametrize("http", ["contrib", "own"])
def test_the_trainers_step_reaches_dispatches_in_the_rollout_server(tmp_path: Path, http: str) -> None:
    """The trainer sets the step in baggage and asks a rollout server over HTTP on 127.0.0.1 for the
    step's rollouts; the server's dispatches carry it (contrib's aiohttp and FastAPI instrumentations
    carry the baggage, or with them off the package's own ``inject`` and uvicorn ``receive``)."""
    with OtlpReceiver() as receiver:
        port = free_port()
        log = tmp_path / "server.log"
        command = [LAUNCHER, sys.executable, "-m", "uvicorn", f"{TRAINER}:rollout_app", "--factory"]
        server_env = environment(receiver, "rollouts", f"{TRAINER}:run_rollout=dispatch", "true", http)
        with log.open("wb") as out:
            server = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(port)],
                env=server_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
            )
        try:
            wait_until_listening(port, server, log)
            trainer = subprocess.run(
                [LAUNCHER, sys.executable, "-m", TRAINER, f"http://127.0.0.1:{port}", str(STEPS), str(ROWS)],
                env=environment(receiver, "trainer", "tests.crossprocess.services:request=inject@nemo_gym", "true", http),
                capture_output=True,
                text=True,
                timeout=120,
                cwd=ROOT,
            )
            assert trainer.returncode == 0, trainer.stderr
            assert len(json.loads(trainer.stdout.strip().splitlines()[-1])) == STEPS + 1
            spans = receiver.wait_for(
                lambda spans: sum(span["name"] == semconv.SPAN_DISPATCH for span in spans) >= (STEPS + 1) * ROWS,
                timeout=60,
                what=f"{(STEPS + 1) * ROWS} dispatch spans",
            )
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    dispatches = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    assert {span["service"] for span in dispatches} == {"rollouts"}
    said = sorted(
        (
            span["attributes"][semconv.TASK_ID],
            span["attributes"].get(semconv.TRAIN_STEP),
            span["attributes"].get(semconv.POLICY_VERSION),
        )
        for span in dispatches
    )
    expected = [(f"s{step}-t{row}", step, f"ckpt-{step}") for step in range(STEPS) for row in range(ROWS)]
    expected += [(f"warmup-t{row}", None, None) for row in range(ROWS)]  # sent outside every step
    assert said == sorted(expected, key=lambda item: item[0])


def test_baggage_in_the_environment_of_a_zero_code_process_reaches_its_dispatches(tmp_path: Path) -> None:
    process, spans = run_instrumented(
        tmp_path, OTEL_PYTHON_GYM_TARGETS=TARGETS, BAGGAGE="nemo.gym.train.step=42,nemo.gym.policy.version=ckpt-42"
    )
    assert process.returncode == 0, process.stderr
    dispatches = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    assert len(dispatches) == 4
    assert all(span["attributes"][semconv.TRAIN_STEP] == 42 for span in dispatches)
    assert all(span["attributes"][semconv.POLICY_VERSION] == "ckpt-42" for span in dispatches)
    assert not any(semconv.TRAIN_STEP in span["attributes"] for span in spans if span["name"] != semconv.SPAN_DISPATCH)


def test_the_setting_of_a_zero_code_process_reaches_its_dispatches(tmp_path: Path) -> None:
    process, spans = run_instrumented(tmp_path, OTEL_PYTHON_GYM_TARGETS=TARGETS, OTEL_PYTHON_GYM_TRAIN_STEP="9:ckpt-9")
    assert process.returncode == 0, process.stderr
    dispatches = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    assert [(span["attributes"][semconv.TRAIN_STEP], span["attributes"][semconv.POLICY_VERSION]) for span in dispatches] == [
        (9, "ckpt-9")
    ] * 4


# -- report and compare ---------------------------------------------------------------------------------

TRAINING_LOOP = """
def send_row(row):
    if row.get("fail"):
        raise TimeoutError("the environment did not answer")
    return score({"reward": row["reward"]})


def score(result):
    return result
"""


def trained(make_module: Any, instrument: Any, telemetry: Any, steps: int, path: Path, with_steps: bool = True) -> Path:
    """A trainer's run: ``steps`` steps of 4 rollouts each, traced in this process, its spans written to ``path``
    as OTLP/JSON lines. Step s: rollouts 0..s have reward 1.0, the others 0.0; in step 1 the last rollout's
    dispatch fails (an infrastructure failure)."""
    import io

    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    name = make_module(TRAINING_LOOP)
    instrument(targets=[f"{name}:send_row=dispatch", f"{name}:score=verify"])
    module = importlib.import_module(name)
    for step in range(steps):
        entries = {semconv.BAGGAGE_TRAIN_STEP: str(step), semconv.BAGGAGE_POLICY_VERSION: f"ckpt-{step}"} if with_steps else {}
        with trainer_baggage(**entries):
            for repeat in range(4):
                row = {"task_id": "t", "repeat": repeat, "rollout_id": f"s{step}-r{repeat}", "reward": float(repeat <= step)}
                try:
                    module.send_row({**row, "fail": step == 1 and repeat == 3})
                except TimeoutError:
                    pass
    buffer = io.StringIO()
    FileSpanExporter(stream=buffer).export(telemetry.spans())
    path.write_text(buffer.getvalue())
    telemetry.clear()
    return path


def test_report_shows_reward_success_and_infra_failures_per_step(
    make_module: Any, instrument: Any, telemetry: Any, tmp_path: Path
) -> None:
    from tests.test_report_differential import run_main

    spans = trained(make_module, instrument, telemetry, 3, tmp_path / "spans.jsonl")
    code, printed = run_main(["report", str(spans), "--no-html", "--format", "json", "--max-infra-failures", "50%"])
    assert code == 0
    steps = {step["step"]: step for step in json.loads(printed)["steps"]}
    assert set(steps) == {0, 1, 2}
    # step 0: 1 of 4 rewarded; step 1: 2 of 3 scored rewarded, 1 failed dispatch; step 2: 3 of 4.
    assert [(steps[s]["rollouts"], steps[s]["scored"], steps[s]["successes"], steps[s]["infra_failures"]) for s in range(3)] == [
        (4, 4, 1, 0),
        (4, 3, 2, 1),
        (4, 4, 3, 0),
    ]
    assert [steps[s]["mean_reward"] for s in range(3)] == [0.25, 2 / 3, 0.75]
    assert [steps[s]["policy_versions"] for s in range(3)] == [["ckpt-0"], ["ckpt-1"], ["ckpt-2"]]
    code, printed = run_main(["report", str(spans), "--html", str(tmp_path / "report.html"), "--max-infra-failures", "50%"])
    lines = printed.splitlines()
    head = lines.index("per training step (nemo.gym.train.step of each rollout's dispatch; 3 steps):")
    assert lines[head + 1].split() == [
        "step",
        "policy",
        "version",
        "rollouts",
        "infra",
        "failures",
        "scored",
        "mean",
        "reward",
        "success",
        "tokens",
        "/",
        "rollout",
    ]
    assert [line.split() for line in lines[head + 3 : head + 6]] == [
        ["0", "ckpt-0", "4", "0", "(0%)", "4", "0.25", "25%", "-"],
        ["1", "ckpt-1", "4", "1", "(25%)", "3", "0.67", "67%", "-"],
        ["2", "ckpt-2", "4", "0", "(0%)", "4", "0.75", "75%", "-"],
    ]
    page = (tmp_path / "report.html").read_text()
    assert "<h2 id='steps'>Steps</h2>" in page and 'id="steps-table"' in page and "<polyline" in page


def test_a_run_without_steps_shows_nothing_new(make_module: Any, instrument: Any, telemetry: Any, tmp_path: Path) -> None:
    from tests.test_report_differential import run_main

    spans = trained(make_module, instrument, telemetry, 2, tmp_path / "spans.jsonl", with_steps=False)
    code, printed = run_main(["report", str(spans), "--no-html", "--format", "json", "--max-infra-failures", "50%"])
    assert "steps" not in json.loads(printed)
    code, printed = run_main(["report", str(spans), "--html", str(tmp_path / "report.html"), "--max-infra-failures", "50%"])
    assert "training step" not in printed
    page = (tmp_path / "report.html").read_text()
    assert "id='steps'" not in page and "steps-table" not in page and ">step<" not in page
    code, printed = run_main(["compare", str(spans), str(spans), "--max-infra-failures", "50%"])
    assert code == 0 and "training step" not in printed


def test_compare_shows_each_step_of_both_runs(make_module: Any, instrument: Any, telemetry: Any, tmp_path: Path) -> None:
    from tests.test_report_differential import run_main

    a = trained(make_module, instrument, telemetry, 2, tmp_path / "a.jsonl")
    b = trained(make_module, instrument, telemetry, 3, tmp_path / "b.jsonl")  # a second run, its own targets
    code, printed = run_main(["compare", str(a), str(b), "--format", "json", "--max-infra-failures", "50%"])
    steps = {step["step"]: step["measures"] for step in json.loads(printed)["steps"]}
    assert {step: (m["mean_reward"]["a"], m["mean_reward"]["b"]) for step, m in steps.items()} == {
        0: (0.25, 0.25),
        1: (2 / 3, 2 / 3),
        2: (None, 0.75),
    }
    assert steps[1]["infra_share"] == {"a": 0.25, "b": 0.25, "diff": 0.0}
    code, printed = run_main(["compare", str(a), str(b), "--html", str(tmp_path / "compare.html"), "--max-infra-failures", "50%"])
    assert code == 0
    lines = printed.splitlines()
    head = lines.index("per training step, A -> B (3 steps):")
    assert lines[head + 5].split()[:6] == ["2", "-", "->", "4", "-", "->"]
    assert 'id="compare-steps"' in (tmp_path / "compare.html").read_text()


def test_a_long_run_shows_evenly_spaced_steps_and_says_so(
    make_module: Any, instrument: Any, telemetry: Any, tmp_path: Path
) -> None:
    from tests.test_report_differential import run_main

    spans = trained(make_module, instrument, telemetry, 40, tmp_path / "spans.jsonl")
    code, printed = run_main(["report", str(spans), "--no-html", "--max-infra-failures", "50%"])
    assert code == 0
    lines = printed.splitlines()
    head = lines.index(
        "per training step (nemo.gym.train.step of each rollout's dispatch; 40 steps, 30 evenly spaced shown, "
        "all of them in the HTML page and in --format json):"
    )
    rows = [line.split()[0] for line in lines[head + 3 : head + 33]]
    assert len(set(rows)) == 30 and rows[0] == "0" and rows[-1] == "39"  # the first and the last among them
    code, printed = run_main(["compare", str(spans), str(spans), "--max-infra-failures", "50%"])
    assert code == 0
    assert (
        "per training step, A -> B (40 steps, 30 evenly spaced shown, all of them in the HTML page and in --format json):"
        in printed.splitlines()
    )
