"""The interface of a role, and the small protocols its hooks receive.

A role says what its span is called and of which kind, which attributes it puts on it at the start
and at a successful end (read through the target's schema), and what else its calls do, as hooks
it has or lacks (:class:`Role`), which the engine (``plan``) runs. Its hooks receive
:class:`RoleCall` (what they may know of the wrapped function) and :class:`CallInFlight` (what
they may use of one call in flight), never the engine's own objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


class Recording(Protocol):
    """What one configuration (``instrument()``) records with, as a call's hooks see it."""

    @property
    def links(self) -> DispatchLinks:
        """The remembered dispatches of this process, for a verdict or a verify after its dispatch to find it."""

    @property
    def link_files(self) -> LinkFiles | None:
        """Persisted links, for a dispatch that ran in another process (None: off)."""

    @property
    def remembers(self) -> bool:
        """Whether ended dispatches are remembered in :attr:`links` (a health pass or a verify after
        its dispatch could ask for them)."""

    @property
    def hops(self) -> Hops:
        """What the settings say the package does at a framework's hops."""


class CallInFlight(Protocol):
    """One call of a target in flight, as its role's hooks see it (the engine's ``Active`` is one):
    its arguments, the context it was made in, its span and rollout, and what the engine records
    with. One object carries what a hook may need, so no hook takes a long list of arguments."""

    @property
    def instance(self) -> Any:
        """The instance (or class) of a method called, None for a function."""

    @property
    def args(self) -> tuple[Any, ...]:
        """The positional arguments the call is made with."""

    @property
    def kwargs(self) -> dict[str, Any]:
        """The call's keywords (a hook that prepares the call may change them in place)."""

    @property
    def current(self) -> Context:
        """The context the call was made in (the caller's)."""

    @property
    def row(self) -> Any:
        """The call's row argument, None when it has none (a health pass: the rollout file or files it judges)."""

    def replace_row(self, value: Any) -> Context | None:
        """Make the call with ``value`` in place of its row (its keyword, else its position; an absent
        row goes in as the first name the target's row is looked up by): the context the call then
        runs in (the caller's), or None when it runs as it was made (``value`` is its row itself, or
        a keyword argument, changed in the call's own keywords)."""

    @property
    def span(self) -> Span | None:
        """The call's span (None: a role without one)."""

    identity: RolloutIdentity | None
    """The rollout the call names (its span's context carries its id in baggage)."""

    @property
    def start_attributes(self) -> dict[str, Any]:
        """The attributes the call's span started with (as its span was opened)."""

    @property
    def outcome(self) -> Any:
        """How the call ended (set before :meth:`Role.on_end`): the ``gym.rollout.dispatches`` point
        of its outcome (``next(outcome)`` counts it)."""

    @property
    def ok(self) -> bool:
        """Whether the call ended successfully (set before :meth:`Role.on_end`)."""

    @property
    def setup(self) -> Recording:
        """What the configuration the call started in records with (an ``instrument()`` while it is
        in flight does not change it)."""

    def tracer(self) -> trace.Tracer | None:
        """The tracer the call records with (None: nothing records any more)."""

    def count(self, metric: str, attributes: dict[str, str] | None, amount: int) -> None:
        """Add to a bounded metric point."""

    def count_rewarded(self, rollout_id: Any) -> None:
        """``gym.rollout.rewarded_total``: +1 for a rollout rewarded for the first time (or a span with no rollout id)."""

    @property
    def has_item_extractors(self) -> bool:
        """Whether the user gave end extractors to run per item (else :meth:`each_item` is not called)."""

    def each_item(self, item: Any, attributes: dict[str, Any]) -> None:
        """Run the user's end extractors for one item of the result (a verdict) into ``attributes``."""

    @property
    def call(self) -> Any:
        """The call as extractors and declared paths read it (its arguments)."""

    started_at: int
    """When the call started (ns since the epoch), where its role notes it: the start of the spans
    made from its result."""


class Pending(Protocol):
    """A call whose span outlives it (:meth:`Role.defer`): the call's one end, made later, once.

    ``finish(result)``: what it waited for came (the role's end rules and the user's end extractors
    run over ``result``); ``finish(exception=...)``: reading it raised (the call failed, with the
    exception's ``error.type``); ``finish()``: it will never come (the span ends at the time the call
    returned). Whichever comes first ends it; the others change nothing."""

    def finish(self, result: Any = MISSING, exception: BaseException | None = None) -> None:
        """End the call's span (see the class)."""


# How a role opens its span: (call, tracer, job, current, attributes) -> its span (Role.open_span)
SpanOpener = Callable[[RoleCall, trace.Tracer, JobContext | None, Context, dict[str, Any]], Span]


