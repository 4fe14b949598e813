"""``make readme-test``: the shell blocks of README.md and docs/*.md, run as written, in a fresh venv on a copy of the checkout.

Every fenced ``sh`` block of README.md, then of each ``docs/*.md`` in name order, runs in the
order the page has them, with ``bash -e`` from the root of a copy of this checkout (the files git
tracks, and new files not ignored, committed into a fresh git repository so that ``git status``
shows what a block wrote), with a new venv's ``bin`` first on ``PATH`` as a reader's activated
venv would be, nothing installed in it beforehand, and no ``OTEL_*`` variable: a fresh machine,
with no Collector. A block preceded by ``<!-- readme-test: skip: REASON -->`` is not run; the
reason is printed. A block preceded by ``<!-- readme-test: collector: ... -->`` runs with an OTLP
receiver on 127.0.0.1:4318, where a reader's Collector listens by default; no other block has one.
Then the tests check what the blocks left, as a reader would: their output, the files they wrote,
the spans at the receiver, and a clean ``git status``. Logs stay in ``.e2e-work/readme/``.

``README_TEST_BLOCKS=quick`` (a comma-separated list of substrings of ``FILE:LINE`` or of the
block's text) runs only the matching blocks, to check one block while writing it; the tests whose
block did not run are skipped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gym_instrument.tools.report.otlp import ReadStats, read_spans  # noqa: E402
from tests.otlp_receiver import OtlpReceiver  # noqa: E402

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
WORK = Path(os.environ.get("GYM_README_WORK", REPO / ".e2e-work" / "readme"))
PYTHON = os.environ.get("README_PYTHON", "python3")  # what makes the reader's venv
SELECTED = [item for item in os.environ.get("README_TEST_BLOCKS", "").split(",") if item]
MARKER = re.compile(r"<!-- readme-test: (?P<kind>skip|collector): (?P<reason>\S.*?) -->")
SHELL_FENCES = ("```sh", "```bash", "```shell", "```console")
# Left out of the reader's environment: this run's own telemetry, venv, Python and make settings.
FROM_THIS_RUN = ("OTEL_", "VIRTUAL_ENV", "PYTHON", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
BLOCK_TIMEOUT = 1800  # seconds: a block may set up a venv and run the test suite
COLLECTOR_PORT = 4318  # OTLP/HTTP's default port
# What an OTLP exporter prints when it has nowhere to send (the quick start must never show them).
EXPORT_TROUBLE = ("Failed to export", "Connection refused", "Transient error", "Max retries exceeded")
PIPELINE_TARGETS = (
    "rollout_pipeline:Collector.dispatch=dispatch@nemo_gym,rollout_pipeline:ResourcesServer.verify=verify@nemo_gym,"
    "rollout_pipeline:run_health_checks=health@nemo_gym"
)


@dataclass
class Block:
    page: str  # README.md or docs/NAME.md
    line: int  # of its opening fence, 1-based
    code: str
    skip: str | None  # the reason it is not run
    collector: bool = False  # runs with a receiver where a Collector would listen
    returncode: int | None = None
    output: str = ""
    dirty: list[str] = field(default_factory=list)  # git status --porcelain after it ran

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def shell_blocks(text: str, page: str = "README.md") -> list[Block]:
    """A page's shell blocks, with the marker on the line before each (blank lines between allowed)."""
    lines = text.splitlines()
    blocks = []
    number = 0
    while number < len(lines):
        if lines[number].strip() in SHELL_FENCES:
            end = next(index for index in range(number + 1, len(lines)) if lines[index].strip() == "```")
            before = next((line.strip() for line in reversed(lines[:number]) if line.strip()), "")
            marker = MARKER.fullmatch(before)
            block = Block(page, number + 1, "\n".join(lines[number + 1 : end]), None)
            if marker and marker["kind"] == "skip":
                block.skip = marker["reason"]
            block.collector = bool(marker and marker["kind"] == "collector")
            blocks.append(block)
            number = end
        number += 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in shell_blocks(page.read_text(), str(page.relative_to(REPO)))]


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
    git = ["git", "-c", "user.name=readme-test", "-c", "user.email=readme-test@localhost", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=target, check=True)
    subprocess.run([*git, "add", "-A"], cwd=target, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the checkout as copied"], cwd=target, check=True)


def git_status(checkout: Path) -> list[str]:
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=checkout, capture_output=True, text=True, check=True
    )
    return status.stdout.splitlines()


