"""``gym-instrument config check FILE`` (tools/config_check.py): per target, found or not and what
each rule reads; every problem named, what would silently do nothing included; no traceback."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym_instrument import semconv
from gym_instrument.role import ROLES
from gym_instrument.tools.cli import main

CONFIG = """
[[targets]]
path = "email.message:Message.get"
role = "dispatch"
row = "name"
schema = "generic"
framework = "my_loop"
start = { "nemo.gym.task.id" = "row.id", "nemo.gym.rollout.repeat" = { path = "arg.epoch", offset = -1 } }
failure = { when = "result.error" }

[[targets]]
path = "email.message:Message.set_payload"
role = "verify"
end = { "nemo.gym.rollout.reward" = { path = "row.scores.*.value", map = { C = 1.0, I = 0.0 } }, "my.bad" = "score" }

[[targets]]
path = "emial.message:Message.get"
role = "verify"
"""


def test_it_says_what_each_target_and_rule_will_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gym.toml"
    config.write_text(CONFIG)
    assert main(["config", "check", str(config)]) == 2
    out, err = capsys.readouterr()
    assert "target email.message:Message.get (dispatch, framework my_loop): found" in out
    assert "  start nemo.gym.rollout.repeat: arg.epoch, -1" in out
    assert "  failure: when result.error is present (not None); error.type from none (else _OTHER)" in out
    assert "  end nemo.gym.rollout.reward: row.scores.*.value, mapped by {'C': 1.0, 'I': 0.0}" in out
    # A bad rule is named with its target and key; the target keeps its other rules.
    assert "problem: target 'email.message:Message.set_payload': end: 'my.bad': path 'score' must start with" in out
    assert "no module named 'emial'; did you mean 'email'?" in out
    # Message.get(name, failobj=None) has no epoch: the rule would never read anything.
    assert "path 'arg.epoch': Message.get() has no argument 'epoch' (it has name, failobj); it would always be absent" in out
    assert err.strip() == "3 problem(s)"


def test_a_good_configuration_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gym.json"
    config.write_text('{"targets": [{"path": "email.message:Message.get", "role": "verify", "end": {"a.b": "result.x"}}]}')
    assert main(["config", "check", str(config)]) == 0
    assert capsys.readouterr().out.strip().endswith("no problems")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("missing.toml", "cannot read"),
        ("[[targets]\nx", "cannot parse"),
        ("[[targets]]\nrole = 'dispatch'\n", "target without a path: path is required"),
        ("[other]\n", "unknown key 'other'"),
    ],
)
def test_a_broken_file_is_a_clear_message(source: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", source]) == 2
    out, _ = capsys.readouterr()
    assert message in out and "Traceback" not in out


LOOP = """
def run_episode(task, repeat):
    return {"reward": 1.0}


def judge_episodes(results):
    return []
"""

WHAT_DOES_NOTHING = """
[[targets]]
path = "{module}:run_episod"
role = "dispatch"
schema = "nemo_gym"

[[targets]]
path = "{module}:run_episode"
role = "dispatch"
row = "job"
schema = "generic"
start = {{ "nemo.gym.task.id" = "row.task_id", "nemo.gym.rollout.id" = {{ template = "{{task_id}}-{{repeat}}" }} }}

[[targets]]
path = "{module}:judge_episodes"
role = "health"
end = {{ "my.count" = "result.count" }}
extractors = ["json:dumps"]

[[targets]]
path = "__main__:run_episode"
role = "dispatch"
"""


def test_it_imports_each_target_and_names_what_would_do_nothing(
    make_module: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    module = make_module(LOOP)
    config = tmp_path / "gym.toml"
    config.write_text(WHAT_DOES_NOTHING.format(module=module))
    assert main(["config", "check", str(config)]) == 2
    out, err = capsys.readouterr()
    assert f"module '{module}' has no attribute 'run_episod'; did you mean 'run_episode'?" in out
    assert "row: run_episode() has no argument 'job' (it has task, repeat)" in out
    assert "template '{task_id}-{repeat}' names {repeat}, which no rule of this table reads" in out
    assert "end: the health role makes no span of its own, so these rules do nothing; say what its result is with verdicts" in out
    assert "  extractor json:dumps" in out  # extractors by their import path
    assert "a script's own functions (module __main__) are defined after instrumentation starts" in out
    # What only the rows can say is a note under its target: the generic dispatches (the second, and
    # __main__'s, which names no schema), not NeMo Gym's, whose schema reads its own row fields.
    note = "  note: no start rule names its rollout: the generic schema names it from its row's rollout_id"
    assert [line.split(" (")[0] for line in _blocks_with(out, note)] == [
        f"target {module}:run_episode",
        "target __main__:run_episode",
    ]
    assert err.strip() == "5 problem(s)" and "Traceback" not in out


def _blocks_with(out: str, text: str) -> list[str]:
    """The first line of each target's block of lines that has a line starting with ``text``."""
    blocks: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("target "):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return [block[0] for block in blocks if any(line.startswith(text) for line in block[1:])]


# -- the real command, as a user runs it ------------------------------------------------------------

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"

# A loop whose rows carry the generic schema's fields (task_index, repeat), and whose health function
# returns the generic schema's records: no start rule is needed to name a rollout.
GENERIC_LOOP = """
def run_episode(row):
    return {"reward": 1.0}


def judge(rows):
    return [{"task_index": row["task_index"], "repeat": row["repeat"], "verdict": True, "checks": []} for row in rows]
"""