class Role:
    """A role: its span, its attributes, its hooks; most roles do little (these defaults).

    Every call of a role with a span gets :meth:`start_attributes` at its start and, when it
    returns, :meth:`on_success` (when :meth:`reads_result` says there is anything to read). Each
    other hook is a method a role has or lacks (None here); the engine asks which once, when a
    target is wrapped, so a call pays nothing for a hook its role lacks, and a new role, or a new
    shape of one, is its class alone: the engine is never edited for it.

    A role with a span may have:

    - ``relays(call, current) -> bool``: whether a call with no row of its own, in ``current``, is
      not this role's (it then runs untouched).
    - ``extracted_identity(identity, attributes) -> identity``: the rollout a call names once the
      user's start extractors have added to its start attributes (asked only when the target has
      some, before the span opens): what names its context's baggage and the span's rollout id.
    - ``defer(call, pending, result) -> bool``: whether a call that returned ``result`` ends later
      than it returns: True once the role has handed ``pending`` to what will end it (its span
      stays open; its context is detached; the user's end extractors run when it ends).
    - ``on_end(call, flight, attributes)``: what else the end of a call does, once its span has
      ended, however it ended (``flight.ok``, ``flight.outcome``; ``attributes``: those its end
      added, None when none): a dispatch remembered for its verdict, a reward counted. Not for a
      span sampled out.

    A role without a span says what its call runs in (:meth:`spanless_context`) and may have:

    - ``prepare(call, flight) -> Context | None``: in place of :meth:`spanless_context`, run when
      the call is made (a coroutine: before it is awaited): it may change what the call is made
      with (``flight.replace_row``, ``flight.kwargs``) and returns the context the call runs in
      (None: it runs untouched, in its own).
    - ``emit(call, flight, result)``: child spans from a result, or from each item a generator
      yields.
    - ``on_failure(call, flight, exception)``: what a call that raised ``exception`` ends (the
      dispatch that waited for the body it failed to read).
    """

    name: str = ""
    span_name: str | None = None  # None: no span around the call
    span_kind: SpanKind = SpanKind.INTERNAL
    row_names: tuple[str, ...] = ()  # where the row sits when the target does not say (else: first argument)
    row_by_name = False  # the row is only ever the argument named first in row_names, never the first argument
    decorated = True  # gym_instrument.<name> exists as a decorator
    uses_links = False  # its calls look up remembered dispatches: remember them while such a target can run
    ties_to_job = False  # a root span is tied to the job context the process was started with (TRACEPARENT)

    # The hooks a role may have (see the class): None when it has none.
    relays: Callable[[RoleCall, Context], bool] | None = None
    extracted_identity: Callable[[RolloutIdentity | None, dict[str, Any]], RolloutIdentity | None] | None = None
    defer: Callable[[RoleCall, Pending, Any], bool] | None = None
    on_end: Callable[[RoleCall, CallInFlight, dict[str, Any] | None], None] | None = None
    prepare: Callable[[RoleCall, CallInFlight], Context | None] | None = None
    emit: Callable[[RoleCall, CallInFlight, Any], None] | None = None
    on_failure: Callable[[RoleCall, CallInFlight, BaseException], None] | None = None

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

    def reads_result(self, schema: RolloutSchema) -> bool:
        """Whether :meth:`on_success` has anything to read for targets of ``schema`` (asked once, at wrap time)."""
        return type(self).on_success is not Role.on_success

    def on_success(self, call: RoleCall, row: Any, result: Any) -> dict[str, Any]:
        """The span's attributes from a returned result (the role's own rules are on)."""
        return {}

    def span_opener(self, call: RoleCall, in_job: bool) -> SpanOpener | None:
        """How the calls of one target open their span (asked once, when it is wrapped, for a process
        started without and with a job context, ``in_job``): :meth:`open_span`, or None when that
        would always be a plain span in the call's context, which the engine then starts itself
        (one call less on every call, the same span)."""
        if type(self).open_span is Role.open_span and not call.adopts and not (in_job and self.ties_to_job):
            return None
        return self.open_span

    def open_span(
        self, call: RoleCall, tracer: trace.Tracer, job: JobContext | None, current: Context, attributes: dict[str, Any]
    ) -> Span:
        """The call's span: the framework's own span of the same name that it runs in (when the
        target's schema says its framework makes one), a root span tied to the process's job
        (``ties_to_job``), or a new span in the call's context."""
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

    def spanless_context(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        """A role without a span: the context its call runs in (the engine adds its own guard to it;
        None: it runs untouched). Default: the caller's."""
        return flight.current
