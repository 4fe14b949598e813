"""``make e2e-ui``: ``make demo-ui`` against a real Arize Phoenix, checked through its API and in a real browser.

Runs ``demo/run_demo_ui.py --detach`` with the demo's own venv (``.venv-demo``) as a person runs
``make demo-ui DETACH=1`` (on a free port, with what it makes under ``.e2e-work/ui/``), then:

- reads every span back through Phoenix's REST API and compares it with the spans the same run
  wrote to its OTLP/JSON file: ids, parents, names and the package's attributes;
- opens the rollout trace URL that ``make demo-ui`` printed in headless Chromium (Debian's
  ``chromium``, over the DevTools protocol) and reads, from the page as rendered after its scripts
  ran, the trace's span tree and each span's attribute table: task id on the dispatch, reward on
  the verify, verdict and checks on the health span;
- checks each rollout's outcome at a glance: through the API, every dispatch span carries the
  ``health`` (verdict) and ``reward`` annotations its health and verify spans say, and Phoenix's
  span filter ``annotations['health'].label == 'unhealthy'`` finds exactly the unhealthy rollouts;
  in the browser, the trace list shows each rollout's verdict and reward on its row, the filter
  typed into its filter box leaves the unhealthy rollouts only, and a trace shows both on its root
  span before any child span is opened.

Screenshots (PNG) of the trace list and of a trace stay in ``.e2e-work/screenshots/viewer-*.png``.

Every wait polls with a deadline; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import json
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
SCREENSHOTS = Path(os.environ.get("GYM_UI_SCREENSHOTS", REPO / ".e2e-work" / "screenshots"))
PHOENIX = Path(os.environ.get("GYM_UI_PHOENIX", REPO / ".venv-ui" / "bin" / "phoenix"))
DEMO_PYTHON = Path(os.environ.get("GYM_DEMO_PYTHON", REPO / ".venv-demo" / "bin" / "python"))  # make demo-ui's
DEMO_UI_TIMEOUT = 900  # seconds, for the whole `make demo-ui` run: Phoenix's cold start plus the demo
PAGE_TIMEOUT = 120.0
# Each row of an attribute table the page shows: the texts of its two cells (key, value).
TABLE_ROWS = """[...document.querySelectorAll('tr')]
    .map((row) => [...row.querySelectorAll('td')].map((cell) => cell.innerText.trim()))
    .filter((cells) => cells.length === 2 && cells[0])"""
# The annotation chips a person sees (not the ones the page hides behind "+1") in each part of the
# page that ``scope`` selects, with what identifies that part: for the trace list's rows, the trace
# id in the row's link. A chip's text is its name, then its value (a label, or "μ 0.00" for a score).
CHIPS = """[...document.querySelectorAll(%s)].map((part) => [
    ([...part.querySelectorAll('a[href*="/spans/"]')].map((a) => (a.href.match(/\\/spans\\/([0-9a-f]{32})/) || [])[1])
        .find(Boolean)) || null,
    [...part.querySelectorAll('button')]
        .filter((chip) => chip.querySelector('.annotation-name-and-value'))
        .filter((chip) => !chip.closest('[aria-hidden="true"], [inert]') && chip.offsetParent !== null)
        .map((chip) => chip.innerText.split('\\n').map((line) => line.replace(/\\u00a0/g, ' ').trim()).slice(0, 2)),
])"""


@dataclass
class DemoUi:
    phoenix: viewer.Phoenix
    printed: str
    file_spans: list[Span]
    run_url: str
    trace_url: str
    rollout_id: str  # the rollout make demo-ui says the trace URL shows
    filter_condition: str  # what make demo-ui says to type into the trace list's filter box


@pytest.fixture(scope="module")
def demo_ui() -> Any:
    if not PHOENIX.is_file():
        pytest.fail(f"no Phoenix at {PHOENIX}: run `make e2e-ui`, which installs it into .venv-ui/")
    port = viewer.free_port()
    output = WORK / "demo"
    if not DEMO_PYTHON.is_file():
        pytest.fail(f"no demo venv at {DEMO_PYTHON}: run `make e2e-ui`, which makes it as make demo-ui does")
    command = [
        str(DEMO_PYTHON),
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
        condition = re.search(r"^  its unhealthy rollouts only, typed into the filter box:\s+(.+)$", printed, re.MULTILINE)
        assert run_url and trace_url and condition, printed
        file_spans = list(read_spans([output / "spans.otlp.jsonl"], ReadStats(), progress=False))
        yield DemoUi(
            viewer.Phoenix(port=port),
            printed,
            file_spans,
            run_url.group(1),
            trace_url.group(2),
            trace_url.group(1),
            condition.group(1).strip(),
        )
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


async def root_annotations(page: Browser) -> list[list[str]]:
    """Poll the trace page until the selected span's annotation chips show (in the trace's drawer, not the list behind it)."""
    deadline = asyncio.get_running_loop().time() + PAGE_TIMEOUT
    chips: list[list[str]] = []
    while asyncio.get_running_loop().time() < deadline:
        chips = [chip for _, found in await page.evaluate(CHIPS % json.dumps('section[role="dialog"]')) or [] for chip in found]
        if len(chips) >= 3:
            return chips
        await asyncio.sleep(0.5)
    raise AssertionError(f"the trace at {await page.url()} shows no annotations on its root span: {chips}")


def test_the_rollouts_trace_page_shows_its_spans_task_reward_and_verdict(demo_ui: DemoUi) -> None:
    trace_id = dispatch_of(demo_ui).trace_id
    spans = {span.name: span for span in demo_ui.file_spans if span.trace_id == trace_id}
    dispatch, verify, health = spans["gym.rollout.dispatch"], spans["gym.verify"], spans["gym.rollout.health"]
    rollout_id = dispatch.attributes["nemo.gym.rollout.id"]

    chips: list[list[str]] = []
    tree: list[str] = []

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
                # Before any child span is opened: the root's verdict and reward, in its annotations and the tree.
                chips[:] = await root_annotations(page)
                tree.append(await page.evaluate("document.querySelector('[data-testid=\"trace-tree\"]').innerText"))
                await page.screenshot(SCREENSHOTS / "viewer-trace.png")
                for name, key, label in (
                    ("gym.verify", "nemo.gym.rollout.reward", "verify"),
                    ("gym.rollout.health", "nemo.gym.health.verdict", "health"),
                ):
                    assert await page.click_text(name), f"no {name} in the span tree"
                    shown[label] = await table(page, key, name)
                    await page.screenshot(SCREENSHOTS / f"viewer-trace-{label}.png")
            finally:
                await page.screenshot(SCREENSHOTS / "viewer-trace-last.png")
                print(f"\nscreenshots of {demo_ui.trace_url}: {SCREENSHOTS}/viewer-trace*.png")
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
    # Its root span shows both (in its annotations and under its row in the span tree) without a child span opened.
    reward = f"μ {verify.attributes['nemo.gym.rollout.reward']:.2f}"
    label = viewer.rollout_label(dispatch.attributes)
    assert chips == [[viewer.VERDICT, "unhealthy"], [viewer.REWARD, reward], [viewer.ROLLOUT, label]]
    lines = [line.replace("\u00a0", " ").strip() for line in tree[0].splitlines()]
    root_row = lines[lines.index("gym.rollout.dispatch") + 1 : lines.index("gym.verify")]
    # The tree's row shows the verdict and the reward; the rollout chip is behind its "+1".
    assert [viewer.VERDICT, "unhealthy", viewer.REWARD, reward, viewer.ROLLOUT, label, "+1"] == [
        line for line in root_row if not line.endswith("ms")
    ], root_row


def test_the_readmes_replay_into_phoenix_block_lands_in_its_own_project(demo_ui: DemoUi) -> None:
    """The docs' block for sending a replay to Phoenix (skipped by make readme-test: it needs a Phoenix), run here."""
    from test_readme import all_blocks

    (block,) = (block for block in all_blocks() if block.skip and "make e2e-ui runs this block" in block.skip)
    phoenix = demo_ui.phoenix
    code = block.code.replace("127.0.0.1:6006", f"127.0.0.1:{phoenix.port}")  # the docs' port is this Phoenix's
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


