"""``make readme-test``: README.md's shell blocks, run as written, in a fresh venv on a copy of the checkout.

Every fenced ``sh`` block of README.md runs, in the order the README has them, with ``bash -e``
from the root of a copy of this checkout (the files git tracks, and new files not ignored), with a
new venv's ``bin`` first on ``PATH`` as a reader's activated venv would be, nothing installed in it
beforehand, and ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP receiver on 127.0.0.1 (the
reader's Collector). A block preceded by ``<!-- readme-test: skip: REASON -->`` is not run; the
reason is printed. Then the tests check what the blocks left, as a reader would: the spans at the
receiver, the report and figures files, the replayed spans. Logs stay in ``.e2e-work/readme/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gym_instrument.tools.report.otlp import ReadStats, read_spans  # noqa: E402
from tests.otlp_receiver import OtlpReceiver  # noqa: E402

README = REPO / "README.md"
WORK = Path(os.environ.get("GYM_README_WORK", REPO / ".e2e-work" / "readme"))
PYTHON = os.environ.get("README_PYTHON", "python3")  # what makes the reader's venv
SKIP = re.compile(r"<!-- readme-test: skip: (?P<reason>\S.*?) -->")
SHELL_FENCES = ("```sh", "```bash", "```shell", "```console")
# Left out of the reader's environment: this run's own telemetry, venv, Python and make settings.
FROM_THIS_RUN = ("OTEL_", "VIRTUAL_ENV", "PYTHON", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
BLOCK_TIMEOUT = 1800  # seconds: a block may set up a venv and run the test suite


@dataclass
class Block:
    line: int  # of its opening fence, 1-based
    code: str
    skip: str | None  # the reason it is not run
    returncode: int | None = None
    output: str = ""


def shell_blocks(text: str) -> list[Block]:
    """The README's shell blocks, with the skip marker on the line before each (blank lines between allowed)."""
    lines = text.splitlines()
    blocks = []
    number = 0
    while number < len(lines):
        if lines[number].strip() in SHELL_FENCES:
            end = next(index for index in range(number + 1, len(lines)) if lines[index].strip() == "```")
            before = next((line.strip() for line in reversed(lines[:number]) if line.strip()), "")
            marker = SKIP.fullmatch(before)
            blocks.append(Block(number + 1, "\n".join(lines[number + 1 : end]), marker["reason"] if marker else None))
            number = end
        number += 1
    return blocks


def copy_checkout(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


@dataclass
class Ran:
    checkout: Path
    blocks: list[Block]
    receiver: OtlpReceiver

    def block(self, containing: str) -> Block:
        (found,) = (block for block in self.blocks if containing in block.code and block.skip is None)
        return found


@pytest.fixture(scope="module")
def ran() -> Any:
    shutil.rmtree(WORK, ignore_errors=True)
    checkout, venv = WORK / "checkout", WORK / "venv"
    checkout.mkdir(parents=True)
    copy_checkout(checkout)
    subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
    blocks = shell_blocks(README.read_text())
    with OtlpReceiver() as receiver:
        environment = {
            **{key: value for key, value in os.environ.items() if not key.startswith(FROM_THIS_RUN)},
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(venv),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        }
        for block in blocks:
            if block.skip is not None:
                print(f"\nREADME.md:{block.line}: not run: {block.skip}")
                continue
            print(f"\nREADME.md:{block.line}: running\n{block.code}", flush=True)
            process = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=checkout,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=BLOCK_TIMEOUT,
                check=False,
            )
            block.returncode, block.output = process.returncode, process.stdout
            (WORK / f"block-{block.line}.log").write_text(f"$ {block.code}\n{process.stdout}\n(exit {process.returncode})\n")
            print(f"README.md:{block.line}: exit {process.returncode} (log: {WORK / f'block-{block.line}.log'})")
        yield Ran(checkout, blocks, receiver)


def test_every_shell_block_runs_as_written_or_says_why_not(ran: Ran) -> None:
    failed = [
        f"README.md:{block.line} exit {block.returncode}:\n{block.output[-3000:]}" for block in ran.blocks if block.returncode
    ]
    assert not failed, "\n\n".join(failed)
    run = [block for block in ran.blocks if block.skip is None]
    assert len(run) >= 4 and all(block.returncode == 0 for block in run)
    assert all(block.skip.strip() for block in ran.blocks if block.skip is not None)


def test_two_commands_leave_the_demo_and_pass_the_tests(ran: Ran) -> None:
    block = ran.block("make demo")
    assert re.search(r"^task id\s+repeat\s+rollout id\s+reward\s+verdict", block.output, re.MULTILINE)
    assert sorted(path.name for path in (ran.checkout / "demo" / "output").iterdir()) == [
        "report.html",
        "rollouts.jsonl",
        "spans.otlp.jsonl",
    ]
    summary = re.findall(r"^(\d+ passed.*) in [\d.]+s", block.output, re.MULTILINE)  # make test: pytest's last line
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], block.output[-2000:]


def test_the_zero_code_quick_start_sends_the_loops_spans_to_the_collector(ran: Ran) -> None:
    ran.block("pip install . opentelemetry-distro opentelemetry-exporter-otlp-proto-http")
    spans = [span for span in ran.receiver.spans if span["service"] == "demo-rollouts"]
    names = Counter(span["name"] for span in spans)
    assert names == {"gym.rollout.dispatch": 13, "gym.verify": 12}  # no health target in the quick start
    task_ids = {span["attributes"].get("nemo.gym.task.id") for span in spans if span["name"] == "gym.rollout.dispatch"}
    assert task_ids == {"arith-001", "arith-002", "geo-17", None}
    rewarded = [span for span in spans if "nemo.gym.rollout.reward" in span["attributes"]]
    assert len(rewarded) == 10
    assert ran.receiver.other_posts >= 1  # its metrics went to the Collector too


def test_the_report_commands_leave_the_page_and_the_figures(ran: Ran) -> None:
    block = ran.block("gym-instrument report spans/demo.jsonl")
    checkout = ran.checkout
    assert "run: 4 tasks, 13 dispatches (1 failed)" in block.output
    assert len(list(read_spans([checkout / "spans" / "demo.jsonl"], ReadStats(), progress=False))) == 37
    assert "Reward per task" in (checkout / "report.html").read_text()
    figures = json.loads((checkout / "figures.json").read_text())
    assert [task["task"] for task in figures["tasks"]] == ["arith-001", "arith-002", "geo-17", "#3"]
    linked = (checkout / "linked.html").read_text()  # --trace-url phoenix
    assert len(set(re.findall(r'href="http://127\.0\.0\.1:6006/redirects/traces/([0-9a-f]{32})"', linked))) == 13
    assert "Reward per task" in (checkout / "spans" / "report.html").read_text()  # python -m: beside the first input


def test_the_replay_example_replays_the_kept_run(ran: Ran) -> None:
    block = ran.block("gym-instrument replay tests/data/e2e_runs/nemo-gym-0.7.0/ --output")
    assert "replayed 14 dispatches (0 failed), 14 verify and 14 health spans" in block.output
    spans = list(read_spans([ran.checkout / "replayed.jsonl"], ReadStats(), progress=False))
    assert len(spans) == 42 and all(span.attributes["gym.replayed"] is True for span in spans)
    (health,) = re.findall(r"^health: .*$", block.output, re.MULTILINE)  # the report's summary
    assert sorted(health.removeprefix("health: ").split(", ")) == ["healthy 5", "unhealthy 9"]
