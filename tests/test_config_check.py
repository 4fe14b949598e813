"""``gym-instrument config check FILE`` (tools/config_check.py): per target, found or not and what
each rule reads; every problem named; no traceback; no target module imported."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

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
    assert "target email.message:Message.get (dispatch, framework my_loop): its module is found" in out
    assert "  start nemo.gym.rollout.repeat: arg.epoch, -1" in out
    assert "  failure: when result.error is present (not None); error.type from none (else _OTHER)" in out
    assert "  end nemo.gym.rollout.reward: row.scores.*.value, mapped by {'C': 1.0, 'I': 0.0}" in out
    # A bad rule is named with its target and key; the target keeps its other rules.
    assert "problem: target 'email.message:Message.set_payload': end: 'my.bad': path 'score' must start with" in out
    assert "no module named 'emial'; did you mean 'email'?" in out
    assert err.strip() == "2 problem(s)"


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


@pytest.mark.skipif(importlib.util.find_spec("inspect_ai") is None, reason="inspect-ai is not installed")
def test_it_imports_no_target_module(tmp_path: Path) -> None:
    config = tmp_path / "gym.toml"
    config.write_text('[[targets]]\npath = "inspect_ai.log._samples:active_sample"\nrole = "dispatch"\n')
    probe = (
        "import sys\nfrom gym_instrument.tools.cli import main\n"
        f"code = main(['config', 'check', {str(config)!r}])\n"
        "print('IMPORTED' if 'inspect_ai' in sys.modules else 'NOT IMPORTED', code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip().splitlines()[-1] == "NOT IMPORTED 0", done.stdout + done.stderr