# -- each rollout's outcome at a glance -----------------------------------------------------------


@dataclass
class Outcome:
    """What a rollout's own exported spans say its outcome is: the verdict and the reward a person should see."""

    trace_id: str
    verdict: str | None  # None: no health span (the dispatch failed)
    checks: list[str]
    reward: float | None
    reward_label: str | None  # "masked" or "none" when the verify span has no reward; None when it has one or no verify span
    label: str  # task and rollout id, as the rollout annotation and column show them: "arith-001 · 0-2", "#3 · 3-1"

    @property
    def reward_shown(self) -> str | None:
        """The reward chip's value as the page writes it: a score as "μ 1.00", else the label."""
        return f"μ {self.reward:.2f}" if self.reward is not None else self.reward_label


def outcomes(spans: list[Span]) -> dict[str, Outcome]:
    """Per dispatch span id, from the OTLP/JSON file the run wrote (not from what was posted to Phoenix)."""
    below = {(span.parent_span_id, span.name): span for span in spans if span.name in ("gym.verify", "gym.rollout.health")}
    found = {}
    for span in spans:
        if span.name != "gym.rollout.dispatch":
            continue
        health, verify = below.get((span.span_id, "gym.rollout.health")), below.get((span.span_id, "gym.verify"))
        reward = verify.attributes.get("nemo.gym.rollout.reward") if verify else None
        label = None
        if verify is not None and reward is None:
            label = "masked" if verify.attributes.get("nemo.gym.verify.masked") else "none"
        found[span.span_id] = Outcome(
            span.trace_id,
            health.attributes["nemo.gym.health.verdict"] if health else None,
            list(health.attributes.get("nemo.gym.health.checks", [])) if health else [],
            reward,
            label,
            f"{span.attributes.get('nemo.gym.task.id', '#' + str(span.attributes.get('nemo.gym.task.index')))}"
            f" · {span.attributes['nemo.gym.rollout.id']}",
        )
    return found


