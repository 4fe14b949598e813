"""The report's and the comparison's HTML pages, as a person sees them in a browser (``make e2e-ui``).

Builds pages with the real command from real span files (the demo pipeline run under
``opentelemetry-instrument``, and the NeMo Gym 0.7.0 run in ``tests/data/e2e_runs/``), opens them
in headless Chromium (Debian's ``chromium``, over the DevTools protocol, ``e2e/cdp.py``) in a
1400 x 900 window, and reads the rendered page: a click on a column header sorts the rollouts,
typing filters them, the succeeded-but-unhealthy list names the right rollouts, no main table is
wider than the window, the charts' count axes are whole numbers and their time axes have units.
Pages and screenshots stay in ``.e2e-work/report/`` (``GYM_REPORT_WORK`` for another folder).
Every wait polls with a deadline; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

E2E = Path(__file__).resolve().parent
REPO = E2E.parent
sys.path[:0] = [str(REPO / "demo"), str(E2E)]

import run_demo  # noqa: E402
from cdp import Browser  # noqa: E402

WORK = Path(os.environ.get("GYM_REPORT_WORK", REPO / ".e2e-work" / "report"))
SHOTS = WORK / "screenshots"
GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
RUN_070 = REPO / "tests" / "data" / "e2e_runs" / "nemo-gym-0.7.0"
WIDTH, HEIGHT = 1400, 900
SMALL_RUN_PAGE = 1_500_000  # bytes: the bound for a small run's page
MAIN_TABLES = ("tasks-table", "rollouts-table", "reward-health", "succeeded-unhealthy-table", "unhealthy-table")

VISIBLE_ROWS = """(selector) => [...document.querySelectorAll(selector + ' tbody tr')]
    .filter((row) => !row.hidden)
    .map((row) => [...row.cells].map((cell) => cell.innerText.trim()))"""


def gym_instrument(*arguments: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    process = subprocess.run([str(GYM_INSTRUMENT), *arguments], capture_output=True, text=True, timeout=300)
    assert process.returncode == code, process.stderr
    return process


@pytest.fixture(scope="module")
def pages() -> dict[str, Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    spans, _, _ = run_demo.run_pipeline(WORK / "demo")
    built = {"demo": WORK / "demo.html", "070": WORK / "nemo-gym-0.7.0.html", "compare": WORK / "compare.html"}
    # The demo's masked and no-answer rollouts: 2 of 12 infrastructure failures, over the default 5 % (exit code 4).
    gym_instrument("report", str(spans), "--html", str(built["demo"]), "--trace-url", "phoenix", code=4)
    gym_instrument("report", str(RUN_070), "--html", str(built["070"]))  # the run's folder: its span file is found
    # Run B: the same real run, with task weather-sf's rewards dropped to 0 and task #2's raised to 1.
    run_b = WORK / "run_b.otlp.jsonl"
    run_b.write_text("".join(_changed_rewards(line) for line in (RUN_070 / "live_spans.otlp.jsonl").open()))
    gym_instrument("compare", str(RUN_070 / "live_spans.otlp.jsonl"), str(run_b), "--html", str(built["compare"]))
    return built


def _changed_rewards(line: str) -> str:
    batch = json.loads(line)
    new_reward = {"3-0": 0.0, "3-1": 0.0, "2-0": 1.0, "2-1": 1.0}  # weather-sf is task 3, #2 is task 2
    for resource in batch.get("resourceSpans", []):
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                values = {item["key"]: item["value"] for item in span.get("attributes", [])}
                rollout_id = values.get("nemo.gym.rollout.id", {}).get("stringValue")
                if span["name"] == "gym.verify" and rollout_id in new_reward:
                    values["nemo.gym.rollout.reward"] = {"doubleValue": new_reward[rollout_id]}
                    span["attributes"] = [{"key": key, "value": value} for key, value in values.items()]
    return json.dumps(batch, separators=(",", ":")) + "\n"


async def click(page: Browser, selector: str) -> None:
    """A real mouse click (pressed, released) at the middle of the element, scrolled into view first."""
    script = f"""(() => {{
        const element = document.querySelector({json.dumps(selector)});
        element.scrollIntoView({{block: 'center'}});
        const box = element.getBoundingClientRect();
        return [box.x + box.width / 2, box.y + box.height / 2];
    }})()"""
    x, y = await page.evaluate(script)
    for kind in ("mousePressed", "mouseReleased"):
        await page.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})


async def type_into(page: Browser, selector: str, text: str) -> None:
    await click(page, selector)
    await page.evaluate(f"document.querySelector({json.dumps(selector)}).select()")
    await page.send(
        "Input.dispatchKeyEvent", {"type": "keyDown", "key": "Backspace", "code": "Backspace", "windowsVirtualKeyCode": 8}
    )
    await page.send(
        "Input.dispatchKeyEvent", {"type": "keyUp", "key": "Backspace", "code": "Backspace", "windowsVirtualKeyCode": 8}
    )
    if text:
        await page.send("Input.insertText", {"text": text})


async def rows(page: Browser, selector: str) -> list[list[str]]:
    return list(await page.evaluate(f"({VISIBLE_ROWS})({json.dumps(selector)})"))


async def shot(page: Browser, name: str, anchor: str | None = None) -> Path:
    if anchor:
        await page.evaluate(f"document.querySelector({json.dumps(anchor)}).scrollIntoView({{block: 'start'}})")
    else:
        await page.evaluate("window.scrollTo(0, 0)")
    await asyncio.sleep(0.3)  # one frame after the scroll; the screenshot reads what is painted
    return await page.screenshot(SHOTS / f"{name}.png")


async def overflow(page: Browser) -> dict[str, Any]:
    """How far the page and each main table's box reach past what is shown (0: they fit)."""
    script = f"""(() => {{
        const result = {{page: document.documentElement.scrollWidth - window.innerWidth}};
        for (const id of {json.dumps([*MAIN_TABLES, "compare-tasks", "overall-table"])}) {{
            const table = document.getElementById(id);
            if (!table) continue;
            const box = table.parentElement;
            result[id] = Math.max(box.scrollWidth - box.clientWidth, box.getBoundingClientRect().right - window.innerWidth);
        }}
        return result;
    }})()"""
    return dict(await page.evaluate(script))


