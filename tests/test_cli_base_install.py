"""``gym-instrument`` after the documented base install (``pip install .``, no extras): no traceback, ever.

A fresh venv gets this checkout without extras (wrapt, opentelemetry-api and
opentelemetry-instrumentation only: no SDK, no tqdm), then every command a user types
runs there: ``report`` (text, JSON and its HTML page) and ``compare`` work; ``replay`` and a
progress bar say in one line which extra to install; bad input (a missing path, an empty file, a
folder without spans, a binary file, a run folder never replayed) is one line and exit code 2.
pip works against PyPI and its cache, as a user's does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_070 = REPO / "tests" / "data" / "e2e_runs" / "nemo-gym-0.7.0"
RUN_040 = REPO / "tests" / "data" / "e2e_runs" / "nemo-gym-0.4.0"
EXTRA = "pip install 'gym-instrument[report]'"


class BaseInstall:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "venv" / "bin"

    def run(self, *arguments: str, module: bool = False) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / "python"), "-m", "gym_instrument"] if module else [str(self.bin / "gym-instrument")]
        process = subprocess.run([*command, *arguments], capture_output=True, text=True, timeout=300, cwd=self.root)
        assert "Traceback" not in process.stderr + process.stdout, process.stderr
        return process


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> BaseInstall:
    root = tmp_path_factory.mktemp("base-install")
    checkout = root / "checkout"  # a copy: pip's build leaves nothing in the repository
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, checkout / name)
    shutil.copytree(REPO / "gym_instrument", checkout / "gym_instrument", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    install = subprocess.run(
        [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(checkout)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    base = BaseInstall(root)
    probe = "import importlib.util as u; print([m for m in ('tqdm', 'opentelemetry.sdk') if u.find_spec(m)])"
    absent = subprocess.run([str(base.bin / "python"), "-c", probe], capture_output=True, text=True, check=True)
    assert absent.stdout.strip() == "[]"  # the premise: none of the report extra is here
    shutil.copy2(RUN_070 / "live_spans.otlp.jsonl", root / "spans.jsonl")
    return base


def test_report_text_json_and_page_need_only_the_base_install(base: BaseInstall) -> None:
    text = base.run("report", "spans.jsonl")
    assert text.returncode == 0 and text.stderr == ""
    assert "rollouts: 14 (7 tasks) = 9 succeeded (reward >= 1) + 5 scored zero" in text.stdout
    assert f"report: {Path('report.html')}" in text.stdout
    page = (base.root / "report.html").read_text()
    assert "Reward per task" in page and "<svg" in page and "rollouts-table" in page

    as_json = base.run("report", "spans.jsonl", "--format", "json", "--no-html")
    assert as_json.returncode == 0 and as_json.stderr == ""
    figures = json.loads(as_json.stdout)
    assert figures["run"]["dispatches"] == 14 and figures["reward_health"]["succeeded_unhealthy_total"] == 4

    module = base.run("report", "spans.jsonl", "--no-html", module=True)
    assert module.returncode == 0 and "rollouts: 14 (7 tasks)" in module.stdout


def test_compare_needs_only_the_base_install(base: BaseInstall) -> None:
    process = base.run("compare", str(RUN_040 / "live_spans.otlp.jsonl"), str(RUN_070), "--format", "json")
    assert process.returncode == 0 and process.stderr == ""
    comparison = json.loads(process.stdout)
    assert comparison["tasks_compared"] == 5 and comparison["only_in_b"] == [
        "e2e_mcqa_native/native-ohm",
        "e2e_mcqa_native/native-prime",
    ]
    text = base.run("compare", str(RUN_040 / "live_spans.otlp.jsonl"), str(RUN_070), "--html", "compare.html")
    assert text.returncode == 0 and "tasks, worse first:" in text.stdout
    assert "Tasks, worse first" in (base.root / "compare.html").read_text()


def test_replay_and_the_progress_bar_say_which_extra_to_install(base: BaseInstall) -> None:
    for arguments in (["replay", str(RUN_070), "--output", "replayed.jsonl"], ["replay", str(RUN_070)]):
        process = base.run(*arguments)
        assert process.returncode == 3 and process.stdout == ""
        (line,) = process.stderr.splitlines()
        assert line.startswith("gym-instrument replay: replay needs the OpenTelemetry SDK") and line.endswith(EXTRA)
        assert "opentelemetry-sdk" in line
    assert not (base.root / "replayed.jsonl").exists()

    progress = base.run("report", "spans.jsonl", "--no-html", "--progress")
    assert progress.returncode == 0 and "rollouts: 14 (7 tasks)" in progress.stdout
    assert progress.stderr.splitlines() == [f"no progress bar: tqdm is not installed ({EXTRA})"]


def test_bad_input_is_one_line_and_exit_code_2(base: BaseInstall) -> None:
    root = base.root
    (root / "empty.jsonl").write_text("")
    (root / "no-spans").mkdir()
    (root / "no-spans" / "notes.txt").write_text("not spans\n")
    (root / "binary.jsonl").write_bytes(bytes(range(256)) * 64)
    run_folder = root / "never-replayed"
    run_folder.mkdir()
    shutil.copy2(RUN_070 / "rollouts.jsonl", run_folder / "rollouts.jsonl")
    cases = {
        "missing.jsonl": "gym-instrument report: no such file or directory: missing.jsonl",
        "empty.jsonl": "gym-instrument report: no spans of gym_instrument in empty.jsonl (0 lines of 1 file(s) read)",
        "no-spans": "gym-instrument report: no OTLP/JSON span files in no-spans",
        "binary.jsonl": "gym-instrument report: no spans of gym_instrument in binary.jsonl (",
        "never-replayed": "gym-instrument report: no OTLP/JSON span files in never-replayed"
        " (1 other .json/.jsonl files left out); never-replayed looks like a NeMo Gym run: make its spans with"
        " `gym-instrument replay never-replayed --output never-replayed/spans.otlp.jsonl`",
    }
    for path, message in cases.items():
        process = base.run("report", path, "--format", "json")
        assert process.returncode == 2 and process.stdout == "", (path, process.stdout)
        (line,) = process.stderr.splitlines()
        assert line.startswith(message), (path, line)
    compared = base.run("compare", "spans.jsonl", "missing.jsonl")
    assert compared.returncode == 2 and compared.stderr == "gym-instrument compare: no such file or directory: missing.jsonl\n"
    replayed = base.run("report", "spans.jsonl", "--trace-url", "http://viewer/{trace}")
    assert replayed.returncode == 2 and len(replayed.stderr.splitlines()) == 1 and "{trace_id}" in replayed.stderr
    unwritable = base.run("report", "spans.jsonl", "--html", "spans.jsonl/report.html")
    assert unwritable.returncode == 2 and len(unwritable.stderr.splitlines()) == 1, unwritable.stderr