def test_every_dispatch_span_carries_its_verdict_and_reward_annotation(demo_ui: DemoUi) -> None:
    expected = outcomes(demo_ui.file_spans)
    stored = demo_ui.phoenix.span_annotations(list(expected))
    by_span: dict[str, dict[str, dict[str, Any]]] = {}
    for annotation in stored:
        assert annotation["name"] not in by_span.setdefault(annotation["span_id"], {}), annotation  # one of each name
        by_span[annotation["span_id"]][annotation["name"]] = annotation
    assert Counter(outcome.verdict for outcome in expected.values()) == {"healthy": 8, "unhealthy": 4, None: 1}
    for span_id, outcome in expected.items():
        annotations = by_span.get(span_id, {})
        # Every rollout is named by its task and rollout id, the failed one too.
        assert annotations[viewer.ROLLOUT]["result"]["label"] == outcome.label, annotations
        if outcome.verdict is None:  # the failed first attempt: neither verified nor judged
            assert set(annotations) == {viewer.ROLLOUT}
            continue
        assert set(annotations) == {viewer.VERDICT, viewer.REWARD, viewer.ROLLOUT}
        health, reward = annotations[viewer.VERDICT], annotations[viewer.REWARD]
        assert (health["annotator_kind"], reward["annotator_kind"]) == ("CODE", "CODE")
        assert health["result"]["label"] == outcome.verdict
        assert health["result"]["explanation"] == ("failed checks: " + ", ".join(outcome.checks) if outcome.checks else None)
        assert reward["result"]["score"] == outcome.reward
        assert reward["result"]["label"] == outcome.reward_label
    assert sum(outcome.reward is not None for outcome in expected.values()) == 10
    assert {outcome.reward_label for outcome in expected.values()} == {None, "masked", "none"}


def test_filtering_by_verdict_finds_exactly_the_unhealthy_rollouts(demo_ui: DemoUi) -> None:
    """The filter make demo-ui prints, through the GraphQL field the trace list's filter box queries."""
    expected = outcomes(demo_ui.file_spans)
    assert demo_ui.filter_condition == "annotations['health'].label == 'unhealthy'"
    for verdict in ("unhealthy", "healthy"):
        condition = demo_ui.filter_condition.replace("'unhealthy'", repr(verdict))
        found = demo_ui.phoenix.filtered_spans(condition)
        assert Counter(span["name"] for span in found) == {"gym.rollout.dispatch": 4 if verdict == "unhealthy" else 8}
        assert {span["span_id"] for span in found} == {span_id for span_id, o in expected.items() if o.verdict == verdict}
    rewarded = demo_ui.phoenix.filtered_spans("annotations['reward'].score >= 1")
    assert {span["span_id"] for span in rewarded} == {span_id for span_id, o in expected.items() if (o.reward or 0) >= 1}


