"""gym_harness/venvs.py: a venv is built from scratch on a fresh checkout, and reused while its stamp matches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gym_harness.processes import E2EFailure
from gym_harness.venvs import stamped_venv


def test_a_failed_install_on_a_fresh_checkout_names_its_log(tmp_path: Path) -> None:
    # The log's folder (a fresh checkout's work folder) does not exist yet; pip finds nothing offline.
    install_log = tmp_path / "work" / "pip-install.log"
    venv = tmp_path / "venv"
    arguments = ["--no-index", "no-such-distribution-anywhere"]
    with pytest.raises(E2EFailure, match="pip install failed") as failure:
        stamped_venv(venv, sys.executable, "stamp-1", arguments, install_log, "a test")
    assert str(install_log) in str(failure.value)
    assert "no-such-distribution-anywhere" in install_log.read_text()
    assert not (venv / ".e2e-stamp").exists()


def test_a_venv_whose_stamp_matches_is_reused_and_another_is_rebuilt(tmp_path: Path) -> None:
    venv, install_log = tmp_path / "venv", tmp_path / "work" / "pip-install.log"
    python = stamped_venv(venv, sys.executable, "stamp-1", ["--no-index", "--help"], install_log, "a test")
    assert python == venv / "bin" / "python" and python.exists()
    assert (venv / ".e2e-stamp").read_text() == "stamp-1\n"
    mark = venv / "kept"
    mark.write_text("")
    assert stamped_venv(venv, sys.executable, "stamp-1", ["--no-index", "--help"], install_log, "a test") == python
    assert mark.exists()
    stamped_venv(venv, sys.executable, "stamp-2", ["--no-index", "--help"], install_log, "a test")
    assert not mark.exists()
    assert (venv / ".e2e-stamp").read_text() == "stamp-2\n"
