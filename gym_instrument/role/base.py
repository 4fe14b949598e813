"""The interface of a role, and the small protocols its hooks receive.

A role says what its span is called and of which kind, which attributes it puts on it at the start
and at a successful end (read through the target's schema), and what else happens when a call
ends, as capability flags the engine (``plan``) acts on. Its hooks receive :class:`RoleCall` (what
they may know of the wrapped function) and :class:`Emission` (what a role that makes child spans
may use of the call in flight), never the engine's own objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from opentelemetry import baggage, context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from gym_instrument import semconv
from gym_instrument.link.files import LinkFiles
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.link.memory import DispatchLinks
from gym_instrument.record.job import JobContext, has_parent
from gym_instrument.record.spans import FrameworkSpan, framework_span
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.fields import MISSING, rollout_id_string

# The rollout id when baggage is kept in-process only (OTEL_PYTHON_GYM_BAGGAGE=false): a plain
# context value, which no propagator writes into outgoing headers.
ROLLOUT_ID_CONTEXT_KEY = context.create_key(semconv.BAGGAGE_ROLLOUT_ID)


def rollout_id_in(current: Context) -> str | None:
    """The rollout id the context carries: the W3C baggage entry, else the in-process value."""
    rollout_id = baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID, current)
    if rollout_id is None:
        rollout_id = context.get_value(ROLLOUT_ID_CONTEXT_KEY, current)
    return rollout_id_string(rollout_id)


class Hops(NamedTuple):
    """What the settings say the package does at a framework's hops (``inject`` and ``receive`` targets)."""

    propagation: bool = True  # carry contexts across processes itself (when contrib does not)
    server_telemetry: bool = True  # False: a server framework's own telemetry is off for requests received


class RoleCall(Protocol):
    """What a role's hooks know of the wrapped function they run for."""

    @property
    def schema(self) -> RolloutSchema:
        """How the target's framework names and scores its rollouts."""

    @property
    def defaults(self) -> bool:
        """Whether the role's own attribute rules apply (False: only the user's extractors)."""

    @property
    def adopts(self) -> bool:
        """Whether the framework makes its own span of the role's name around such a call."""

    @property
    def where(self) -> str:
        """The target, as failure logs name it."""

    @property
    def framework(self) -> str | None:
        """The framework the target belongs to (a preset's name, or what a declared target says)."""


class LinkedCall(RoleCall, Protocol):
    """What the hooks of a role that looks up ended dispatches (``uses_links``) also know: the
    engine's plans have it (a replayed call does not look anything up)."""

    @property
    def links(self) -> DispatchLinks:
        """The remembered dispatches of this process."""

    @property
    def link_files(self) -> LinkFiles | None:
        """Persisted links, for a dispatch that ran in another process (None: off)."""


class Emission(Protocol):
    """What a role that turns results into child spans may use of the call in flight."""

    @property
    def links(self) -> DispatchLinks:
        """The remembered dispatches, for a verdict to find its dispatch span."""

    @property
    def link_files(self) -> LinkFiles | None:
        """Persisted links, for a verdict whose dispatch ran in another process (None: off)."""

    @property
    def row(self) -> Any:
        """The call's row argument (a health pass: the rollout file or files it judges)."""

    def tracer(self) -> trace.Tracer | None:
        """The tracer the call records with (None: nothing records any more)."""

    def count(self, metric: str, attributes: dict[str, str] | None, amount: int) -> None:
        """Add to a bounded metric point."""

    @property
    def has_item_extractors(self) -> bool:
        """Whether the user gave end extractors to run per item (else :meth:`each_item` is not called)."""

    def each_item(self, item: Any, attributes: dict[str, Any]) -> None:
        """Run the user's end extractors for one item of the result (a verdict) into ``attributes``."""

    @property
    def call(self) -> Any:
        """The call as extractors and declared paths read it (its arguments; a role that ``needs_call``)."""

    @property
    def started_at(self) -> int:
        """When the call started (ns since the epoch): the start of the spans made from its result."""

    def count_rewarded(self, rollout_id: Any) -> None:
        """``gym.rollout.rewarded_total``: +1 for a rollout rewarded for the first time (or a span with no rollout id)."""


class Pending(Protocol):
    """A call whose span outlives it (:meth:`Role.defer`): the call's one end, made later, once.

    ``finish(result)``: what it waited for came (the role's end rules and the user's end extractors
    run over ``result``); ``finish(exception=...)``: reading it raised (the call failed, with the
    exception's ``error.type``); ``finish()``: it will never come (the span ends at the time the call
    returned). Whichever comes first ends it; the others change nothing."""

    def finish(self, result: Any = MISSING, exception: BaseException | None = None) -> None:
        """End the call's span (see the class)."""