GENERIC_CONFIG = """
[[targets]]
path = "{module}:run_episode"
role = "dispatch"

[[targets]]
path = "{module}:judge"
role = "health"
"""


def check(*arguments: str, folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``gym-instrument config check ...`` in a process of its own, the loop's folder on its path."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_PYTHON_GYM_")}
    environ.update(PYTHONPATH=str(folder), **env)
    return subprocess.run(
        [str(GYM_INSTRUMENT), "config", "check", *arguments], capture_output=True, text=True, env=environ, check=False
    )


def test_rows_that_carry_the_generic_fields_are_no_problem_and_do_find_their_verdicts(
    make_module: Any, tmp_path: Path, instrument: Any, telemetry: Any
) -> None:
    module = make_module(GENERIC_LOOP)
    config = tmp_path / "gym.toml"
    config.write_text(GENERIC_CONFIG.format(module=module))
    done = check(str(config), folder=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "problem:" not in done.stdout and done.stderr == ""
    assert done.stdout.splitlines()[-1] == "no problems"
    assert f"target {module}:run_episode (dispatch): found\n  note: no start rule names its rollout" in done.stdout

    # And it is so: instrumented by that file, the loop's verdicts find their dispatches.
    instrument(config=str(config))
    loop = importlib.import_module(module)
    rows = [{"task_index": 0, "repeat": repeat} for repeat in range(2)]
    for row in rows:
        loop.run_episode(row)
    loop.judge(rows)
    dispatches = {span.attributes[semconv.ROLLOUT_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    healths = telemetry.spans(semconv.SPAN_HEALTH)
    assert sorted(dispatches) == ["0-0", "0-1"] and len(healths) == 2
    for health in healths:
        parent = dispatches[health.attributes[semconv.ROLLOUT_ID]]
        assert health.parent is not None and health.parent.span_id == parent.context.span_id


def test_targets_in_the_environment_variable_s_form(make_module: Any, tmp_path: Path) -> None:
    module = make_module(GENERIC_LOOP)
    targets = f"{module}:run_episode=dispatch@nemo_gym, {module}:judg=health,{module}:judge=grade,{module}:judge"
    done = check("--targets", targets, folder=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"target {module}:run_episode (dispatch, schema nemo_gym): found",
        f"target {module}:judg (health): cannot be found",
        f"  problem: target {module}:judg=health: module '{module}' has no attribute 'judg'; did you mean 'judge'?",
        f"target '{module}:judge=grade': skipped",
        f"  problem: target '{module}:judge': unknown role 'grade'; expected one of {', '.join(ROLES)}",
        f"target '{module}:judge': skipped",
        f"  problem: target '{module}:judge': expected 'package.module:Qualified.name=role'",
    ]
    assert done.stderr.strip() == "3 problem(s)"

    # A file and targets together, as a run with both variables reads them.
    config = tmp_path / "gym.toml"
    config.write_text(GENERIC_CONFIG.format(module=module))
    done = check(str(config), "--targets", f"{module}:run_episode=verify", folder=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("target ")] == [
        f"target {module}:run_episode (dispatch): found",
        f"target {module}:judge (health): found",
        f"target {module}:run_episode (verify): found",
    ]


def test_with_neither_it_checks_the_environment(make_module: Any, tmp_path: Path) -> None:
    module = make_module(GENERIC_LOOP)
    done = check(folder=tmp_path, OTEL_PYTHON_GYM_TARGETS=f"{module}:run_episode=dispatch,{module}:judge=health")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[:2] == [
        "from the environment: OTEL_PYTHON_GYM_TARGETS",
        f"target {module}:run_episode (dispatch): found",
    ]
    config = tmp_path / "gym.toml"
    config.write_text(GENERIC_CONFIG.format(module=module))
    done = check(folder=tmp_path, OTEL_PYTHON_GYM_CONFIG=str(config), OTEL_PYTHON_GYM_TARGETS=f"{module}:nope=verify")
    assert done.returncode == 2
    assert done.stdout.splitlines()[0] == "from the environment: OTEL_PYTHON_GYM_CONFIG and OTEL_PYTHON_GYM_TARGETS"
    assert f"target {module}:nope (verify): cannot be found" in done.stdout

    done = check(folder=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == "1 problem(s)"
    assert done.stdout.strip() == (
        "problem: nothing to check: give a FILE or --targets, or set OTEL_PYTHON_GYM_CONFIG or OTEL_PYTHON_GYM_TARGETS"
    )


def test_the_targets_form_given_as_a_file_says_how_to_give_it(make_module: Any, tmp_path: Path) -> None:
    done = check("json:dumps=verify", folder=tmp_path)
    assert done.returncode == 2
    assert "cannot read 'json:dumps=verify'" in done.stdout
    assert "targets in the OTEL_PYTHON_GYM_TARGETS form are given with --targets" in done.stdout


def test_its_help_says_that_it_imports_the_target_modules(tmp_path: Path) -> None:
    done = check("--help", folder=tmp_path)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "each target's module is imported, as the run imports it: its import-time code runs" in text
    assert "no target module is imported" not in text
    assert "--targets TARGETS" in text and "OTEL_PYTHON_GYM_TARGETS" in text
