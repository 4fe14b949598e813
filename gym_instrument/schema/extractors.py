"""User extractors: plain callables that add attributes from a call's row, request, result or verdict.

An extractor is any callable ``extractor(call) -> Mapping[str, value] | None``. It receives a
:class:`Call`: the bound arguments, the instance, the located row or request, and — when it runs
after the call — the result or the exception. By default an extractor runs after the call;
mark it with :func:`at_start` to run before the span starts, so that samplers see what it returns.
For the ``health`` role an extractor runs once per verdict, with ``call.verdict`` set.

Example::

    def dataset_name(call):
        return {"my.dataset": call.row["dataset"]} if call.row else None

    GymInstrumentor().instrument(extractors={"dispatch": [at_start(dataset_name)]})

**What an extractor returns** is attributes, and two of SPEC's names say more than an attribute:

- ``nemo.gym.rollout.id`` returned at the start (an ``at_start`` extractor of a dispatch) is the
  rollout's id: the span attribute *and* the W3C baggage entry that names the rollout in what the
  dispatch causes, exactly like an id the role read from the row (it replaces that one).
- ``error.type`` returned after the call, when the call returned (did not raise), declares the
  call failed: the span's status is ERROR with that type as its description and a dispatch
  counts as ``outcome=error``. A framework that returns failures as data (verifiers'
  ``Episode(ok=False)``) is described this way without raising anything.

Example::

    @at_start
    def episode_id(call):
        return {"nemo.gym.rollout.id": call.row["episode_id"]}

    def failed_as_data(call):
        if call.result is not None and call.result.get("status") == "failed":
            return {"error.type": call.result.get("reason", "_OTHER")}
        return None

Extractors add to the role's own attribute rules (``role`` and the target's schema), which are
not extractors; ``default_extractors=False`` / ``replace_default_extractors`` turns those rules
off. Whatever an extractor returns is checked value by value before it reaches a span, and one
that raises is logged once and skipped: it never reaches the host.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from gym_instrument.record.attributes import clean_attributes
from gym_instrument.record.failures import FAILURES, name_of
from gym_instrument.schema.rules import without_masked_reward

Attributes = Mapping[str, Any]
Extractor = Callable[..., "Attributes | None"]  # extractor(call) -> attributes
F = TypeVar("F", bound=Callable[..., Any])


def at_start(extractor: F) -> F:
    """Mark an extractor to run before the span starts (its attributes reach the sampler)."""
    extractor.__gym_at_start__ = True  # type: ignore[attr-defined]
    return extractor


def runs_at_start(extractor: Callable[..., Any]) -> bool:
    return getattr(extractor, "__gym_at_start__", False) is True


def run_extractors(extractors: Iterable[Extractor], call: Any, into: dict[str, Any], where: str) -> None:
    """Run extractors into an attribute dict; one that raises or returns junk never reaches the host
    (logged once per extractor and ``where``: the target it runs for). What they add to the role's
    own attributes obeys the rules that span several attributes: a masked verify has no reward."""
    for extractor in extractors:
        try:
            attributes = extractor(call)
            if attributes:
                clean_attributes(attributes, into)
        except (Exception, asyncio.CancelledError, GeneratorExit):
            # A sync extractor is never cancelled from outside: these came from its own code.
            # KeyboardInterrupt and SystemExit are the process's, and go on.
            FAILURES.failed(f"extractor {name_of(extractor)}", where)
    without_masked_reward(into)