class Collector(OtlpReceiver):
    """The test receiver on 127.0.0.1:4318, where an OTLP/HTTP exporter sends by default."""

    def __init__(self) -> None:
        super().__init__()
        handler = self._server.RequestHandlerClass
        self._server.server_close()
        self._server = ThreadingHTTPServer(("127.0.0.1", COLLECTOR_PORT), handler)
        self.endpoint = f"http://localhost:{COLLECTOR_PORT}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)


@dataclass
class Ran:
    checkout: Path
    blocks: list[Block]
    collector: OtlpReceiver | None

    def block(self, page: str, containing: str) -> Block:
        """The one block of ``page`` that contains the text and ran (the test is skipped if it was not selected)."""
        written = [block for block in self.blocks if block.page == page and containing in block.code and block.skip is None]
        assert len(written) == 1, f"{page}: {len(written)} runnable blocks contain {containing!r}"
        if written[0].returncode is None:
            pytest.skip(f"{written[0].where} not selected by README_TEST_BLOCKS")
        return written[0]


def selected(block: Block) -> bool:
    return not SELECTED or any(item in block.where or item in block.code for item in SELECTED)


def run_block(block: Block, checkout: Path, environment: dict[str, str]) -> None:
    print(f"\n{block.where}: running\n{block.code}", flush=True)
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
    block.dirty = git_status(checkout)
    log = WORK / f"block-{block.page.replace('/', '-')}-{block.line}.log"
    log.write_text(f"$ {block.code}\n{process.stdout}\n(exit {process.returncode})\n")
    print(f"{block.where}: exit {process.returncode} (log: {log})")


@pytest.fixture(scope="module")
def ran() -> Any:
    shutil.rmtree(WORK, ignore_errors=True)
    checkout, venv = WORK / "checkout", WORK / "venv"
    checkout.mkdir(parents=True)
    copy_checkout(checkout)
    subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
    blocks = all_blocks()
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith(FROM_THIS_RUN)},
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
    }
    collector = None
    for block in blocks:
        if block.skip is not None:
            print(f"\n{block.where}: not run: {block.skip}")
            continue
        if not selected(block):
            continue
        if not block.collector:
            run_block(block, checkout, environment)
            continue
        try:
            collector = Collector()
        except OSError as error:
            block.skip = f"port {COLLECTOR_PORT} is taken on this machine ({error.strerror})"
            print(f"\n{block.where}: not run: {block.skip}")
            continue
        with collector:
            run_block(block, checkout, environment)
    yield Ran(checkout, blocks, collector)


def spans_in(path: Path) -> list[Any]:
    return list(read_spans([path], ReadStats(), progress=False))


# -- every block --------------------------------------------------------------------------------


def test_every_shell_block_runs_as_written_or_says_why_not(ran: Ran) -> None:
    failed = [f"{block.where} exit {block.returncode}:\n{block.output[-3000:]}" for block in ran.blocks if block.returncode]
    assert not failed, "\n\n".join(failed)
    assert all(block.skip.strip() for block in ran.blocks if block.skip is not None)
    if not SELECTED:
        run = [block for block in ran.blocks if block.skip is None]
        assert len(run) >= 5 and all(block.returncode == 0 for block in run)
        assert {block.page for block in run} >= {"README.md", "docs/looking-at-runs.md"}


def test_no_block_writes_into_the_repository(ran: Ran) -> None:
    dirty = {block.where: block.dirty for block in ran.blocks if block.dirty}
    assert not dirty, f"files outside .gitignore after these blocks: {dirty}"


