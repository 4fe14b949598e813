"""1,000 ``instrument()`` / ``uninstrument()`` cycles: every original object is back, identical;
no wrapper, post-import hook or ``__init_subclass__`` hook piles up; memory stays flat; and each
cycle still makes exactly one span per call."""

from __future__ import annotations

import asyncio
import gc
import importlib
import itertools
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import wrapt

from gym_instrument import GymInstrumentor, semconv

from . import cycle_targets
from .support import Sink

CYCLES = 1000
WARM_UP = 100
# Growth allowed per 300 cycles after the warm-up: less than 100 bytes per cycle. A wrapper, hook,
# patch record or closure kept per cycle is several hundred bytes, in every stretch of cycles. A
# one-off allocation of the interpreter's (its interned-string table resizing, once, when the
# suite has imported enough modules) lands in one stretch only: the median stretch is judged.
CHECKPOINTS = (100, 400, 700, 1000)
MEMORY_GROWTH_BOUND = 30_000

LAZY_SOURCE = """
def dispatch(row):
    return ("lazy", row)


class Base:
    def verify(self, body):
        return {"reward": 0.25}
"""


def originals() -> dict[str, Any]:
    """The objects a class or module dict holds: functions, classmethod and staticmethod objects."""
    runner = vars(cycle_targets.Runner)
    return {
        "function": vars(cycle_targets)["dispatch"],
        "coroutine function": vars(cycle_targets)["dispatch_async"],
        "method": runner["run"],
        "classmethod object": runner["run_classmethod"],
        "staticmethod object": runner["run_staticmethod"],
        "base method": vars(cycle_targets.ResourcesServer)["verify"],
        "override": vars(cycle_targets.McqaServer)["verify"],
        "method of a class with __init_subclass__": vars(cycle_targets.RegisteringServer)["verify"],
        "its own __init_subclass__": vars(cycle_targets.RegisteringServer)["__init_subclass__"],
    }


def wrapt_hooks(module_name: str) -> int:
    return len(wrapt.importer._post_import_hooks.get(module_name) or ())


def calls(cycle: int) -> None:
    """One call of every kind."""
    assert cycle_targets.dispatch({"_ng_task_index": cycle, "_ng_rollout_index": 0}) == (
        "dispatched",
        {"_ng_task_index": cycle, "_ng_rollout_index": 0},
    )
    assert asyncio.run(cycle_targets.dispatch_async({"n": cycle}))[0] == "dispatched"
    assert cycle_targets.Runner().run(cycle) == ("run", cycle)
    assert cycle_targets.Runner.run_classmethod(cycle) == ("classmethod", cycle)
    assert cycle_targets.Runner.run_staticmethod(cycle) == ("staticmethod", cycle)
    assert cycle_targets.McqaServer().verify({}) == {"reward": 1.0}
    assert cycle_targets.RegisteringServer().verify({}) == {"reward": 0.5}


def test_a_thousand_cycles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lazy_name = "gym_cycles_lazy_module"
    (tmp_path / f"{lazy_name}.py").write_text(LAZY_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, lazy_name, raising=False)
    targets = [*cycle_targets.targets(), f"{lazy_name}:dispatch=dispatch", f"{lazy_name}:Base.verify=verify"]

    before = originals()
    registry_before = list(cycle_targets.RegisteringServer.registry)
    sink = Sink()
    instrumentor = GymInstrumentor()
    spans_per_cycle: set[int] = set()
    subclasses_made = 0

    memory: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        for cycle in range(CYCLES):
            instrumentor.instrument(
                tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider, presets="none", targets=targets
            )
            calls(cycle)
            if cycle < WARM_UP and cycle % 10 == 0:  # a subclass defined while instrumented: its override is wrapped
                subclass = type(
                    f"Late{cycle}", (cycle_targets.RegisteringServer,), {"verify": lambda self, body: {"reward": 0.75}}
                )
                subclasses_made += 1
                assert subclass().verify({}) == {"reward": 0.75}
            instrumentor.uninstrument()
            calls(cycle)  # not traced once uninstrumented
            spans_per_cycle.add(len(sink.spans()))
            sink.clear()
            if cycle + 1 in CHECKPOINTS:
                gc.collect()
                memory.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()

    after = originals()
    for kind, original in before.items():
        assert after[kind] is original, f"{kind} is not the original object after {CYCLES} cycles"
    assert "__init_subclass__" not in vars(cycle_targets.ResourcesServer)
    assert "__init_subclass__" not in vars(cycle_targets.Runner)
    # The class's own hook ran once per subclass made, not once per cycle that ever wrapped it.
    assert len(cycle_targets.RegisteringServer.registry) == len(registry_before) + subclasses_made
    # Each cycle made the same spans: 5 dispatches, 2 verifies (plus the new subclass's verify).
    assert spans_per_cycle <= {7, 8} and 7 in spans_per_cycle
    # wrapt cannot remove a post-import hook: the package keeps one per module for the process.
    assert wrapt_hooks(lazy_name) <= 1
    growths = [later - earlier for earlier, later in itertools.pairwise(memory)]
    assert sorted(growths)[1] < MEMORY_GROWTH_BOUND, f"memory grew {growths} bytes over cycles {CHECKPOINTS}"

    # The module imported after all those cycles, while not instrumented: left alone.
    lazy = importlib.import_module(lazy_name)
    lazy_originals = (vars(lazy)["dispatch"], vars(lazy.Base)["verify"])
    assert lazy.dispatch(1) == ("lazy", 1)
    assert sink.spans() == []
    # Instrumented once more: exactly one span per call, whatever came before.
    instrumentor.instrument(
        tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider, presets="none", targets=targets
    )
    try:
        assert lazy.dispatch({"_ng_task_index": 1, "_ng_rollout_index": 2}) == (
            "lazy",
            {"_ng_task_index": 1, "_ng_rollout_index": 2},
        )
        assert lazy.Base().verify({}) == {"reward": 0.25}
    finally:
        instrumentor.uninstrument()
    assert [span.name for span in sink.spans()] == [semconv.SPAN_DISPATCH, semconv.SPAN_VERIFY]
    assert (vars(lazy)["dispatch"], vars(lazy.Base)["verify"]) == lazy_originals
    assert vars(lazy)["dispatch"] is lazy_originals[0] and vars(lazy.Base)["verify"] is lazy_originals[1]
