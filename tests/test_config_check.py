"""``gym-instrument config check FILE`` (tools/config_check.py): per target, found or not and what
each rule reads; every problem named, what would silently do nothing included; no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
    assert f"target {module}:run_episod: no start rule names its rollout" not in out  # (NeMo Gym's schema: its row may)
    assert "template '{task_id}-{repeat}' names {repeat}, which no rule of this table reads" in out
    assert "end: the health role makes no span of its own, so these rules do nothing; say what its result is with verdicts" in out
    assert "  extractor json:dumps" in out  # extractors by their import path
    assert f"target {module}:run_episode: no start rule names its rollout" in out
    assert "a script's own functions (module __main__) are defined after instrumentation starts" in out
    assert "target __main__:run_episode: no start rule names its rollout" in out  # (no schema: the generic one)
    assert err.strip() == "7 problem(s)" and "Traceback" not in out
