"""``make e2e-ui``: ``make demo-ui`` against a real Arize Phoenix, checked through its API and in a real browser.

Runs ``demo/run_demo_ui.py --detach`` as a person runs ``make demo-ui DETACH=1`` (on a free port,
with what it makes under ``.e2e-work/ui/``), then:

- reads every span back through Phoenix's REST API and compares it with the spans the same run
  wrote to its OTLP/JSON file: ids, parents, names and the package's attributes;
- opens the rollout trace URL that ``make demo-ui`` printed in headless Chromium (Debian's
  ``chromium``, over the DevTools protocol) and reads, from the page as rendered after its scripts
  ran, the trace's span tree and each span's attribute table: task id on the dispatch, reward on
  the verify, verdict and checks on the health span. Screenshots stay in ``.e2e-work/ui/``.

Every wait polls with a deadline; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

E2E = Path(__file__).resolve().parent
REPO = E2E.parent
sys.path[:0] = [str(REPO / "demo"), str(E2E)]

import viewer  # noqa: E402
from cdp import Browser  # noqa: E402

from gym_instrument.tools.report.otlp import ReadStats, Span, read_spans  # noqa: E402

WORK = Path(os.environ.get("GYM_UI_WORK", REPO / ".e2e-work" / "ui"))
PHOENIX = Path(os.environ.get("GYM_UI_PHOENIX", REPO / ".venv-ui" / "bin" / "phoenix"))
DEMO_UI_TIMEOUT = 900  # seconds, for the whole `make demo-ui` run: Phoenix's cold start plus the demo
PAGE_TIMEOUT = 120.0
# Each row of an attribute table the page shows: the texts of its two cells (key, value).
TABLE_ROWS = """[...document.querySelectorAll('tr')]
    .map((row) => [...row.querySelectorAll('td')].map((cell) => cell.innerText.trim()))
    .filter((cells) => cells.length === 2 && cells[0])"""


@dataclass
class DemoUi:
    phoenix: viewer.Phoenix
    printed: str
    file_spans: list[Span]
    run_url: str
    trace_url: str
    rollout_id: str  # the rollout make demo-ui says the trace URL shows


@pytest.fixture(scope="module")
def demo_ui() -> Any:
    if not PHOENIX.is_file():
        pytest.fail(f"no Phoenix at {PHOENIX}: run `make e2e-ui`, which installs it into .venv-ui/")
    port = viewer.free_port()
    output = WORK / "demo"
    command = [
        sys.executable,
        str(REPO / "demo" / "run_demo_ui.py"),
        "--phoenix",
        str(PHOENIX),
        "--port",
        str(port),
        "--output",
        str(output),
        "--detach",
    ]
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PHOENIX_"))}
    try:
        process = subprocess.run(
            command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=DEMO_UI_TIMEOUT, check=False
        )
        (WORK / "demo-ui.out").write_text(process.stdout + process.stderr)
        assert process.returncode == 0, f"make demo-ui failed ({process.returncode}):\n{process.stdout[-4000:]}{process.stderr}"
        printed = process.stdout
        run_url = re.search(r"^  the run \(project gym-demo\):\s+(\S+)$", printed, re.MULTILINE)
        trace_url = re.search(r"^  one rollout's trace \(task \S+, rollout (\S+), .*\):\n\s+(\S+)$", printed, re.MULTILINE)
        assert run_url and trace_url, printed
        file_spans = list(read_spans([output / "spans.otlp.jsonl"], ReadStats(), progress=False))
        yield DemoUi(viewer.Phoenix(port=port), printed, file_spans, run_url.group(1), trace_url.group(2), trace_url.group(1))
    finally:
        stopped = subprocess.run(
            [*command[:2], "--output", str(output), "--stop"], cwd=REPO, capture_output=True, text=True, timeout=120
        )
        print(f"\n{stopped.stdout.strip()}")


def dispatch_of(demo_ui: DemoUi) -> Span:
    """The exported dispatch span of the rollout make demo-ui printed."""
    (dispatch,) = (
        span
        for span in demo_ui.file_spans
        if span.name == "gym.rollout.dispatch" and span.attributes.get("nemo.gym.rollout.id") == demo_ui.rollout_id
    )
    return dispatch


def test_demo_ui_prints_the_run_and_one_rollouts_trace(demo_ui: DemoUi) -> None:
    phoenix = demo_ui.phoenix
    assert demo_ui.run_url == f"{phoenix.base_url}/projects/{phoenix.project_id()}"
    trace_id = dispatch_of(demo_ui).trace_id
    assert demo_ui.trace_url == f"{phoenix.base_url}/redirects/traces/{trace_id}"
    # The report make demo-ui leaves links each rollout to its trace in this Phoenix.
    report = (WORK / "demo" / "report.html").read_text()
    assert f"{phoenix.base_url}/redirects/traces/{trace_id}" in report


def test_phoenix_api_returns_the_spans_the_run_exported(demo_ui: DemoUi) -> None:
    stored = {span["span_id"]: span for span in demo_ui.phoenix.spans()}
    exported = demo_ui.file_spans
    assert Counter(span.name for span in exported) == {"gym.rollout.dispatch": 13, "gym.verify": 12, "gym.rollout.health": 12}
    assert Counter(span["name"] for span in stored.values()) == Counter(span.name for span in exported)
    watched = (
        "nemo.gym.task.id",
        "nemo.gym.rollout.id",
        "nemo.gym.rollout.reward",
        "nemo.gym.health.verdict",
        "nemo.gym.health.checks",
    )
    for span in exported:
        found = stored[span.span_id]
        assert (found["name"], found["trace_id"], found["parent_span_id"]) == (span.name, span.trace_id, span.parent_span_id)
        for key in watched:
            assert found["attributes"].get(key) == span.attributes.get(key), (span.name, key)
    rollouts = list(viewer.rollouts(list(stored.values())))
    assert sum("nemo.gym.task.id" in rollout["dispatch"]["attributes"] for rollout in rollouts) == 10  # 3 of 4 tasks have one
    assert sum("nemo.gym.rollout.reward" in (rollout["verify"] or {}).get("attributes", {}) for rollout in rollouts) == 10
    verdicts = Counter((rollout["health"] or {}).get("attributes", {}).get("nemo.gym.health.verdict") for rollout in rollouts)
    assert verdicts == {"healthy": 8, "unhealthy": 4, None: 1}  # the failed first attempt has no verdict


async def table(page: Browser, key: str, span_name: str) -> dict[str, str]:
    """Poll the rendered page until the attribute table of ``span_name`` (the selected span) has ``key``."""
    deadline = asyncio.get_running_loop().time() + PAGE_TIMEOUT
    rows: dict[str, str] = {}
    while asyncio.get_running_loop().time() < deadline:
        rows = dict(await page.evaluate(TABLE_ROWS) or [])
        if key in rows:
            return rows
        await asyncio.sleep(0.5)
    raise AssertionError(f"the page at {await page.url()} shows no {key} for {span_name}; its table: {rows}")


def test_the_rollouts_trace_page_shows_its_spans_task_reward_and_verdict(demo_ui: DemoUi) -> None:
    trace_id = dispatch_of(demo_ui).trace_id
    spans = {span.name: span for span in demo_ui.file_spans if span.trace_id == trace_id}
    dispatch, verify, health = spans["gym.rollout.dispatch"], spans["gym.verify"], spans["gym.rollout.health"]
    rollout_id = dispatch.attributes["nemo.gym.rollout.id"]

    async def look() -> dict[str, dict[str, str]]:
        shown: dict[str, dict[str, str]] = {}
        async with Browser() as page:
            try:
                await page.goto(demo_ui.trace_url)
                # The trace opens with its span tree and the root span (the dispatch) selected.
                await page.wait_for_text(
                    trace_id, "gym.rollout.dispatch", "gym.verify", "gym.rollout.health", timeout=PAGE_TIMEOUT
                )
                shown["dispatch"] = await table(page, "nemo.gym.task.id", "gym.rollout.dispatch")
                await page.screenshot(WORK / "screenshot.png")
                for name, key, label in (
                    ("gym.verify", "nemo.gym.rollout.reward", "verify"),
                    ("gym.rollout.health", "nemo.gym.health.verdict", "health"),
                ):
                    assert await page.click_text(name), f"no {name} in the span tree"
                    shown[label] = await table(page, key, name)
                    await page.screenshot(WORK / f"screenshot-{label}.png")
            finally:
                await page.screenshot(WORK / "screenshot-last.png")
                print(f"\nscreenshots of {demo_ui.trace_url}: {WORK}/screenshot*.png")
        return shown

    shown = asyncio.run(look())
    assert shown["dispatch"]["nemo.gym.task.id"] == dispatch.attributes["nemo.gym.task.id"]
    assert shown["dispatch"]["nemo.gym.rollout.id"] == rollout_id
    assert shown["dispatch"]["nemo.gym.rollout.repeat"] == str(dispatch.attributes["nemo.gym.rollout.repeat"])
    assert float(shown["verify"]["nemo.gym.rollout.reward"]) == verify.attributes["nemo.gym.rollout.reward"]
    assert shown["verify"]["nemo.gym.rollout.id"] == rollout_id
    assert shown["health"]["nemo.gym.health.verdict"] == health.attributes["nemo.gym.health.verdict"]
    # A string array is shown one element a row: nemo.gym.health.checks.0, .1, ...
    checks = [shown["health"][f"nemo.gym.health.checks.{i}"] for i in range(len(health.attributes["nemo.gym.health.checks"]))]
    assert checks == health.attributes["nemo.gym.health.checks"]
    assert shown["health"]["nemo.gym.rollout.id"] == rollout_id
    # make demo-ui picks a rollout with something to see: a task id, a reward and an unhealthy verdict.
    assert health.attributes["nemo.gym.health.verdict"] == "unhealthy" and checks


def test_the_readmes_replay_into_phoenix_block_lands_in_its_own_project(demo_ui: DemoUi) -> None:
    """README.md's block for sending a replay to Phoenix (skipped by make readme-test: it needs a Phoenix), run here."""
    from test_readme import README, shell_blocks

    (block,) = (block for block in shell_blocks(README.read_text()) if block.skip and "make e2e-ui runs this block" in block.skip)
    phoenix = demo_ui.phoenix
    code = block.code.replace("127.0.0.1:6006", f"127.0.0.1:{phoenix.port}")  # the README's port is this Phoenix's
    assert code != block.code
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    process = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", code], cwd=REPO, env=environment, capture_output=True, text=True
    )
    assert process.returncode == 0, process.stdout + process.stderr
    assert "replayed 14 dispatches (0 failed), 14 verify and 14 health spans" in process.stdout

    replayed = viewer.Phoenix(port=phoenix.port, project="replayed")
    spans = replayed.wait_for_spans({"gym.rollout.dispatch": 14, "gym.verify": 14, "gym.rollout.health": 14})
    assert len(spans) == 42 and all(span["attributes"].get("gym.replayed") is True for span in spans)
    verdicts = Counter(span["attributes"]["nemo.gym.health.verdict"] for span in spans if span["name"] == "gym.rollout.health")
    assert verdicts == {"healthy": 5, "unhealthy": 9}
    assert len(phoenix.spans()) == 37  # the demo's project is untouched
