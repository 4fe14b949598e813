"""``benchmarks/whole_run.py``, the entry point: the RESULTS.md sections it writes and keeps, the code version
it reports, and its refusal of a busy machine."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from benchmarks import sections, whole_run
from gym_harness.bench import render, running, workload

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def test_make_bench_keeps_the_whole_run_sections(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmarks\n\nold micro table\n")
    sections.WHOLE_RUN.write(results, "## A whole real run\n\nfirst")
    sections.WHOLE_RUN.write(results, "## A whole real run\n\nsecond")
    sections.WHOLE_RUN_PROFILE.write(results, "### profile")
    sections.WHOLE_RUN.write(results, "## A whole real run\n\nthird", before=sections.WHOLE_RUN_PROFILE)
    text = results.read_text()
    assert text.count(sections.WHOLE_RUN.begin) == 1 and "third" in text and "second" not in text
    assert text.index(sections.WHOLE_RUN.end) < text.index(sections.WHOLE_RUN_PROFILE.begin)

    fresh = tmp_path / "FRESH.md"
    fresh.write_text("# Benchmarks\n")
    sections.WHOLE_RUN_PROFILE.write(fresh, "### profile")
    sections.WHOLE_RUN.write(fresh, "## timed", before=sections.WHOLE_RUN_PROFILE)
    assert fresh.read_text().index("## timed") < fresh.read_text().index("### profile")

    regenerated = sections.keep(results, "# Benchmarks\n\nnew micro table\n")
    assert "new micro table" in regenerated and "old micro table" not in regenerated
    assert sections.WHOLE_RUN.of(regenerated) == sections.WHOLE_RUN.of(text)
    assert sections.WHOLE_RUN_PROFILE.of(regenerated) == sections.WHOLE_RUN_PROFILE.of(text)


def test_the_code_version_is_dirty_for_code_not_for_results(tmp_path: Path) -> None:
    def git(*arguments: str) -> str:
        done = subprocess.run(["git", "-C", str(tmp_path), *arguments], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    git("init", "-q")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "RESULTS.md").write_text("old figures\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")
    commit = git("rev-parse", "--short", "HEAD")
    assert sections.code_version(tmp_path) == commit
    (tmp_path / "benchmarks" / "RESULTS.md").write_text("new figures\n")  # a run's own output
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert sections.code_version(tmp_path) == commit
    (tmp_path / "code.py").write_text("x = 2\n")
    assert sections.code_version(tmp_path) == commit + "-dirty"
    assert sections.code_version(tmp_path / "absent") == "unknown"


def test_the_harness_refuses_a_busy_machine_without_force(tmp_path: Path) -> None:
    # --max-busy -1: any machine is busy; the run must stop before starting anything.
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.whole_run", "--quick", "--max-busy", "-1", "--no-output"],
        cwd=REPO,  # as `make bench-e2e` runs it: from the checkout's root, which puts the harness on the path
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "REFUSED" in completed.stdout and "--force" in completed.stdout


def test_a_together_run_writes_its_own_section_beside_the_alone_one(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    sections.WHOLE_RUN.write(results, "## A whole real run: alone\n\n`make bench-e2e` (alone)")
    sections.WHOLE_RUN_TOGETHER.write(results, render.together_heading("## A whole real run: x\n\n`make bench-e2e` (y)"))
    text = results.read_text()
    assert "## A whole real run: alone" in text and "`make bench-e2e` (alone)" in text  # the alone run's stays
    assert "### Together: a whole real run: x" in text and "`make bench-e2e BENCH_E2E_ARGS=--together` (y)" in text


def _finished(text: str, **changes: object) -> running.Finished:
    run = dataclasses.replace(workload.Workload(tasks=1, repeats=1, concurrency=1, rounds=1), **changes)
    return running.Finished(run, text, ["- Machine: test"], [])


def test_a_variant_run_writes_its_own_section(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    sections.WHOLE_RUN_TOGETHER.write(results, "### Together: a whole real run: default\n\n`make bench-e2e` (z)")
    body = "## A whole real run: NeMo Gym 0.7.0 end to end\n\n`make bench-e2e` (y)"
    for variant in workload.VARIANTS:
        section, text = whole_run.section_of(_finished(body, together=True, variant=variant), profile=False)
        section.write(results, text)
    text = results.read_text()
    assert "### Together: a whole real run: default" in text  # the default run's section stays
    assert "### Baggage kept in-process: full with `OTEL_PYTHON_GYM_BAGGAGE=false`" in text
    assert "`make bench-e2e BENCH_E2E_ARGS='--together --no-baggage'` (y)" in text
    assert "`make bench-e2e BENCH_E2E_ARGS='--together --drop-ours'` (y)" in text
    assert sections.WHOLE_RUN_NO_BAGGAGE.begin in text and sections.WHOLE_RUN_DROP_OURS.begin in text


def test_each_kind_of_run_writes_its_own_section() -> None:
    body = "## A whole real run: NeMo Gym 0.7.0 end to end\n\n`make bench-e2e` (y)"
    assert whole_run.section_of(_finished(body), profile=False) == (sections.WHOLE_RUN, body)
    together, text = whole_run.section_of(_finished(body, together=True), profile=False)
    assert together is sections.WHOLE_RUN_TOGETHER and text.startswith("### Together: a whole real run")
    profiled, text = whole_run.section_of(_finished(body), profile=True)
    assert profiled is sections.WHOLE_RUN_PROFILE and text.endswith("- Machine: test")


def test_a_run_of_the_gym_configuration_writes_its_own_section(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    sections.WHOLE_RUN.write(results, "## A whole real run: NeMo Gym 0.7.0 end to end\n\n`make bench-e2e` (default)")
    body = "## A whole real run: NeMo Gym 0.7.0 end to end\n\n`make bench-e2e` (y)"
    finished = dataclasses.replace(_finished(body), configurations=("none", "gym"))
    section, text = whole_run.section_of(finished, profile=False, arguments="--configurations none,gym --rounds 8")
    section.write(results, text)
    text = results.read_text()
    assert "`make bench-e2e` (default)" in text  # the default run's section stays
    assert "### This package alone: NeMo Gym 0.7.0 end to end" in text
    assert "`make bench-e2e BENCH_E2E_ARGS='--configurations none,gym --rounds 8'` (y)" in text
    assert sections.WHOLE_RUN_GYM.begin in text


def test_the_gym_section_says_how_to_run_it_again() -> None:
    options = whole_run.argparse.Namespace(
        configurations=["none", "gym"], tasks=None, repeats=None, concurrency=None, rounds=8, blocks=2
    )
    assert whole_run.rerun_arguments(options) == "--configurations none,gym --rounds 8 --blocks 2"


def test_a_run_of_none_hand_and_gym_and_a_run_at_two_sizes_write_sections_of_their_own(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    sections.WHOLE_RUN_GYM.write(results, "### This package alone: NeMo Gym 0.7.0 end to end\n\n(gym / none)")
    body = "## A whole real run: NeMo Gym 0.7.0 end to end\n\n`make bench-e2e` (y)"
    finished = dataclasses.replace(_finished(body), configurations=("none", "hand", "gym"))
    section, text = whole_run.section_of(finished, profile=False, arguments="--configurations none,hand,gym --rounds 12")
    assert section is sections.WHOLE_RUN_HAND
    section.write(results, text)
    sized_body = "## A whole real run at several sizes: what a run of N rollouts costs\n\n`make bench-e2e` (z)"
    sized = dataclasses.replace(_finished(sized_body, sizes=(200, 800)), configurations=("none", "hand", "gym"))
    section, text = whole_run.section_of(sized, profile=False, arguments="--configurations none,hand,gym --sizes 200,800")
    assert section is sections.WHOLE_RUN_SIZES
    section.write(results, text)
    text = results.read_text()
    assert "(gym / none)" in text  # the gym run's section stays
    assert "### Against the same spans by hand: NeMo Gym 0.7.0 end to end" in text
    assert "`make bench-e2e BENCH_E2E_ARGS='--configurations none,hand,gym --rounds 12'` (y)" in text
    assert "### A whole real run at several sizes: what a run of N rollouts costs" in text
    assert "`make bench-e2e BENCH_E2E_ARGS='--configurations none,hand,gym --sizes 200,800'` (z)" in text
    # make bench (benchmarks/run.py) rewrites the file and carries both over.
    regenerated = sections.keep(results, "# Benchmarks\n")
    assert sections.WHOLE_RUN_HAND.of(regenerated) == sections.WHOLE_RUN_HAND.of(text)
    assert sections.WHOLE_RUN_SIZES.of(regenerated) == sections.WHOLE_RUN_SIZES.of(text)


def test_sizes_are_rollouts_each_a_multiple_of_the_repeats() -> None:
    options = whole_run.argparse.Namespace(
        configurations=["none", "hand", "gym"], tasks=None, repeats=None, concurrency=None, rounds=8, blocks=2, sizes=[200, 800]
    )
    assert whole_run.rerun_arguments(options) == "--configurations none,hand,gym --sizes 200,800 --rounds 8 --blocks 2"
    for sizes, wrong in (("200", "two or more sizes"), ("200,802", "multiple of the repeats (4)"), ("200,x", "whole numbers")):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.whole_run", "--sizes", sizes, "--no-output"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and wrong in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