async def rows_shown(page: Browser, expected_rows: int, ready: Any = lambda chips: True) -> dict[str, list[list[str]]]:
    """Poll the trace list until it shows ``expected_rows`` rows and ``ready(chips of every row)``; per row's
    trace id, its visible annotation chips (name, value)."""
    deadline = asyncio.get_running_loop().time() + PAGE_TIMEOUT
    rows: list[list[Any]] = []
    while asyncio.get_running_loop().time() < deadline:
        rows = await page.evaluate(CHIPS % json.dumps("tbody tr")) or []
        if len(rows) == expected_rows and all(trace_id for trace_id, _ in rows) and ready([chips for _, chips in rows]):
            return {trace_id: chips for trace_id, chips in rows}
        await asyncio.sleep(0.5)
    raise AssertionError(f"the trace list at {await page.url()} shows {len(rows)} rows (expected {expected_rows}): {rows}")


COLUMN = """((name) => {
    const headers = [...document.querySelectorAll('thead th')].map((th) => th.innerText.trim());
    const index = headers.indexOf(name);
    if (index < 0) return null;
    return [...document.querySelectorAll('tbody tr')].map((row) => [
        ([...row.querySelectorAll('a[href*="/spans/"]')].map((a) => (a.href.match(/\\/spans\\/([0-9a-f]{32})/) || [])[1])
            .find(Boolean)) || null,
        row.cells[index] ? row.cells[index].innerText.replace(/\\u00a0/g, ' ').trim() : null,
    ]);
})(%s)"""


TICK = """((name) => {
    const search = document.querySelector('input[placeholder^="Search columns"]');
    const menu = search && search.closest('[role=dialog]');
    if (!menu) return false;
    // A column's row: a checkbox labelled with the column's name (an annotation's also says "span").
    const label = [...menu.querySelectorAll('label')].find((element) =>
        [...element.childNodes].some((node) => node.nodeType === Node.TEXT_NODE && node.textContent.trim() === name));
    const box = label && label.querySelector('input[type=checkbox]');
    if (!box) return false;
    if (!box.checked) box.click();
    return true;
})(%s)"""


async def tick_column(page: Browser, name: str) -> bool:
    """In the open Columns menu, tick the column ``name`` (an annotation's: its row says "span"), as a person would."""
    deadline = asyncio.get_running_loop().time() + PAGE_TIMEOUT
    while asyncio.get_running_loop().time() < deadline:
        if await page.evaluate(TICK % json.dumps(name)):
            return True
        await asyncio.sleep(0.5)
    menu = """(() => { const s = document.querySelector('input[placeholder^="Search columns"]');
        return s ? s.parentElement.parentElement.parentElement.parentElement.outerHTML
                 : document.body.innerHTML.slice(-20000); })()"""
    (WORK / "columns-menu.html").write_text(str(await page.evaluate(menu)))
    return False


async def column_shown(page: Browser, name: str, expected_rows: int) -> dict[str, str]:
    """Poll the trace list until a column headed ``name`` shows a value on each of ``expected_rows`` rows."""
    deadline = asyncio.get_running_loop().time() + PAGE_TIMEOUT
    rows: list[list[Any]] | None = None
    while asyncio.get_running_loop().time() < deadline:
        rows = await page.evaluate(COLUMN % json.dumps(name))
        if rows and len(rows) == expected_rows and all(trace_id and value for trace_id, value in rows):
            return {trace_id: value for trace_id, value in rows}
        await asyncio.sleep(0.5)
    raise AssertionError(f"the trace list at {await page.url()} shows no {name!r} column on every row: {rows}")