# -- README.md ----------------------------------------------------------------------------------


def test_two_commands_leave_the_demo_and_pass_the_tests(ran: Ran) -> None:
    block = ran.block("README.md", "make demo")
    assert re.search(r"^task id\s+repeat\s+rollout id\s+reward\s+verdict", block.output, re.MULTILINE)
    assert sorted(path.name for path in (ran.checkout / "demo" / "output").iterdir()) == [
        "report.html",
        "rollouts.jsonl",
        "spans.otlp.jsonl",
    ]
    summary = re.findall(r"^(\d+ passed.*) in [\d.]+s", block.output, re.MULTILINE)  # make test: pytest's last line
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], block.output[-2000:]


def test_the_quick_start_writes_the_spans_to_a_file_with_no_collector(ran: Ran) -> None:
    block = ran.block("README.md", "OTEL_PYTHON_GYM_JSON_FILE=out/spans.jsonl")
    assert PIPELINE_TARGETS in block.code
    trouble = [line for line in block.output.splitlines() if any(words in line for words in EXPORT_TROUBLE)]
    assert not trouble, "\n".join(trouble)
    lines = (ran.checkout / "out" / "spans.jsonl").read_text().splitlines()
    batches = [json.loads(line) for line in lines]  # every line is one OTLP/JSON document
    assert any("resourceSpans" in batch for batch in batches) and any("resourceMetrics" in batch for batch in batches)
    spans = spans_in(ran.checkout / "out" / "spans.jsonl")
    assert Counter(span.name for span in spans) == {"gym.rollout.dispatch": 13, "gym.verify": 12, "gym.rollout.health": 12}
    task_ids = {span.attributes.get("nemo.gym.task.id") for span in spans if span.name == "gym.rollout.dispatch"}
    assert task_ids == {"arith-001", "arith-002", "geo-17", None}
    assert "rollouts: 12 (4 tasks; 13 dispatches, 1 a failed attempt that a retry replaced)" in block.output  # its summary
    # Its first line: the demo's masked and no-answer rollouts, within the limit the quick start sets.
    assert "infrastructure failures: 2 of 12 rollouts (17%, within --max-infra-failures 20%)" in block.output
    assert not (ran.checkout / "rollouts.jsonl").exists() and (ran.checkout / "out" / "rollouts.jsonl").is_file()
    assert not block.dirty


def test_the_readme_is_short_and_states_no_figures() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text) < 12_000
    for page in PAGES:
        words = page.read_text()
        assert "SPEC" not in words, f"{page.name} cites a SPEC that is not in the repository"
        ratios = re.findall(r"\b\d\.\d{2,3} ?[×x]\b|\b\d\.\d{2,3}×", words)
        assert not ratios, f"{page.name} states benchmark ratios {ratios}: they belong in benchmarks/RESULTS.md"


def test_the_nemo_gym_page_states_the_cost_results_md_measured() -> None:
    """docs/nemo-gym.md's cost sentence carries the figures of benchmarks/RESULTS.md, not figures typed apart."""
    results = (REPO / "benchmarks" / "RESULTS.md").read_text()
    alone = results[results.index("<!-- whole_run_gym:") : results.index("<!-- /whole_run_gym -->")]
    none, _, added = re.search(r"^\| \*\*all\*\* \| ([\d.]+) \| ([\d.]+) \| \+([\d.]+) \|$", alone, re.MULTILINE).groups()
    launch = results[results.index("<!-- launch_cost:") : results.index("<!-- /launch_cost -->")]
    launcher, ours = re.search(r"launcher adds (\d+) ms .*?; this package on it adds (\d+) ms", launch).groups()
    page = " ".join((REPO / "docs" / "nemo-gym.md").read_text().split())
    assert f"used {added} ms more CPU per rollout than the untraced run's {none} ms" in page
    assert f"launcher adds {launcher} ms of CPU to a start and this package {ours} ms" in page
    sizes = results[results.index("<!-- whole_run_sizes:") : results.index("<!-- /whole_run_sizes -->")]
    fixed, per_rollout, started = re.search(
        r"adds about (\d+) ms \+ N x ([\d.]+) ms of CPU to an untraced run .*? adds (\d+) ms more", sizes
    ).groups()
    assert f"about {fixed} ms + N x {per_rollout} ms of CPU more than an untraced one, and {started} ms more" in page


