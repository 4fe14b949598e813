"""The bounded reader (``gym_instrument/lines.py``) and every reader that goes through it: span files
(``report``, ``compare``), a run's files (``replay``) and a configuration (``OTEL_PYTHON_GYM_CONFIG``,
``config check``). What a user sees: the command's output and exit code, the program's log lines."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gym_instrument import semconv
from gym_instrument.lines import Line, bounded_lines
from tests.test_zero_code import TARGETS, run_instrumented

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
LIVE = Path(__file__).resolve().parent / "data" / "e2e_runs" / "nemo-gym-0.7.0" / "live_spans.otlp.jsonl"


def gym_instrument(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GYM_INSTRUMENT), *arguments], capture_output=True, text=True)


def spans_in(lines: list[str]) -> int:
    """The package's spans in OTLP/JSON lines, counted here from the JSON."""
    names = {semconv.SPAN_DISPATCH, semconv.SPAN_VERIFY, semconv.SPAN_HEALTH}
    return sum(
        span["name"] in names
        for line in lines
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    )


def test_no_line_longer_than_the_limit_is_held_and_the_next_ones_are_read() -> None:
    stream = io.BytesIO(b"short\n" + b"x" * 100 + b"\n" + b"y" * 100 + b"\nlast")
    assert list(bounded_lines(stream, limit=10)) == [
        Line(1, b"short\n", 6),
        Line(2, None, 101),
        Line(3, None, 101),
        Line(4, b"last", 4),
    ]
    assert list(bounded_lines(io.BytesIO(b"x" * 10 + b"\n"), limit=10)) == [Line(1, b"x" * 10 + b"\n", 11)]


def test_a_span_file_cut_mid_batch_says_so_and_the_batches_before_it_count(tmp_path: Path) -> None:
    lines = LIVE.read_text().splitlines()
    cut = tmp_path / "spans.jsonl"
    cut.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    expected = spans_in(lines[:-1])
    assert 0 < expected < spans_in(lines)
    report = gym_instrument("report", str(cut), "--no-html", "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["source"]["spans"] == expected
    notice = f"{cut}: line {len(lines)} is cut off after {len(lines[-1]) // 2:,} bytes (truncated"
    assert report.stderr.count(notice) == 1
    compare = gym_instrument("compare", str(LIVE), str(cut), "--format", "json")
    assert compare.returncode == 0, compare.stderr
    assert compare.stderr.count(notice) == 1
    # A whole last batch without its newline is no truncation.
    whole = tmp_path / "whole.jsonl"
    whole.write_text("\n".join(lines))
    report = gym_instrument("report", str(whole), "--no-html", "--format", "json")
    assert json.loads(report.stdout)["source"]["spans"] == spans_in(lines) and "truncated" not in report.stderr


def test_an_overlong_line_is_skipped_with_one_line_naming_it(tmp_path: Path) -> None:
    lines = LIVE.read_text().splitlines()
    spans = tmp_path / "spans.jsonl"
    with spans.open("wb") as out:
        out.write((lines[0] + "\n").encode())
        out.seek(40 << 20, 1)  # a hole: 40 MiB of zero bytes, no newline
        out.write(b"\n" + "\n".join(lines[1:]).encode() + b"\n")
    report = gym_instrument("report", str(spans), "--no-html", "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["source"]["spans"] == spans_in(lines)
    assert report.stderr.count(f"{spans}: line 2 is {(40 << 20) + 1:,} bytes, longer than the 32 MiB a line may be") == 1


def test_replay_skips_an_overlong_line_and_never_holds_it(tmp_path: Path) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    sample = (LIVE.parent / "rollouts.jsonl").read_text().splitlines()
    with rollouts.open("wb") as out:
        out.write((sample[0] + "\n").encode())
        out.seek(40 << 20, 1)
        out.write(b"\n" + (sample[1] + "\n").encode())
    done = gym_instrument("replay", str(rollouts), "--output", str(tmp_path / "spans.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "replayed 2 dispatches" in done.stdout and "1 unreadable lines skipped" in done.stdout
    assert f"{rollouts}: line 2 is" in done.stderr


def deep_json(depth: int) -> str:
    return '{"targets": [{"path": "m:f", "role": "dispatch", "when": {"x": ' + "[" * depth + "]" * depth + "}}]}"


def deep_toml(depth: int) -> str:
    return '[[targets]]\npath = "m:f"\nrole = "dispatch"\nwhen = { x = ' + "[" * depth + "]" * depth + " }\n"


@pytest.mark.parametrize("kind", ["json", "toml"])
def test_a_configuration_nested_too_deep_is_one_line_and_the_other_settings_apply(tmp_path: Path, kind: str) -> None:
    config = tmp_path / f"deep.{kind}"
    config.write_text(deep_json(100_000) if kind == "json" else deep_toml(100_000))
    process, spans = run_instrumented(tmp_path, OTEL_PYTHON_GYM_CONFIG=str(config), OTEL_PYTHON_GYM_TARGETS=TARGETS)
    assert process.returncode == 0, process.stderr
    assert "Traceback" not in process.stderr and "Instrumenting of" not in process.stderr
    (line,) = [line for line in process.stderr.splitlines() if line.strip()]
    assert "OTEL_PYTHON_GYM_CONFIG" in line and "nested too deep" in line
    assert sorted(span["name"] for span in spans).count(semconv.SPAN_DISPATCH) == 4  # the valid targets still apply
    checked = gym_instrument("config", "check", str(config))
    assert checked.returncode == 2 and "nested too deep" in checked.stdout and "please report" not in checked.stderr


def test_a_configuration_file_larger_than_its_limit_is_not_read(tmp_path: Path) -> None:
    config = tmp_path / "huge.toml"
    with config.open("wb") as out:
        out.write(b'[[targets]]\npath = "m:f"\nrole = "dispatch"\n')
        out.truncate(1 << 30)  # 1 GiB, sparse
    process, spans = run_instrumented(tmp_path, OTEL_PYTHON_GYM_CONFIG=str(config), OTEL_PYTHON_GYM_TARGETS=TARGETS)
    assert process.returncode == 0, process.stderr
    (line,) = [line for line in process.stderr.splitlines() if line.strip()]
    assert f"{config} is larger than the 1 MiB it may be; not read" in line
    assert sorted(span["name"] for span in spans).count(semconv.SPAN_DISPATCH) == 4
    checked = gym_instrument("config", "check", str(config))
    assert checked.returncode == 2 and "larger than the 1 MiB" in checked.stdout
