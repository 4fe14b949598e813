"""``make demo-ui``: the demo run, in a real trace viewer (Arize Phoenix) on 127.0.0.1.

Starts Phoenix from ``.venv-ui/`` with its data in ``demo/output/ui/phoenix/`` (or finds a Phoenix
already answering on the port), runs the demo pipeline traced as ``make demo`` does, with its
spans sent over OTLP/HTTP to Phoenix as well as to ``demo/output/ui/spans.otlp.jsonl``, waits until
Phoenix has stored them (read back through its REST API), and prints the URL of the run and of
one rollout's trace. ``demo/output/ui/report.html`` links every rollout to its trace in Phoenix.
It keeps all of it in ``demo/output/ui/``, apart from what ``make demo`` keeps in ``demo/output/``.
Each rollout's outcome is posted to Phoenix as annotations on its root (dispatch) span, ``health``
(the verdict), ``reward`` and ``rollout`` (its task and rollout id; see ``viewer.py``), so the trace
list shows them and filters by them.

By default Phoenix keeps running in the foreground until Ctrl-C. ``--detach`` (``make demo-ui
DETACH=1``) leaves it running in the background and returns; ``--stop`` (``make demo-ui-stop``)
stops that one.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run_demo  # noqa: E402
import viewer  # noqa: E402

UI_OUTPUT = run_demo.OUTPUT / "ui"  # not make demo's own files: one does not overwrite the other

DEFAULT_PHOENIX = run_demo.REPO / ".venv-ui" / "bin" / "phoenix"


def pick_rollout(rollouts: list[dict[str, Any]]) -> dict[str, Any]:
    """The rollout worth opening first: one with a task id, a reward and a verdict, unhealthy if any is."""
    complete = [
        rollout
        for rollout in rollouts
        if rollout["verify"] is not None
        and rollout["health"] is not None
        and "nemo.gym.task.id" in rollout["dispatch"]["attributes"]
        and "nemo.gym.rollout.reward" in rollout["verify"]["attributes"]
    ]
    if not complete:
        raise viewer.ViewerError("no rollout in the viewer has a task id, a reward and a verdict")
    complete.sort(
        key=lambda rollout: (
            rollout["health"]["attributes"].get("nemo.gym.health.verdict") != "unhealthy",
            rollout["dispatch"]["attributes"].get("nemo.gym.rollout.id", ""),
        )
    )
    return complete[0]


def describe(rollout: dict[str, Any]) -> str:
    dispatch = rollout["dispatch"]["attributes"]
    reward = rollout["verify"]["attributes"]["nemo.gym.rollout.reward"]
    health = rollout["health"]["attributes"]
    checks = ", ".join(health.get("nemo.gym.health.checks") or [])
    verdict = health.get("nemo.gym.health.verdict") + (f": {checks}" if checks else "")
    return (
        f"task {dispatch['nemo.gym.task.id']}, rollout {dispatch.get('nemo.gym.rollout.id')}, reward {float(reward)}, {verdict}"
    )


def _shown(path: Path) -> str:
    return run_demo._shown(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phoenix", type=Path, default=DEFAULT_PHOENIX, help="phoenix command (default .venv-ui/bin/phoenix)")
    parser.add_argument("--port", type=int, default=viewer.DEFAULT_PORT, help="Phoenix's HTTP port on 127.0.0.1 (default 6006)")
    parser.add_argument("--output", type=Path, default=UI_OUTPUT, help="what the demo keeps (default demo/output/ui)")
    parser.add_argument("--detach", action="store_true", help="leave Phoenix running in the background and return")
    parser.add_argument("--stop", action="store_true", help="stop the Phoenix a --detach run left running, and return")
    args = parser.parse_args(argv)
    work = args.output / "phoenix"

    if args.stop:
        pid = viewer.stop_detached(work)
        print(f"stopped Phoenix (process group {pid})" if pid else f"no detached Phoenix to stop ({_shown(work)}/phoenix.pid)")
        return 0

    server: viewer.PhoenixServer | None = None
    phoenix = viewer.Phoenix(port=args.port)
    if phoenix.healthy():
        print(f"sending to the Phoenix already running at {phoenix.base_url}")
    elif viewer.port_open(args.port):
        print(f"127.0.0.1:{args.port} is taken by something that is not Phoenix; choose another: make demo-ui UI_PORT=6016")
        return 2
    elif (running := viewer.detached_pid(work)) is not None:
        print(f"a Phoenix that make demo-ui left running (process group {running}) keeps its data in {_shown(work)}/;")
        print("stop it first (make demo-ui-stop), or use its port")
        return 2
    else:
        shutil.rmtree(work, ignore_errors=True)  # a fresh viewer shows this run only
        print(f"starting Phoenix on {phoenix.base_url} (data in {_shown(work)}/, log in {_shown(work)}/phoenix.log) ...")
        server = phoenix = viewer.PhoenixServer(args.phoenix, work, port=args.port)
        try:
            server.start()
        except viewer.ViewerError as error:
            print(f"Phoenix did not start: {error}")
            return 1

    try:
        spans = run_demo.main(args.output, exporting=phoenix.exporting(), trace_url=phoenix.trace_url_template)
        expected: dict[str, int] = {}
        for span in spans:
            expected[span.name] = expected.get(span.name, 0) + 1
        trace_ids = {span.trace_id for span in spans}
        stored = [span for span in phoenix.wait_for_spans(expected, trace_ids=trace_ids) if span["trace_id"] in trace_ids]
        rollouts = list(viewer.rollouts(stored))
        rollout = pick_rollout(rollouts)
    except (viewer.ViewerError, OSError) as error:
        print(f"the spans did not reach Phoenix: {error}")
        if server is not None:
            server.stop()
        return 1
    # The verdict comes after the dispatch span ended: it reaches the trace list as an annotation.
    annotations = viewer.outcome_annotations(rollouts)
    try:
        phoenix.annotate(annotations)
    except OSError as error:
        print(f"Phoenix did not take the rollouts' verdict and reward annotations: {error}")
        if server is not None:
            server.stop()
        return 1

    print()
    print(f"Phoenix has the run's {len(stored)} spans ({', '.join(f'{n} {name}' for name, n in sorted(expected.items()))}):")
    print(f"  the run (project {phoenix.project}):  {phoenix.project_url()}")
    print(f"  one rollout's trace ({describe(rollout)}):")
    print(f"    {phoenix.trace_url(rollout['dispatch']['trace_id'])}")
    print(f"  {_shown(args.output / run_demo.REPORT_FILE)} links every rollout to its trace there.")
    verdicts = Counter(a["result"]["label"] for a in annotations if a["name"] == viewer.VERDICT)
    print(
        f"  in the trace list, each rollout's verdict (annotation {viewer.VERDICT!r}: {verdicts['healthy']} healthy,"
        f" {verdicts['unhealthy']} unhealthy) and reward (annotation {viewer.REWARD!r});"
    )
    print(f"  its unhealthy rollouts only, typed into the filter box:  {viewer.UNHEALTHY_FILTER}")
    print(f"  each row's task and rollout id: annotation {viewer.ROLLOUT!r}; Columns → {viewer.ROLLOUT} makes it a column")
    if server is None:
        print("That Phoenix was running before and keeps running (make demo-ui-stop stops one that make demo-ui DETACH=1 left).")
        return 0
    if args.detach:
        pid = server.process.pid if server.process else "?"
        stop = (
            "make demo-ui-stop"
            if args.output == UI_OUTPUT
            else f"python demo/run_demo_ui.py --stop --output {_shown(args.output)}"
        )
        print(f"Phoenix keeps running in the background (process group {pid}); stop it with: {stop}")
        return 0

    print("Phoenix keeps running; press Ctrl-C to stop it.")

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        assert server.process is not None
        server.process.wait()
        print(f"Phoenix exited with {server.process.returncode}; its log: {_shown(server.log)}")
        return 1
    except KeyboardInterrupt:
        print("\nstopping Phoenix ...")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