def look(path: Path, steps: Any) -> Any:
    async def run() -> Any:
        async with Browser(width=WIDTH, height=HEIGHT) as page:
            await page.goto(path.resolve().as_uri())
            await page.wait_for_text("gym-instrument")
            return await steps(page)

    return asyncio.run(run())


def test_the_demo_page_is_small_fits_the_window_and_has_integer_count_axes(pages: dict[str, Path]) -> None:
    assert pages["demo"].stat().st_size < SMALL_RUN_PAGE

    async def steps(page: Browser) -> Any:
        await shot(page, "report-top")
        await shot(page, "report-tasks", "#tasks")
        await shot(page, "report-time", "#time")
        ticks = await page.evaluate("[...document.querySelectorAll('svg.chart .count-tick')].map((t) => t.textContent)")
        times = await page.evaluate("[...document.querySelectorAll('svg.chart .x-tick')].map((t) => t.textContent)")
        charts = await page.evaluate("[...document.querySelectorAll('figcaption')].map((c) => c.innerText)")
        reward_chart = await page.evaluate("document.querySelector('figure svg').textContent")
        return await overflow(page), ticks, times, charts, reward_chart, await page.text()

    sizes, ticks, times, charts, reward_chart, text = look(pages["demo"], steps)
    assert all(value <= 0 for value in sizes.values()), sizes
    assert ticks and all(tick.isdigit() for tick in ticks), ticks  # counts: 0, 1, 2 … never 0.5
    assert times and all(tick.endswith((" ms", " s")) for tick in times), times
    assert any(caption.startswith("Reward of every rollout (12 rollouts)") for caption in charts), charts
    for outcome in ("masked", "failure kind"):  # every rollout is in the reward chart, scored or not
        assert outcome in reward_chart
    assert "pass@1 is the mean of the tasks' success rates" in text and "Mean reward and success are over scored rollouts" in text


def test_every_rollout_sorts_and_filters(pages: dict[str, Path]) -> None:
    async def steps(page: Browser) -> Any:
        seen: dict[str, Any] = {"all": await rows(page, "#rollouts-table")}
        await click(page, "#rollouts-table thead th:nth-child(5)")  # reward
        seen["reward up"] = await rows(page, "#rollouts-table")
        await click(page, "#rollouts-table thead th:nth-child(5)")
        seen["reward down"] = await rows(page, "#rollouts-table")
        await click(page, "#rollouts-table thead th:nth-child(8)")  # duration
        seen["duration up"] = await rows(page, "#rollouts-table")
        await shot(page, "report-rollouts-sorted", "#rollouts")
        await type_into(page, "#rollouts-filter", "arith-002")
        seen["arith-002"] = await rows(page, "#rollouts-table")
        seen["shown"] = await page.evaluate("document.querySelector('.filters .shown').textContent")
        await shot(page, "report-rollouts-filtered", "#rollouts")
        await type_into(page, "#rollouts-filter", "")
        await page.evaluate(
            "(() => { const s = document.getElementById('rollouts-verdict'); s.value = 'unhealthy';"
            " s.dispatchEvent(new Event('change')); })()"
        )
        seen["unhealthy"] = await rows(page, "#rollouts-table")
        return seen

    seen = look(pages["demo"], steps)
    assert len(seen["all"]) == 13
    rewards_up = [row[4] for row in seen["reward up"]]
    assert rewards_up[:10] == ["0", "0"] + ["1"] * 8 and set(rewards_up[10:]) == {"masked", "failure: no_answer", "failed"}
    assert [row[4] for row in seen["reward down"]][:10] == ["1"] * 8 + ["0", "0"]
    durations = [float(row[7].split()[0]) for row in seen["duration up"]]
    assert durations == sorted(durations) and len(durations) == 13
    assert sorted(row[2].split("\n")[0] for row in seen["arith-002"]) == ["1-0", "1-1", "1-2", "1-2-a1"]
    assert seen["shown"] == "4 shown"
    retried = {row[2].split("\n")[0]: row for row in seen["arith-002"]}
    assert "retry of 1-2" in retried["1-2-a1"][2] and "retried as 1-2-a1" in retried["1-2"][2]
    assert retried["1-2"][5] == "failed: AgentUnavailable"
    assert sorted(row[2] for row in seen["unhealthy"]) == ["0-2", "1-1", "2-2", "3-1"]


