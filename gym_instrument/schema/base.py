"""The schema a framework describes its rollouts with; the engine reads through nothing else.

A :class:`RolloutSchema` says how one framework's dispatch rows, verify requests and results and
health verdicts carry the facts the spans need: task id, indices, rollout id, reward, mask,
failure kind, verdict and checks. A framework's own schema subclasses it, beside its preset
(``frameworks/<name>/schema.py``), and hands what it reads to the rules of ``schema.rules``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.schema.rules import outcome_attributes, verdict_attributes

# What names the dispatch a verdict belongs to: (rollout id, task index, rollout index), any may be None.
VerdictName = tuple["str | None", "int | None", "int | None"]
# A verdict as the health role reads it: its name and its span's attributes.
VerdictFacts = tuple[VerdictName, dict[str, Any]]


class RolloutSchema:
    """How one framework names and scores its rollouts; the engine reads through nothing else.

    A subclass, beside its framework's preset, overrides what its framework has. Every method
    tolerates any input (hostile objects included) and returns "nothing known" rather than raise;
    if one raises anyway, the engine logs it once and the span goes on without those attributes.
    """

    name = "generic"
    # Span names the framework's own telemetry gives the same calls: such a span, when the call runs
    # in it, gets the role's attributes instead of a second span of the same name under it.
    framework_spans: frozenset[str] = frozenset()
    # A dispatch call without a row is a relay of a rollout already in flight, never a new dispatch
    # (else only when the context names a rollout).
    rowless_dispatch_relays = False
    # The HTTP client library its ``inject`` targets send through (a key of role.inject's table), so
    # that contrib's instrumentation of that client is detected; None: any client contrib instruments.
    http_client: str | None = None

    def identity(self, row: Any) -> RolloutIdentity:
        """A dispatch row's identity: task id, indices, attempt, rollout id (from the row or its index form)."""
        return RolloutIdentity()

    def request_rollout_id(self, request: Any) -> str | None:
        """The rollout id a verify request carries itself, if any (else the engine uses the baggage)."""
        return None

    def dispatch_end_attributes(self, row: Any, result: Any) -> dict[str, Any]:
        """A dispatch's attributes from what it returned (a framework that names the rollout only at
        the end, or returns failures as data: ``error.type`` marks the call failed). Default: none."""
        return {}

    def verify_attributes(self, request: Any, result: Any) -> dict[str, Any]:
        """A verify's attributes when it returns: reward, mask, failure kind (default: from the result)."""
        return self.result_attributes(result)

    def result_attributes(self, result: Any) -> dict[str, Any]:
        """A verify result's attributes, through :func:`~gym_instrument.schema.rules.outcome_attributes`."""
        return outcome_attributes(result, None, None)

    def run_files(self, config: Any) -> tuple[str | None, list[str]]:
        """What a run function's argument says of its files: the output file it writes (None:
        unknown) and the shard files it merges into that output (none: it merges nothing)."""
        return None, []

    def verdicts(self, result: Any) -> Sequence[Any]:
        """The verdicts in a health function's result (a one-shot iterator is never consumed)."""
        return ()

    def verdict_facts(self, verdicts: Sequence[Any]) -> list[VerdictFacts]:
        """For each verdict, what names its dispatch and its span's attributes (:func:`verdict_attributes`)."""
        return [((None, None, None), verdict_attributes(None, [])) for _ in verdicts]


GENERIC = RolloutSchema()
"""The schema of a target whose framework needs no rules of its own: only declared rules apply."""