def test_the_nemo_gym_install_block_pins_what_make_e2e_installs() -> None:
    """The copy-paste block of docs/nemo-gym.md installs the pins the package-alone e2e venv is built from."""
    (block,) = [b for b in shell_blocks((REPO / "docs" / "nemo-gym.md").read_text()) if "nemo-gym==" in b.code]
    joined = block.code.replace("\\\n", " ")
    (install,) = [line for line in joined.splitlines() if line.startswith("pip install ")]
    words = shlex.split(install)[2:]
    requirements = REPO / "e2e" / "requirements-070-bare.txt"
    pins = [line.split("#")[0].strip() for line in requirements.read_text().splitlines()]
    pins = [pin for pin in pins if pin and not pin.startswith("oteltap")]  # (the e2e's own receiver)
    assert "--ignore-requires-python" in words
    assert "gym-instrument[report] @ git+https://…" in words
    assert sorted(w for w in words if not w.startswith(("-", "gym-instrument"))) == sorted(pins)


def test_every_link_between_the_pages_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in headings(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def headings(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces as dashes."""
    titles = re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


# -- docs/looking-at-runs.md --------------------------------------------------------------------


def test_the_report_commands_leave_the_page_and_the_figures(ran: Ran) -> None:
    block = ran.block("docs/looking-at-runs.md", "gym-instrument report out/spans/demo.jsonl")
    out = ran.checkout / "out"
    assert "rollouts: 12 (4 tasks; 13 dispatches, 1 a failed attempt that a retry replaced)" in block.output
    assert len(spans_in(out / "spans" / "demo.jsonl")) == 37
    assert "Reward per task" in (out / "report.html").read_text()
    figures = json.loads((out / "figures.json").read_text())
    assert [task["task"] for task in figures["tasks"]] == ["arith-001", "arith-002", "geo-17", "#3"]
    linked = (out / "linked" / "report.html").read_text()  # --trace-url phoenix; --html a folder: its report.html
    assert len(set(re.findall(r'href="http://127\.0\.0\.1:6006/redirects/traces/([0-9a-f]{32})"', linked))) == 13
    assert "Reward per task" in (out / "spans" / "report.html").read_text()  # python -m: beside the first input


def test_the_replay_example_replays_the_kept_run(ran: Ran) -> None:
    block = ran.block("docs/looking-at-runs.md", "gym-instrument replay tests/data/e2e_runs/nemo-gym-0.7.0/ --output")
    assert "replayed 14 dispatches (0 failed), 14 verify and 14 health spans" in block.output
    spans = spans_in(ran.checkout / "out" / "replayed.jsonl")
    assert len(spans) == 42 and all(span.attributes["gym.replayed"] is True for span in spans)
    (health,) = re.findall(r"^health: .*$", block.output, re.MULTILINE)  # the report's summary
    assert sorted(health.removeprefix("health: ").split(", ")) == ["healthy 5", "unhealthy 9"]


def test_the_collector_example_sends_the_loops_spans_to_the_collector(ran: Ran) -> None:
    block = ran.block("docs/looking-at-runs.md", "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318")
    assert block.collector and ran.collector is not None
    spans = [span for span in ran.collector.spans if span["service"] == "to-collector"]
    assert Counter(span["name"] for span in spans) == {"gym.rollout.dispatch": 13, "gym.verify": 12, "gym.rollout.health": 12}
    assert len([span for span in spans if "nemo.gym.rollout.reward" in span["attributes"]]) == 10
    assert ran.collector.other_posts >= 1  # its metrics went to the Collector too
    assert not [line for line in block.output.splitlines() if any(words in line for words in EXPORT_TROUBLE)]
