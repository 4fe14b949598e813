"""``report`` and ``compare`` against the ground truth of generated runs (a differential test).

Each example is a run from :mod:`tests.report_runs`: tasks and repeats, multi-step rollouts under
every reward rule (with step data where the rules disagree), failed dispatches and their retries,
failure kinds, masked and non-numeric rewards, verdicts (failed rollouts' too, and re-checks),
tokens, training steps and policy versions (per step: reward, success, infrastructure failures and
tokens, compared step by step), index, template, custom and absent rollout ids, spans of three processes exported by the
real SDK through OpenTelemetry's OTLP/JSON file exporter, lines shuffled within and across files,
some dispatch spans lost. The figures the command prints with ``--format json`` must equal what
:func:`~tests.report_runs.expected_report` computes from the run itself. Most examples call the
command's ``main`` in this process; a few run the installed command.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gym_instrument.tools.cli import main
from tests.report_runs import (
    Run,
    compare_figures,
    differences,
    expected_compare,
    expected_report,
    generate,
    report_figures,
    write,
)

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
# No shrinking: a run drawn from a random stream shrinks slowly and little; a failure prints the whole run and
# every figure that differs instead.
PHASES = (Phase.explicit, Phase.generate)
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None, phases=PHASES)
COMPARE_EXAMPLES = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None, phases=PHASES
)


def run_main(arguments: list[str]) -> tuple[int, str]:
    """The command in this process: its exit code and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        code = main(arguments)
    return code, printed.getvalue()


def described(run: Run) -> str:
    """The run, for a failing example's message."""
    lines = [f"id form {run.id_form}, {run.files} files, threshold {run.threshold}, limit {run.limit}, shared {run.shared_trace}"]
    for item in run.attempts:
        steps = ", ".join(
            f"{step.start - item.start}:{step.reward}{' masked' if step.masked else ''}"
            + (f" {step.failure_kind}" if step.failure_kind else "")
            for step in item.steps
        )
        lines.append(
            f"  {run.label(item.task)} r{item.repeat} a{item.attempt} {item.rollout_id} error={item.error}"
            f" rule={item.rule} [{steps}] verdicts={item.verdicts} read={item.dispatch_read} cross={item.cross_process}"
            f" step={item.step!r} policy={item.policy}"
        )
    return "\n".join(lines)


def options(run: Run) -> list[str]:
    return ["--success-threshold", repr(run.threshold), "--max-infra-failures", repr(run.limit)]


def check_report(run: Run, code: int, printed: str) -> None:
    expected = expected_report(run)
    if expected["run"]["dispatches"] == 0 and not printed:
        assert code in (0, 2)  # nothing of the package's may be left to read: no spans is bad input
        return
    assert code == expected.pop("exit_code"), described(run)
    problems = differences(expected, report_figures(json.loads(printed)))
    assert not problems, "\n".join([described(run), *problems])


@EXAMPLES
@given(st.randoms(use_true_random=False))
def test_report_figures_equal_the_ground_truth(rng: random.Random) -> None:
    run = generate(rng)
    with tempfile.TemporaryDirectory() as folder:
        paths = write(run, rng, Path(folder))
        code, printed = run_main(["report", *map(str, paths), "--no-html", "--format", "json", *options(run)])
    check_report(run, code, printed)


def pair(rng: random.Random) -> tuple[Run, Run]:
    """Two runs of overlapping tasks (B may drop some of A's and add its own), one threshold and limit."""
    run_a = generate(rng)
    tasks = [task for task in run_a.tasks if rng.random() < 0.85] or run_a.tasks[:1]
    if rng.random() < 0.3:
        tasks.append((f"task-new-{rng.randint(0, 99)}", 50 + rng.randint(0, 9)))
    run_b = generate(rng, tasks=tasks, id_form=run_a.id_form if rng.random() < 0.7 else None)
    run_b.threshold, run_b.limit = run_a.threshold, run_a.limit
    return run_a, run_b


def check_compare(run_a: Run, run_b: Run, code: int, printed: str) -> None:
    report_a, report_b = expected_report(run_a), expected_report(run_b)
    if not (report_a["run"]["dispatches"] and report_b["run"]["dispatches"]) and not printed:
        return  # a run with nothing of the package's: bad input (exit 2), said in one line
    assert code == max(report_a["exit_code"], report_b["exit_code"])
    problems = differences(expected_compare(run_a, run_b), compare_figures(json.loads(printed)))
    assert not problems, "\n".join(["A:", described(run_a), "B:", described(run_b), *problems])


@COMPARE_EXAMPLES
@given(st.randoms(use_true_random=False))
def test_compare_figures_equal_the_ground_truth(rng: random.Random) -> None:
    run_a, run_b = pair(rng)
    with tempfile.TemporaryDirectory() as folder:
        write(run_a, rng, Path(folder) / "a")
        write(run_b, rng, Path(folder) / "b")
        code, printed = run_main(["compare", f"{folder}/a", f"{folder}/b", "--format", "json", *options(run_a)])
    check_compare(run_a, run_b, code, printed)


def test_the_installed_commands_say_the_same(tmp_path: Path) -> None:
    """A few runs through the real ``gym-instrument`` command, in its own process."""
    for seed in range(3):
        rng = random.Random(seed)
        run_a, run_b = pair(rng)
        paths = write(run_a, rng, tmp_path / f"{seed}-a")
        write(run_b, rng, tmp_path / f"{seed}-b")
        report = subprocess.run(
            [str(GYM_INSTRUMENT), "report", *map(str, paths), "--no-html", "--format", "json", *options(run_a)],
            capture_output=True,
            text=True,
        )
        assert "Traceback" not in report.stderr
        check_report(run_a, report.returncode, report.stdout)
        folders = [str(tmp_path / f"{seed}-{side}") for side in "ab"]
        compared = subprocess.run(
            [str(GYM_INSTRUMENT), "compare", *folders, "--format", "json", *options(run_a)],
            capture_output=True,
            text=True,
        )
        assert "Traceback" not in compared.stderr
        check_compare(run_a, run_b, compared.returncode, compared.stdout)