def test_the_trace_list_shows_each_rollouts_verdict_and_reward_and_filters_by_verdict(demo_ui: DemoUi) -> None:
    expected = {outcome.trace_id: outcome for outcome in outcomes(demo_ui.file_spans).values()}
    unhealthy = {trace_id for trace_id, outcome in expected.items() if outcome.verdict == "unhealthy"}

    async def look() -> dict[str, dict[str, list[list[str]]]]:
        shown: dict[str, dict[str, list[list[str]]]] = {}
        async with Browser(width=1920, height=1080) as page:
            try:
                # The run's page: one row per trace (root spans, Phoenix's default filter `parent_id is None`).
                await page.goto(demo_ui.run_url)
                await page.wait_for_text("gym.rollout.dispatch", viewer.VERDICT, timeout=PAGE_TIMEOUT)
                assert await page.click_selector('button[aria-label="Hide aside panel"]')
                shown["as it opens"] = await rows_shown(page, len(expected), lambda rows: all(rows))
                await page.screenshot(SCREENSHOTS / "viewer-trace-list.png")
                # The column fits one chip; rows wrapped, it shows every chip.
                assert await page.click_selector('button[aria-label="Wrap each row over as many lines as it needs"]')
                judged = sum(outcome.verdict is not None for outcome in expected.values())
                shown["wrapped"] = await rows_shown(page, len(expected), lambda rows: sum(len(c) == 3 for c in rows) == judged)
                await page.screenshot(SCREENSHOTS / "viewer-trace-list-wrapped.png")
                # Columns → rollout: each rollout's task and rollout id as a column of its own.
                assert await page.click_text("Columns", "button"), "no Columns button"
                assert await tick_column(page, viewer.ROLLOUT), "no rollout in the Columns menu"
                await page.screenshot(SCREENSHOTS / "viewer-trace-list-columns-menu.png")
                assert await page.focus('input[placeholder^="Search columns"]')
                await page.press("Escape", "Escape", 27)  # the menu closes
                shown["column"] = await column_shown(page, viewer.ROLLOUT, len(expected))
                await page.screenshot(SCREENSHOTS / "viewer-trace-list-rollout-column.png")
                # The filter make demo-ui printed, typed into the filter box as a person would.
                assert await page.focus(".cm-content"), "no filter box"
                await page.press("a", "KeyA", 65, modifiers=2)  # Ctrl+A: replace `parent_id is None`
                await page.type_text(demo_ui.filter_condition)
                await page.press("Enter", "Enter", 13)
                shown["filtered"] = await rows_shown(page, len(unhealthy), lambda rows: all(len(chips) == 3 for chips in rows))
                await page.screenshot(SCREENSHOTS / "viewer-trace-list-unhealthy.png")
            finally:
                await page.screenshot(SCREENSHOTS / "viewer-trace-list-last.png")
                print(f"\nscreenshots of {demo_ui.run_url}: {SCREENSHOTS}/viewer-trace-list*.png")
        return shown

    shown = asyncio.run(look())
    assert set(shown["as it opens"]) == set(shown["wrapped"]) == set(expected)
    for trace_id, outcome in expected.items():
        named = [viewer.ROLLOUT, outcome.label]
        if outcome.verdict is None:  # the failed attempt: named, neither verified nor judged
            assert shown["as it opens"][trace_id] == shown["wrapped"][trace_id] == [named]
            continue
        # As the page opens, the verdict is the first chip and always visible; the others may be behind "+2".
        assert shown["as it opens"][trace_id][0] == [viewer.VERDICT, outcome.verdict], (trace_id, shown["as it opens"][trace_id])
        assert shown["wrapped"][trace_id] == [[viewer.VERDICT, outcome.verdict], [viewer.REWARD, outcome.reward_shown], named]
    # Columns → rollout: each row says which task and rollout it is, the failed attempt too, without opening a trace.
    assert {trace_id: value.splitlines()[0] for trace_id, value in shown["column"].items()} == {
        trace_id: outcome.label for trace_id, outcome in expected.items()
    }
    assert set(shown["filtered"]) == unhealthy and len(unhealthy) == 4
    for trace_id in unhealthy:
        outcome = expected[trace_id]
        assert shown["filtered"][trace_id] == [
            [viewer.VERDICT, "unhealthy"],
            [viewer.REWARD, outcome.reward_shown],
            [viewer.ROLLOUT, outcome.label],
        ]
