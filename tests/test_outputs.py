"""No command writes over one of its inputs, and none replaces a file it did not make unless told to
(``tools/outputs.py``): the commands run as a user runs them, their files read back afterwards."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
RUN = Path(__file__).resolve().parent / "data" / "e2e_runs" / "nemo-gym-0.7.0"


def gym_instrument(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GYM_INSTRUMENT), *map(str, arguments)], capture_output=True, text=True)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    return copy


def refused(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("flags", [[], ["--force"], ["--append"]])
def test_replay_never_writes_over_its_own_input(run: Path, flags: list[str]) -> None:
    for name in ("rollouts.jsonl", "rollout_verdicts.jsonl", "rollouts_materialized_inputs.jsonl"):
        before = (run / name).read_bytes()
        refused(gym_instrument("replay", run, "--output", run / name, *flags), f"{run / name} is one of this command's inputs")
        assert (run / name).read_bytes() == before
    rollouts = run / "rollouts.jsonl"
    refused(gym_instrument("replay", rollouts, "--output", rollouts, *flags), "is one of this command's inputs")
    assert rollouts.read_bytes() == (RUN / "rollouts.jsonl").read_bytes()


def test_replay_replaces_a_file_it_did_not_make_only_with_force(run: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text("my own notes\n")
    refused(gym_instrument("replay", run, "--output", notes), f"{notes} exists and was not written by gym-instrument")
    assert notes.read_text() == "my own notes\n"
    assert gym_instrument("replay", run, "--output", notes, "--force").returncode == 0
    replayed = notes.read_text()
    assert "gym.replayed" in replayed and "my own notes" not in replayed
    again = gym_instrument("replay", run, "--output", notes)  # its own earlier output: replaced as asked
    assert again.returncode == 0, again.stderr
    assert notes.read_text().count("\n") == replayed.count("\n")


def test_report_and_compare_pages_never_replace_an_input_or_a_file_they_did_not_make(run: Path, tmp_path: Path) -> None:
    spans = run / "live_spans.otlp.jsonl"
    before = spans.read_bytes()
    for flags in ([], ["--force"]):
        refused(gym_instrument("report", spans, "--html", spans, *flags), f"{spans} is one of this command's inputs")
        refused(gym_instrument("report", run, "--html", spans, *flags), f"{spans} is one of this command's inputs")
        refused(gym_instrument("compare", spans, RUN, "--html", spans, *flags), "is one of this command's inputs")
    assert spans.read_bytes() == before
    page = tmp_path / "page.html"
    page.write_text("<html>my page</html>")
    refused(gym_instrument("report", spans, "--html", page), f"{page} exists and was not written by gym-instrument")
    refused(gym_instrument("compare", spans, RUN, "--html", page), f"{page} exists and was not written by gym-instrument")
    assert page.read_text() == "<html>my page</html>"
    assert gym_instrument("report", spans, "--html", page, "--force").returncode == 0
    assert "my page" not in page.read_text()
    for _ in range(2):  # its own page, beside the spans by default, is replaced run after run
        done = gym_instrument("report", spans)
        assert done.returncode == 0, done.stderr
    assert gym_instrument("compare", spans, RUN, "--html", page).returncode == 0