def test_succeeded_but_unhealthy_rollouts_of_a_real_nemo_gym_run(pages: dict[str, Path]) -> None:
    async def steps(page: Browser) -> Any:
        await shot(page, "report-070-reward-health", "#reward-health-section")
        await shot(page, "report-070-tasks", "#tasks")
        heading = await page.evaluate("document.getElementById('succeeded-unhealthy').innerText")
        crossed = await rows(page, "#reward-health")
        return (
            heading,
            await rows(page, "#succeeded-unhealthy-table"),
            crossed,
            await rows(page, "#tasks-table"),
            await overflow(page),
        )

    heading, flagged, crossed, tasks, sizes = look(pages["070"], steps)
    assert heading == "Succeeded but unhealthy: 4 rollouts"
    assert sorted(row[1] for row in flagged) == ["3-0", "3-1", "4-0", "4-1"]
    assert {row[2] for row in flagged} == {"1"} and {row[3] for row in flagged} == {"model_call_zero_completion_tokens"}
    assert crossed[0][:3] == ["success", "5", "4"]  # success: healthy 5, unhealthy 4
    labels = [row[0] for row in tasks]
    assert "e2e_mcqa_native/native-ohm" in labels and not any("{" in label for label in labels)
    assert all(value <= 0 for value in sizes.values()), sizes


def test_the_comparison_puts_the_task_that_got_worse_first(pages: dict[str, Path]) -> None:
    async def steps(page: Browser) -> Any:
        await shot(page, "compare-top")
        await shot(page, "compare-tasks", "#tasks")
        return await rows(page, "#compare-tasks"), await rows(page, "#overall-table"), await overflow(page)

    tasks, overall, sizes = look(pages["compare"], steps)
    assert tasks[0][:2] == ["weather-sf", "worse"] and tasks[0][2] == "1.00 → 0.00" and tasks[0][3] == "-1.00"
    assert tasks[-1][:2] == ["#2", "better"] and tasks[-1][2] == "0.50 → 1.00"
    assert [row[1] for row in tasks[1:-1]] == ["same"] * 5
    mean = next(row for row in overall if row[0].startswith("mean reward"))
    assert mean[1:] == ["0.64", "0.57", "-0.07"]  # 9 of 14 rewards of 1, now 8 (two lost, one gained)
    assert all(value <= 0 for value in sizes.values()), sizes


def test_screenshots_are_kept(pages: dict[str, Path]) -> None:
    names = sorted(path.name for path in SHOTS.glob("*.png"))
    for name in ("report-top.png", "report-rollouts-filtered.png", "report-070-reward-health.png", "compare-tasks.png"):
        assert name in names, names
        assert (SHOTS / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nscreenshots: {SHOTS}/")


def test_infrastructure_failures_come_first_on_the_page(pages: dict[str, Path]) -> None:
    async def steps(page: Browser) -> Any:
        await shot(page, "report-infra-failures")
        script = """(() => {
            const section = document.getElementById('infra-failures');
            const cards = document.querySelector('.cards');
            return {
                text: section.innerText,
                over: section.classList.contains('over'),
                top: section.getBoundingClientRect().top,
                before_cards: section.getBoundingClientRect().bottom <= cards.getBoundingClientRect().top,
                shown: section.getBoundingClientRect().bottom <= window.innerHeight,
            };
        })()"""
        return await page.evaluate(script)

    section = look(pages["demo"], steps)
    assert section["over"] and section["before_cards"] and section["shown"], section  # on the first screen, first
    assert section["text"].startswith("Infrastructure failures: 2 of 12 rollouts")
    assert "OVER THE LIMIT: infrastructure failures: 2 of 12 rollouts (17%, over --max-infra-failures 5%)" in section["text"]
    assert "masked 1, no_answer 1" in section["text"]


def test_the_comparison_names_each_run_and_links_its_report(pages: dict[str, Path]) -> None:
    async def steps(page: Browser) -> Any:
        await shot(page, "compare-named")
        names = await page.evaluate("document.querySelector('main > p').innerText")
        link = await page.evaluate("document.querySelector('main > p a').href")
        header = await page.evaluate("[...document.querySelectorAll('#compare-tasks thead th')].map((th) => th.innerText)")
        return names, link, header

    names, link, header = look(pages["compare"], steps)
    assert names.splitlines()[0] == f"A: nemo-gym-e2e {RUN_070 / 'live_spans.otlp.jsonl'} · its report"
    assert link == pages["compare"].with_name("compare-a.html").resolve().as_uri()
    assert pages["compare"].with_name("compare-a.html").is_file()
    assert {"masked A → B", "time p50 · p95, ms A → B"} <= set(header)
