"""SPEC section 4, "from any process": persisted links (``link/files.py``) in real processes and files.

A sharded run as NeMo Gym 0.7.0 makes it: shard collectors dispatch (no health pass), an
aggregation merges the shards and judges health in a third process, and a re-check judges it
again in a fourth process with another working directory and ``HOME``.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gym_instrument import semconv
from gym_instrument.compat import span_context
from gym_instrument.frameworks.nemo_gym.schema import SCHEMA as NEMO_GYM
from gym_instrument.link.files import FOLDER, SUFFIX, LinkFiles
from gym_instrument.link.identity import RolloutIdentity
from tests.crossprocess import run_pipeline

REPO = Path(__file__).resolve().parents[1]


def run(action: str, config: dict[str, Any], cwd: Path | None = None, **env: str) -> tuple[Any, list[dict[str, Any]], str]:
    """One process of the run: its result, the spans it exported and what it logged."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_PYTHON_GYM_")}
    environ.update(PYTHONPATH=str(REPO), **env)
    done = subprocess.run(
        [sys.executable, "-m", "tests.crossprocess.links_main", action, json.dumps(config)],
        cwd=cwd or REPO,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    result = next((line["result"] for line in lines if "result" in line), None)
    return result, [line for line in lines if "name" in line], done.stderr


def rows(tasks: range, repeats: int = 2) -> list[dict[str, Any]]:
    return [{"_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": {"name": "a"}} for t in tasks for r in range(repeats)]


def dispatches(spans: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    return {
        (s["attributes"][semconv.TASK_INDEX], s["attributes"][semconv.ROLLOUT_REPEAT]): s
        for s in spans
        if s["name"] == semconv.SPAN_DISPATCH
    }


def healths(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == semconv.SPAN_HEALTH]


def assert_children(health: list[dict[str, Any]], dispatched: dict[tuple[int, int], dict[str, Any]], verdicts: Any) -> None:
    by_id = {f"{t}-{r}": span for (t, r), span in dispatched.items()}
    assert sorted(s["attributes"][semconv.ROLLOUT_ID] for s in health) == sorted(by_id)  # one per rollout
    expected = {d["rollout_id"]: d for d in verdicts["rollouts"]}
    for span in health:
        rollout_id = span["attributes"][semconv.ROLLOUT_ID]
        dispatch = by_id[rollout_id]
        assert (span["parent_trace"], span["parent"]) == (dispatch["trace_id"], dispatch["span_id"])
        assert span["trace_id"] == dispatch["trace_id"]
        assert span["attributes"][semconv.HEALTH_VERDICT] == expected[rollout_id]["verdict"]
        assert span["attributes"][semconv.HEALTH_CHECKS] == sorted({f["check"] for f in expected[rollout_id]["findings"]})


def shard(out: Path, number: int, tasks: range, **env: str) -> list[dict[str, Any]]:
    path = out / f"rollouts-rs{number}-chunk0.jsonl"
    _, spans, _ = run("collect", {"output_jsonl_fpath": str(path), "rows": rows(tasks)}, **env)
    return spans


def test_a_sharded_run_gets_its_health_spans_in_aggregation_and_in_a_later_recheck(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    spans = shard(out, 0, range(0, 3)) + shard(out, 1, range(3, 5))
    dispatched = dispatches(spans)
    assert len(dispatched) == 10 and not healths(spans)  # a shard has no health pass

    # The links are where no rollout glob a user would write reads them as a shard.
    for pattern in ("rollouts-rs*-chunk*.jsonl", "*.jsonl", "**/*.jsonl", "*", "rollouts*"):
        assert not any(FOLDER in path or path.endswith(SUFFIX) for path in glob.glob(str(out / pattern), recursive=True))
    assert glob.glob(str(out / FOLDER / f"*{SUFFIX}"))

    config = {"input_glob": f"{out}/rollouts-rs*-chunk*.jsonl, {out}/*.jsonl", "output_jsonl_fpath": str(out / "rollouts.jsonl")}
    verdicts, aggregated, _ = run("aggregate", config)
    assert {d["verdict"] for d in verdicts["rollouts"]} == {"healthy", "unhealthy"}
    assert_children(healths(aggregated), dispatched, verdicts)
    assert not [s for s in aggregated if s["name"] == semconv.SPAN_DISPATCH]

    # Days later, on another node: another working directory and HOME, only the run folder.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = {"paths": str(out / "rollouts.jsonl"), "output_dir": str(out)}
    rechecked, spans, _ = run("health", config, cwd=elsewhere, HOME=str(elsewhere))
    assert rechecked == verdicts
    assert_children(healths(spans), dispatched, rechecked)  # a new judgement: its own span per rollout


def test_links_in_a_named_folder_and_unmerged_shards(tmp_path: Path) -> None:
    out, links = tmp_path / "out", tmp_path / "shared-links"
    out.mkdir()
    env = {"OTEL_PYTHON_GYM_LINK_DIR": str(links)}
    dispatched = dispatches(shard(out, 0, range(0, 2), **env) + shard(out, 1, range(2, 4), **env))
    assert not (out / FOLDER).exists() and glob.glob(str(links / f"*{SUFFIX}"))
    paths = sorted(str(p) for p in out.glob("rollouts-rs*.jsonl"))
    verdicts, spans, _ = run("health", {"paths": paths}, **env)
    assert_children(healths(spans), dispatched, verdicts)


def test_links_turned_off_persist_nothing_and_find_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shard(out, 0, range(0, 2), OTEL_PYTHON_GYM_LINK_FILES="false")
    assert not (out / FOLDER).exists()
    traced = dispatches(shard(out, 1, range(2, 3)))
    paths = [str(out / "rollouts-rs0-chunk0.jsonl"), str(out / "rollouts-rs1-chunk0.jsonl")]
    _, spans, _ = run("health", {"paths": paths}, OTEL_PYTHON_GYM_LINK_FILES="false")
    assert not healths(spans)
    # Links on again: only the rollouts dispatched with them get a span, and no verdict an orphan.
    verdicts, spans, _ = run("health", {"paths": paths})
    assert len(verdicts["rollouts"]) == 6
    assert_children(healths(spans), traced, {"rollouts": [d for d in verdicts["rollouts"] if d["task_index"] == 2]})
    assert all(span["parent"] is not None for span in healths(spans))


def test_another_run_with_colliding_ids_is_never_a_parent(tmp_path: Path) -> None:
    """Two runs, both from task 0, in one folder and in one named links folder: each finds its own."""
    out = tmp_path / "out"
    out.mkdir()
    run_a = dispatches(run("collect", {"output_jsonl_fpath": str(out / "a.jsonl"), "rows": rows(range(2))})[1])
    run_b = dispatches(run("collect", {"output_jsonl_fpath": str(out / "b.jsonl"), "rows": rows(range(2))})[1])
    verdicts, spans, _ = run("health", {"paths": str(out / "a.jsonl")})
    assert_children(healths(spans), run_a, verdicts)
    verdicts, spans, _ = run("health", {"paths": str(out / "b.jsonl")})
    assert_children(healths(spans), run_b, verdicts)

    shared = {"OTEL_PYTHON_GYM_LINK_DIR": str(tmp_path / "links")}
    (tmp_path / "c").mkdir()
    (tmp_path / "d").mkdir()
    run_c = dispatches(run("collect", {"output_jsonl_fpath": str(tmp_path / "c/r.jsonl"), "rows": rows(range(2))}, **shared)[1])
    run("collect", {"output_jsonl_fpath": str(tmp_path / "d/r.jsonl"), "rows": rows(range(2))}, **shared)
    verdicts, spans, _ = run("health", {"paths": str(tmp_path / "c/r.jsonl")}, **shared)
    assert_children(healths(spans), run_c, verdicts)


# -- bad input: a clear log line, no crash, no wrong parent, the health function's result unchanged --


def test_bad_links_files_are_skipped_with_a_log_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dispatched = dispatches(shard(out, 0, range(0, 3)))
    folder = out / FOLDER
    (written,) = folder.glob(f"*{SUFFIX}")
    lines = written.read_bytes().splitlines(keepends=True)
    header, entries = lines[0], lines[1:]
    # Corrupt a line, tear the last one (a process killed mid-write), add foreign and empty files.
    broken = out / FOLDER / f"rollouts-rs0-chunk0.jsonl.other{SUFFIX}"
    broken.write_bytes(header.replace(b'"started_ns": ', b'"started_ns": 1') + b"zz not a link\n" + entries[0][:20])
    (folder / f"foreign{SUFFIX}").write_text("just some text\n")
    (folder / f"empty{SUFFIX}").write_text("")
    (folder / f"binary{SUFFIX}").write_bytes(b"\xff\xfe\x00garbage")
    shard_file = out / "rollouts-rs0-chunk0.jsonl"
    direct = run_pipeline.run_health_checks(shard_file)
    verdicts, spans, stderr = run("health", {"paths": str(shard_file)})
    assert verdicts == direct  # the health function's result unchanged
    assert_children(healths(spans), dispatched, verdicts)  # the good file still links every rollout
    assert "torn line" in stderr and "unreadable lines" in stderr and "not a dispatch links file" in stderr


def test_a_missing_folder_or_file_finds_nothing_and_raises_nothing(tmp_path: Path, caplog: Any) -> None:
    files = LinkFiles(str(tmp_path / "nowhere"))
    assert list(files.lookup([str(tmp_path / "rollouts.jsonl")], [(None, 0, 0), ("0-1", 0, 1)])) == [None, None]


def test_two_processes_writing_into_one_folder_keep_their_lines_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    config = {"output_jsonl_fpath": str(out / "rollouts.jsonl"), "rows": rows(range(300), repeats=4)}
    argv = [sys.executable, "-m", "tests.crossprocess.links_main", "collect", json.dumps(config)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first, second = (subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL) for _ in range(2))
    assert first.wait() == 0 and second.wait() == 0
    files = sorted((out / FOLDER).glob(f"*{SUFFIX}"))
    assert len(files) == 2  # one file per process: no interleaved lines
    for path in files:
        lines = path.read_text().splitlines()
        assert len(lines) == 1 + 1200 and all(len(line.split()) == 7 for line in lines[1:])
    # The later writer's dispatches win, as a later attempt does in memory; each rollout once.
    found = list(LinkFiles(None).lookup([str(out / "rollouts.jsonl")], [(None, t, r) for t in range(300) for r in range(4)]))
    assert all(link is not None for link in found)


def test_the_latest_writer_wins_and_each_dispatch_is_found_once(tmp_path: Path) -> None:
    files = LinkFiles(None)
    output = str(tmp_path / "rollouts.jsonl")
    first, retry = span_context(1, 1, True), span_context(2, 2, True)
    files.persist(first, RolloutIdentity(None, 0, 0, None, "0-0"), output)
    files.close()
    later = LinkFiles(None)
    later.persist(retry, RolloutIdentity(None, 0, 0, 1, "0-0-a1"), output)
    later.close()
    reader = LinkFiles(None)
    (link,) = reader.lookup([output], [("0-0", 0, 0)])  # (a new pass: the files are read again)
    assert link is not None and link[0].trace_id == 2 and link[1] == "0-0-a1"
    assert list(reader.lookup([output], [("0-0", 0, 0), ("0-0", 0, 0)]))[1] is None  # once per pass


def test_a_read_is_bounded_by_the_link_capacity(tmp_path: Path, caplog: Any) -> None:
    output = str(tmp_path / "rollouts.jsonl")
    writer = LinkFiles(None)
    for task in range(2000):
        writer.persist(span_context(task + 1, task + 1, True), RolloutIdentity(None, task, 0, None, f"{task}-0"), output)
    writer.close()
    with caplog.at_level(logging.WARNING):
        found = list(LinkFiles(None, capacity=1000).lookup([output], [(None, task, 0) for task in range(2000)]))
    assert sum(link is not None for link in found) == 1000 and found[-1] is not None
    assert "link capacity" in caplog.text


def test_in_the_dispatching_process_a_pass_reads_memory_and_a_second_adds_nothing(
    tmp_path: Path, instrument: Any, telemetry: Any
) -> None:
    import asyncio

    from gym_instrument import GymInstrumentor, Target

    pipeline = "tests.crossprocess.run_pipeline"
    instrument(
        targets=[
            Target(f"{pipeline}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
            f"{pipeline}:RolloutCollectionHelper.run_from_config=run@nemo_gym",
            f"{pipeline}:run_health_checks=health@nemo_gym",
        ]
    )
    output = tmp_path / "rollouts.jsonl"
    asyncio.run(
        run_pipeline.RolloutCollectionHelper().run_from_config({"output_jsonl_fpath": str(output), "rows": rows(range(3))})
    )
    verdicts = run_pipeline.run_health_checks(output)
    run_pipeline.run_health_checks(output)  # the same process, again: its own links are not read back
    GymInstrumentor().uninstrument()  # (what is queued is written)
    health = telemetry.spans(semconv.SPAN_HEALTH)
    assert sorted(span.attributes[semconv.ROLLOUT_ID] for span in health) == sorted(d["rollout_id"] for d in verdicts["rollouts"])
    assert glob.glob(str(tmp_path / FOLDER / f"*{SUFFIX}"))  # persisted all the same, for other processes


def test_a_duplicate_verdict_of_a_rollout_found_in_memory_does_not_find_an_older_process_s_dispatch(
    tmp_path: Path, instrument: Any, telemetry: Any
) -> None:
    """A resumed run: an earlier process's links name the same rollouts; the health pass lists one twice."""
    import asyncio

    from gym_instrument import Target

    output = tmp_path / "rollouts.jsonl"
    earlier = LinkFiles(None)
    for rollout in range(2):
        earlier.persist(span_context(7, 7 + rollout, True), RolloutIdentity(None, 0, rollout, None, f"0-{rollout}"), str(output))
    earlier.close()
    print("EARLIER", list((tmp_path / ".gym-links").iterdir()))
    pipeline = "tests.crossprocess.run_pipeline"
    instrument(
        targets=[
            Target(f"{pipeline}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
            f"{pipeline}:RolloutCollectionHelper.run_from_config=run@nemo_gym",
            f"{pipeline}:run_health_checks=health@nemo_gym",
        ]
    )
    asyncio.run(
        run_pipeline.RolloutCollectionHelper().run_from_config({"output_jsonl_fpath": str(output), "rows": rows(range(1))})
    )
    with output.open("a") as rollouts:
        rollouts.write(output.read_text().splitlines()[0] + "\n")  # rollout 0-0 listed twice
    run_pipeline.run_health_checks(output)
    dispatched = {span.context.span_id for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    health = telemetry.spans(semconv.SPAN_HEALTH)
    assert sorted(span.attributes[semconv.ROLLOUT_ID] for span in health) == ["0-0", "0-1"]
    assert all(span.parent.span_id in dispatched for span in health)


def test_nemo_gym_schema_reads_a_run_s_output_and_the_shards_an_aggregation_merges(tmp_path: Path) -> None:
    from gym_instrument.frameworks.nemo_gym.schema import SCHEMA

    for name in (
        "rollouts-rs0-chunk0",
        "rollouts-rs0-chunk0_failures",
        "rollouts-rs0-chunk0_materialized_inputs",
        "rollouts-rs1-chunk0",
    ):
        (tmp_path / f"{name}.jsonl").write_text("")
    output = str(tmp_path / "rollouts.jsonl")
    assert SCHEMA.run_files({"output_jsonl_fpath": output, "num_repeats": 2}) == (output, [])
    glob_ = f"{tmp_path}/rollouts-rs*.jsonl, {tmp_path}/rollouts-rs0*.jsonl"
    shards = [str(tmp_path / "rollouts-rs0-chunk0.jsonl"), str(tmp_path / "rollouts-rs1-chunk0.jsonl")]
    assert SCHEMA.run_files({"output_jsonl_fpath": output, "input_glob": glob_}) == (output, shards)
    assert SCHEMA.run_files({"output_jsonl_fpath": output, "input_glob": glob_, "merge_shards": False}) == (output, [])
    assert SCHEMA.run_files({"input_glob": glob_}) == (None, [])
    assert SCHEMA.run_files(None) == (None, [])


def test_the_nemo_gym_preset_names_the_runs_of_collection_and_aggregation() -> None:
    from gym_instrument.frameworks.nemo_gym.preset import PRESET

    runs = {target["path"] for target in PRESET["targets"] if target["role"] == "run"}
    assert runs == {
        "nemo_gym.rollout_collection:RolloutCollectionHelper.run_from_config",
        "nemo_gym.rollout_collection:RolloutAggregationHelper.run_from_config",
    }


def test_a_process_killed_mid_run_leaves_whole_lines_that_a_health_pass_reads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    output = out / "rollouts.jsonl"
    config = {"output_jsonl_fpath": str(output), "rows": rows(range(2000), repeats=2), "sleep": 1.5}
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_PYTHON_GYM_")}
    environ["PYTHONPATH"] = str(REPO)
    (tmp_path / "config.json").write_text(json.dumps(config))
    argv = [sys.executable, "-m", "tests.crossprocess.links_main", "collect-then-killed", f"@{tmp_path / 'config.json'}"]
    killed = subprocess.run(argv, cwd=REPO, env=environ, capture_output=True, text=True, check=False)
    assert killed.returncode == -9
    (written,) = (out / FOLDER).glob(f"*{SUFFIX}")
    data = written.read_bytes()
    assert data.endswith(b"\n") and all(len(line.split()) == 7 for line in data.splitlines()[1:])
    persisted = len(data.splitlines()) - 1
    assert persisted > 0  # the writer thread wrote while the run went on
    verdicts, spans, _ = run("health", {"paths": str(output)})
    assert len(verdicts["rollouts"]) == 4000 and len(healths(spans)) == persisted
    assert all(span["parent"] is not None for span in healths(spans))


def test_dispatches_of_an_unknown_output_are_persisted_only_in_a_named_folder(tmp_path: Path) -> None:
    """A framework whose output the schema does not know: nothing beside anything, all in the folder."""
    nowhere = LinkFiles(None)
    nowhere.persist(span_context(1, 1, True), RolloutIdentity(None, 0, 0, None, None), None)
    nowhere.close()
    assert not list(tmp_path.iterdir())
    named = LinkFiles(str(tmp_path / "links"))
    named.persist(span_context(2, 2, True), RolloutIdentity(None, 0, 0, None, None), None)
    named.close()
    (link,) = LinkFiles(str(tmp_path / "links")).lookup([str(tmp_path / "any" / "rollouts.jsonl")], [(None, 0, 0)])
    assert link is not None and link[0].span_id == 2


def test_a_long_read_reports_its_progress(tmp_path: Path, caplog: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from gym_instrument.link import files as link_files

    monkeypatch.setattr(link_files, "_PROGRESS_BYTES", 1000)  # a "long" read: more than 1,000 bytes
    output = str(tmp_path / "rollouts.jsonl")
    writer = LinkFiles(None)
    for task in range(100):
        writer.persist(span_context(task + 1, task + 1, True), RolloutIdentity(None, task, 0, None, None), output)
    writer.close()
    with caplog.at_level(logging.INFO, logger="gym_instrument.link.files"):
        found = list(LinkFiles(None).lookup([output], [(None, task, 0) for task in range(100)]))
    assert all(found)
    assert "reading dispatch links: 100%" in caplog.text and "reading dispatch links: 50%" in caplog.text


# -- hostile input: only links the run's own user wrote are trusted, and no input is unbounded -----


def _forge(folder: Path, output_name: str, tasks: range, trace_id: int, started_ns: int | None = None) -> Path:
    """A links file naming ``output_name``, its ids all in ``trace_id``'s trace."""
    header = {"gym_links": 1, "output": output_name, "output_path": None, "started_ns": started_ns or time.time_ns()}
    lines = [f"{trace_id:032x} {task + 1:016x} 01 {task} {repeat} - -\n" for task in tasks for repeat in range(2)]
    forged = folder / f"{output_name}.forged{SUFFIX}"
    forged.write_text(json.dumps(header) + "\n" + "".join(lines))
    return forged


def test_a_links_file_of_another_user_or_in_a_folder_anyone_can_write_is_not_trusted(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dispatched = dispatches(shard(out, 0, range(0, 3)))
    folder, shard_file = out / FOLDER, out / "rollouts-rs0-chunk0.jsonl"
    forged = _forge(folder, shard_file.name, range(0, 3), 0xF0F0, started_ns=time.time_ns() + 10**18)
    os.chown(forged, 12345, 12345)  # another local user's file
    verdicts, spans, stderr = run("health", {"paths": str(shard_file)})
    assert_children(healths(spans), dispatched, verdicts)  # every parent is the run's own dispatch
    assert f"{forged} is owned by uid 12345" in stderr and stderr.count(str(forged)) == 1

    os.chown(forged, 0, 0)
    folder.chmod(0o777)  # a folder anyone can write to: any of its files could be planted
    _, spans, stderr = run("health", {"paths": str(shard_file)})
    assert not healths(spans)
    assert f"{folder} is writable by others (mode 0777)" in stderr and stderr.count(str(folder)) == 1


def _made_under_umask_002(folder: Path) -> Path:
    """A folder as ``mkdir`` makes it on a cluster whose default umask is 002: 0775."""
    previous = os.umask(0o002)
    try:
        folder.mkdir()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o775
    return folder


def test_a_links_folder_its_group_can_write_is_used_and_only_the_user_s_own_files_in_it_are_read(tmp_path: Path) -> None:
    out, links = tmp_path / "out", _made_under_umask_002(tmp_path / "links")
    out.mkdir()
    env = {"OTEL_PYTHON_GYM_LINK_DIR": str(links)}
    dispatched = dispatches(shard(out, 0, range(0, 3), **env))
    (written,) = links.glob(f"*{SUFFIX}")  # the writer used the folder, and left its mode alone
    assert stat.S_IMODE(written.stat().st_mode) == 0o600 and stat.S_IMODE(links.stat().st_mode) == 0o775
    shard_file = out / "rollouts-rs0-chunk0.jsonl"
    verdicts, spans, stderr = run("health", {"paths": str(shard_file)}, **env)
    assert_children(healths(spans), dispatched, verdicts)
    assert str(links) not in stderr

    # Files of the same run's names, with other parents and a later start, that the user did not
    # write alone: one the group can write, and (made as root) one of another user's.
    group_writable = _forge(links, shard_file.name, range(0, 3), 0xF0F0, started_ns=time.time_ns() + 10**18)
    group_writable.chmod(0o664)
    if os.geteuid() == 0:
        foreign = group_writable.with_name(f"{shard_file.name}.planted{SUFFIX}")
        foreign.write_bytes(group_writable.read_bytes())
        os.chown(foreign, 12345, 12345)
    verdicts, spans, stderr = run("health", {"paths": str(shard_file)}, **env)
    assert_children(healths(spans), dispatched, verdicts)  # every parent is still the run's own dispatch
    assert f"{group_writable} is writable by group or others (mode 0664); skipped" in stderr
    if os.geteuid() == 0:
        assert f"{foreign} is owned by uid 12345, neither this user (0) nor root; skipped" in stderr


def test_a_file_of_root_s_is_read_in_a_private_folder_but_not_in_one_its_group_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a file of root's takes root")
    output = tmp_path / "rollouts.jsonl"
    writer = LinkFiles(None)
    writer.persist(span_context(1, 1, True), RolloutIdentity(None, 0, 0, None, None), str(output))
    writer.close()
    folder = tmp_path / FOLDER
    os.chown(folder, 12345, 12345)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)  # a health pass of user 12345, whose folder it is
    (link,) = LinkFiles(None).lookup([str(output)], [(None, 0, 0)])
    assert link is not None and link[0].trace_id == 1  # root's file: only root could put it there
    folder.chmod(0o770)
    assert list(LinkFiles(None).lookup([str(output)], [(None, 0, 0)])) == [None]  # the group could have linked it


def test_links_folders_and_files_get_their_modes_whatever_the_umask(tmp_path: Path) -> None:
    for umask, out in ((0o000, tmp_path / "open"), (0o277, tmp_path / "closed")):
        out.mkdir()
        path = out / "rollouts.jsonl"
        argv = [sys.executable, "-m", "tests.crossprocess.links_main", "collect"]
        config = {"output_jsonl_fpath": str(path), "rows": rows(range(2))}
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [*argv, json.dumps(config)],
            cwd=REPO,
            env=env,
            capture_output=True,
            check=False,
            preexec_fn=lambda u=umask: os.umask(u),
        )
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE((out / FOLDER).stat().st_mode) == 0o700
        (written,) = (out / FOLDER).glob(f"*{SUFFIX}")
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
        merged = LinkFiles(None)
        os.umask(umask)
        try:
            merged.record_merge(str(out / "merged.jsonl"), [str(path)])
        finally:
            os.umask(0o022)
        assert {stat.S_IMODE(p.stat().st_mode) for p in (out / FOLDER).glob(f"*{SUFFIX}")} == {0o600}


def test_a_header_claiming_a_future_start_does_not_make_its_entries_win(tmp_path: Path) -> None:
    output = tmp_path / "rollouts.jsonl"
    genuine = LinkFiles(None)
    genuine.persist(span_context(1, 1, True), RolloutIdentity(None, 0, 0, None, None), str(output))
    genuine.close()
    forged = _forge(tmp_path / FOLDER, output.name, range(0, 1), 0xBAD, started_ns=time.time_ns() + 10**18)
    past = time.time() - 3600
    os.utime(forged, (past, past))  # written an hour before the genuine file, whatever its header says
    (link, _) = LinkFiles(None).lookup([str(output)], [(None, 0, 0), (None, 0, 1)])
    assert link is not None and link[0].trace_id == 1


def test_a_fifo_or_a_symlink_named_like_a_links_file_is_skipped_without_waiting(tmp_path: Path, caplog: Any) -> None:
    import threading

    output = tmp_path / "rollouts.jsonl"
    writer = LinkFiles(None)
    writer.persist(span_context(1, 1, True), RolloutIdentity(None, 0, 0, None, None), str(output))
    writer.close()
    folder = tmp_path / FOLDER
    fifo = folder / f"{output.name}.fifo{SUFFIX}"
    os.mkfifo(fifo)
    (real,) = (path for path in folder.glob(f"*{SUFFIX}") if path != fifo)
    (folder / f"{output.name}.link{SUFFIX}").symlink_to(real)
    # A pass that waited on the FIFO would be seen waiting (Linux's wait_for_partner) and let go by a
    # writer, so that it makes this test fail, not hang.
    reader, done, waited = threading.get_native_id(), threading.Event(), threading.Event()

    def watch() -> None:
        wchan = Path(f"/proc/self/task/{reader}/wchan")
        while not done.is_set():
            if wchan.read_text() == "wait_for_partner":
                waited.set()
                os.close(os.open(fifo, os.O_WRONLY))
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    with caplog.at_level(logging.INFO, logger="gym_instrument.link.files"):
        (link,) = LinkFiles(None).lookup([str(output)], [(None, 0, 0)])
    done.set()
    thread.join()
    assert not waited.is_set()
    assert link is not None and link[0].trace_id == 1
    assert f"{fifo} is not a regular file; skipped" in caplog.text and "is empty" not in caplog.text
    assert f"{folder / f'{output.name}.link{SUFFIX}'} is a symbolic link; skipped" in caplog.text


def test_a_thousand_merged_shards_are_found_in_another_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shards = [out / f"rollouts-rs{number}-chunk0.jsonl" for number in range(1000)]
    for number, path in enumerate(shards):
        writer = LinkFiles(None)
        for repeat in range(2):
            trace = number * 2 + repeat + 1
            writer.persist(span_context(trace, trace, True), RolloutIdentity(None, number, repeat, None, None), str(path))
        writer.close()
    merged = out / "rollouts.jsonl"
    merged.write_text("".join(json.dumps({**row, "reward": 1.0}) + "\n" for row in rows(range(1000))))
    LinkFiles(None).record_merge(str(merged), [str(path) for path in shards])
    verdicts, spans, _ = run("health", {"paths": str(merged)})
    health = healths(spans)
    assert len(verdicts["rollouts"]) == 2000 and len(health) == 2000
    for span in health:
        task, repeat = map(int, span["attributes"][semconv.ROLLOUT_ID].split("-"))
        assert span["parent"] == span["trace_id"] == task * 2 + repeat + 1


def _writer_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "gym-instrument-links"]


def test_a_closed_writer_leaves_no_thread_behind_and_writes_again_when_used(tmp_path: Path) -> None:
    # instrument() called again closes the old writer: a process reconfigured many times (or a
    # thousand shard writers in one process) must not keep a waking thread per writer it closed.
    before = len(_writer_threads())
    output = tmp_path / "rollouts.jsonl"
    writers = [LinkFiles(None) for _ in range(50)]
    for number, writer in enumerate(writers):
        writer.persist(span_context(number + 1, number + 1, True), RolloutIdentity(None, number, 0, None, None), str(output))
    assert len(_writer_threads()) == before + 50
    for writer in writers:
        writer.close()
    assert len(_writer_threads()) == before
    lines = [line for path in (tmp_path / FOLDER).glob(f"*{SUFFIX}") for line in path.read_text().splitlines()[1:]]
    assert len(lines) == 50
    # Used again after close: a thread of its own again, and the line reaches the file.
    writers[0].persist(span_context(99, 99, True), RolloutIdentity(None, 99, 0, None, None), str(output))
    assert len(_writer_threads()) == before + 1
    writers[0].close()
    assert len(_writer_threads()) == before
    lines = [line for path in (tmp_path / FOLDER).glob(f"*{SUFFIX}") for line in path.read_text().splitlines()[1:]]
    assert len(lines) == 51


def test_a_long_output_name_gets_a_bounded_links_file_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    name = "r" * 240 + ".jsonl"
    dispatched = dispatches(run("collect", {"output_jsonl_fpath": str(out / name), "rows": rows(range(2))})[1])
    (written,) = (out / FOLDER).glob(f"*{SUFFIX}")
    assert len(written.name.encode()) <= 200
    verdicts, spans, _ = run("health", {"paths": str(out / name)})
    assert_children(healths(spans), dispatched, verdicts)


def test_other_rollouts_in_the_folder_never_evict_the_ones_the_verdicts_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    output = out / "rollouts.jsonl"
    dispatched = dispatches(run("collect", {"output_jsonl_fpath": str(output), "rows": rows(range(10))})[1])
    # Later, many more rollouts of the same output name (a resumed run, say) than the capacity holds.
    _forge(out / FOLDER, output.name, range(1000, 6000), 0xABC)
    verdicts, spans, stderr = run("health", {"paths": str(output)}, OTEL_PYTHON_GYM_LINK_CAPACITY="100")
    assert_children(healths(spans), dispatched, verdicts)
    assert "link capacity" not in stderr


def test_a_writer_puts_nothing_in_a_folder_no_health_pass_would_trust(tmp_path: Path, caplog: Any) -> None:
    shared = tmp_path / "shared-links"
    shared.mkdir()
    shared.chmod(0o777)
    writer = LinkFiles(str(shared))
    with caplog.at_level(logging.WARNING, logger="gym_instrument.link.files"):
        writer.persist(span_context(1, 1, True), RolloutIdentity(None, 0, 0, None, None), str(tmp_path / "rollouts.jsonl"))
        writer.close()
    assert not list(shared.iterdir())
    assert caplog.text.count(f"{shared} is writable by others (mode 0777)") == 1