class Role:
    """A role: its span, its hooks, and capability flags; most roles do little (these defaults)."""

    name: str = ""
    span_name: str | None = None  # None: no span around the call
    span_kind: SpanKind = SpanKind.INTERNAL
    row_names: tuple[str, ...] = ()  # where the row sits when the target does not say (else: first argument)
    row_by_name = False  # the row is only ever the argument named first in row_names, never the first argument
    decorated = True  # gym_instrument.<name> exists as a decorator
    # Capability flags: what the engine does when a call of this role runs and ends.
    carries_rollout_id = False  # the call's rollout id goes into its context (baggage), for what it causes
    counts_outcome = False  # gym.rollout.dispatches, by outcome
    counts_reward = False  # gym.rollout.rewarded_total, when the span got a reward
    remembers_dispatch = False  # the ended span is remembered for its health verdict
    uses_links = False  # its calls look up remembered dispatches: remember them while such a target can run
    needs_call = False  # its hooks read the call's arguments (Emission.call), whether or not it has extractors
    ties_to_job = False  # a root span is tied to the job context the process was started with (TRACEPARENT)
    # What else a role does is a hook it overrides (the engine asks which, once per wrapped function):
    # emit (child spans from a result), spanless_context (the context a role without a span runs its
    # call in), prepare (a role without a span that changes its call's arguments or context before
    # it runs), replace_row (a role without a span that hands its call's row on changed), on_success
    # (attributes from a result), defer (a span that ends after its call returned), on_failure (what a
    # role without a span ends when its call raised).

    def for_target(self, schema: RolloutSchema | None, extractors: Sequence[Any]) -> Role:
        """The role the calls of one target play, from what the target declares (its schema, its
        extractors; asked once, when it is wrapped, and by ``instrument()`` to know whether
        dispatches must be remembered): a shape of this role in a class of its own (a verify that
        names its rollout after the dispatch ended, a verify that scores a batch), or this role."""
        return self

    def finds_by_task(self, schema: RolloutSchema, extractors: Sequence[Any]) -> bool:
        """Whether a target of this role (its schema, its extractors) may look a dispatch up by its
        task id and repeat alone: dispatches are then remembered by those too. Default: no."""
        return False

    def start_attributes(self, call: RoleCall, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        """The span's attributes at its start (the role's own rules; ``{}`` when they are off), and
        the rollout's identity, which names the span and its baggage whatever the rules."""
        return {}, None

    def relays(self, call: RoleCall, current: Context) -> bool:
        """Whether a call with no row of its own, in ``current``, is not this role's (it runs untouched)."""
        return False

    def prepare(
        self,
        call: RoleCall,
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        current: Context,
        hops: Hops,
    ) -> Context | None:
        """Roles without a span that override this, before the call: may change ``kwargs`` (the dict the call is made
        with) and return the context the call runs in (None: it runs untouched, in its own).
        ``hops``: what the settings say the package does at a framework's hops."""
        return None

    def replace_row(self, call: RoleCall, row: Any, current: Context, hops: Hops) -> Any:
        """Roles without a span that override this, before the call: what the call is made with in place
        of its row (``MISSING`` when the call has none), put where the row sits (its keyword, else its
        position; an absent row goes in as the first name the target's row is looked up by). Returning
        ``row`` itself leaves the call exactly as it was made. ``current``: the caller's context."""
        return row

    def reads_result(self, schema: RolloutSchema) -> bool:
        """Whether :meth:`on_success` has anything to read for targets of ``schema`` (asked once, at wrap time)."""
        return type(self).on_success is not Role.on_success

    def open_span(
        self, call: RoleCall, tracer: trace.Tracer, job: JobContext | None, current: Context, attributes: dict[str, Any]
    ) -> Span:
        """The call's span: the framework's own span of the same name that it runs in (when the
        target's schema says its framework makes one), a root span tied to the process's job
        (``ties_to_job``), or a new span in the call's context.

        A role that does not override this gets the plain span from the engine directly when neither
        of the first two can apply: one call less on every call, the same span."""
        outer = framework_span(current, self.span_name) if call.adopts and current else None  # type: ignore[arg-type]
        if outer is not None:
            adopted = FrameworkSpan(outer)
            if attributes:
                adopted.set_attributes(attributes)
            return adopted
        name: str = self.span_name  # type: ignore[assignment]  # (a role with a span has its name)
        if job is not None and self.ties_to_job and not has_parent(current):
            # A root span in a process started for a job (TRACEPARENT): linked to it, or its child.
            if job.as_parent:
                return tracer.start_span(name, context=job.parent_of(current), kind=self.span_kind, attributes=attributes)
            return tracer.start_span(name, context=current, kind=self.span_kind, attributes=attributes, links=job.links)
        return tracer.start_span(name, context=current, kind=self.span_kind, attributes=attributes)

    def spanless_context(self, call: RoleCall, current: Context, row: Any, files: LinkFiles | None) -> Context:
        """A role without a span: the context its call runs in (the engine adds its own guard to it).
        Default: the caller's."""
        return current

    def on_success(self, call: RoleCall, row: Any, result: Any) -> dict[str, Any]:
        """The span's attributes from a returned result (the role's own rules are on)."""
        return {}

    def defer(self, call: RoleCall, pending: Pending, result: Any) -> bool:
        """Whether a call that returned ``result`` ends later than it returns: True once the role
        has handed ``pending`` to what will end it (its span stays open; its context is detached;
        the user's end extractors run when it ends). Default: it ends now."""
        return False

    def emit(self, emission: Emission, call: RoleCall, result: Any) -> None:
        """Child spans from a result, or from each item a generator yields (a role without a span that
        overrides this; the call's end makes no span of its own)."""

    def on_failure(self, emission: Emission, call: RoleCall, exception: BaseException) -> None:
        """A role without a span whose call raised ``exception``: what that ends (``read_result``: the
        dispatch that waited for the body it failed to read). Default: nothing."""
