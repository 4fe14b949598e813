"""The engine: one precomputed :class:`Plan` per wrapped function, one start path, one end path.

At wrap time a target becomes a plan: its role (``role``), where its row sits and the condition
its arguments must meet, the schema its attributes are read through, the user's extractors split
into those that run at the start and at the end, and the role's hooks, each bound once, or None
when the role lacks it: the engine decides nothing by role, and a call pays nothing for a hook its
role lacks. At call time one wrapper per kind of function runs it: sync, coroutine, generator,
async generator and async context manager. Each one admits the call (:meth:`Plan.admit`), starts
it (:meth:`Plan.start`) and ends it in exactly one idempotent place (:meth:`Active.finish`),
reached from every exit path; the context is detached where it was attached. A role may defer
the span's end past the call's return (``Role.defer``): a state of the same end, not a second
one. The call's context is detached when it returns, and the span ends at the next
:meth:`Active.finish`, made by what the role handed the call to, with what it read, what the
read raised, or nothing (abandoned: the span ends when the call returned). The extractor return
convention (``extract``) is applied in the start and in that one end and nowhere else: a rollout
id from a start extractor names the rollout of a role whose calls name one (its
``extracted_identity``; baggage included), an ``error.type`` from an end extractor marks a
returned call failed.

Generators: the span covers the iteration, from the first step to exhaustion, an exception or
``close()`` (an abandoned generator is closed by the garbage collector). Its context is current
only while the generator body runs, never in the consumer between items, so the consumer's
own spans are not parented to it. An async context manager's span covers the body of the
``async with``, which runs with the span current.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from time import time_ns
from typing import Any, Protocol

from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span

from gym_instrument import compat, semconv
from gym_instrument.compat import attach, detach
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.plan.call import ArgLocator, Call
from gym_instrument.plan.engine import ENGINE, Setup
from gym_instrument.record.failures import FAILURES
from gym_instrument.record.spans import end_failed, end_span
from gym_instrument.role.base import ROLLOUT_ID_CONTEXT_KEY, Role
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.extractors import Extractor, run_extractors, runs_at_start
from gym_instrument.schema.fields import MISSING

# The object (instance, or function without one) of the gym call of a role running in a context,
# kept under the role's own key in the context the call attaches: a nested call of the same role
# on the same object (an override calling super(), a function reachable through two wrapped
# names) passes through, so one call makes one span.
_GUARD_KEYS: dict[str, str] = {}


class TargetFacts(Protocol):
    """What a plan reads of the target it was made for (``target.Target`` is one)."""

    @property
    def path(self) -> str: ...

    @property
    def framework(self) -> str | None: ...


def _guard_key(role: Role) -> str:
    key = _GUARD_KEYS.get(role.name)
    if key is None:
        key = _GUARD_KEYS[role.name] = context.create_key(f"gym_instrument.active.{role.name}")
    return key


_CANCELLATION = (asyncio.CancelledError, GeneratorExit)
_SUPPRESSION_KEYS = compat.suppression_keys()

_NO_CONTEXT = Context()  # an Active's until Plan.start gives it its own (a Context is never changed in place)
_NO_ATTRIBUTES: dict[str, Any] = {}  # an Active's start attributes until its span starts (never changed)


class Plan:
    """Everything one wrapped function's calls need that can be known when it is wrapped."""

    __slots__ = (
        "adopts",
        "argument_locators",
        "armed",
        "binds_instance",
        "conditions",
        "defaults",
        "defer",
        "emit",
        "end_extractors",
        "enter",
        "extracted_identity",
        "find_row",
        "framework",
        "function",
        "function_guard",
        "guard_key",
        "locator",
        "makes_call",
        "on_end",
        "on_failure",
        "on_success",
        "open_span",
        "open_span_in_job",
        "prepare",
        "reads_result",
        "relays",
        "role",
        "role_name",
        "schema",
        "span_kind",
        "span_name",
        "spans",
        "start_attributes",
        "start_extractors",
        "target",
        "where",
    )

    def __init__(
        self,
        role: Role,
        function: Callable[..., Any],
        target: TargetFacts,
        locator: ArgLocator,
        conditions: Sequence[tuple[ArgLocator, Any]],
        schema: RolloutSchema,
        extractors: Sequence[Extractor],
        defaults: bool,
        binds_instance: bool,
    ) -> None:
        role = role.for_target(schema, extractors)  # the shape of the role this target's calls play
        self.role = role
        self.role_name = role.name
        self.target = target
        self.function = function
        self.schema = schema
        self.locator = locator
        self.find_row = locator.find  # bound once: called on every call of the target
        # (where the argument sits, the value it must have)
        self.conditions = tuple(conditions)
        self.where = f"target {target.path}"  # how failure logs name it
        self.guard_key = _guard_key(role)
        self.function_guard = id(function)  # the guard of a call without an instance
        self.armed = True
        self.binds_instance = binds_instance
        self.spans = role.span_name is not None
        self.adopts = role.span_name in schema.framework_spans
        self.span_name = role.span_name
        self.span_kind = role.span_kind
        self.framework = target.framework  # nemo.gym.framework on its spans, when its target names one
        self.argument_locators: dict[str, ArgLocator] = {}  # Call.argument's, made on first use
        # The role's hooks, bound once; None for each it lacks, so a call pays nothing for it (Role).
        self.start_attributes = role.start_attributes
        self.on_success = role.on_success
        self.relays = role.relays
        self.extracted_identity = role.extracted_identity
        self.defer = role.defer
        self.on_end = role.on_end
        self.prepare = role.prepare
        self.enter = role.prepare or role.spanless_context  # what a call without a span runs in
        self.emit = role.emit
        self.on_failure = role.on_failure
        # None: a plain span in the call's context, started here (in a process without, and with, a job context).
        self.open_span = role.span_opener(self, in_job=False)
        self.open_span_in_job = role.span_opener(self, in_job=True)
        self.use_extractors(extractors, defaults)

    @property
    def links(self) -> Any:
        """The remembered dispatches (``role.RoleCall``)."""
        return ENGINE.setup.links

    @property
    def link_files(self) -> Any:
        """Persisted links (``role.RoleCall``)."""
        return ENGINE.setup.link_files

    def use_extractors(self, extractors: Sequence[Extractor], defaults: bool) -> None:
        """The user's extractors, and whether the role's own attribute rules apply (a second
        ``instrument()`` can change them on a function that stays wrapped)."""
        # At the start (before the span, so samplers see them) or at the end. A health pass has
        # no span of its own: all of its extractors run per verdict.
        at_start = tuple(e for e in extractors if runs_at_start(e)) if self.spans else ()
        self.start_extractors = at_start
        self.end_extractors = tuple(e for e in extractors if e not in at_start)
        self.makes_call = bool(extractors)  # a call then gets a Call for its extractors
        self.defaults = defaults
        self.reads_result = defaults and self.role.reads_result(self.schema)

    def admit(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Context | None:
        """The current context when this call is traced; None passes it through untouched.

        Traced when something records (an SDK is set; with none, nothing else is looked at),
        instrumentation is not suppressed, the target's conditions hold, and it is not a nested
        call of the same role on the same object.
        """
        if not self.armed:
            return None
        try:
            recorder = ENGINE.setup.recorder
            if recorder.cached_tracer is None:
                # No SDK: Recorder.tracer()'s first test, read here without the call (most of a
                # call's cost with tracing off).
                global_provider = recorder.global_provider
                if global_provider is not None and getattr(trace, global_provider, trace) is None:
                    return None
                if recorder.tracer() is None:
                    return None
            current = compat.current_context()
            # Suppressed instrumentation: a truthy value under one of the API's keys.
            keys = _SUPPRESSION_KEYS
            if keys is None:
                if not is_instrumentation_enabled():
                    return None
            else:
                for key in keys:
                    if current.get(key):
                        return None
            for locator, expected in self.conditions:
                value = locator.find(instance, args, kwargs)
                if type(value) is not type(expected) or value != expected:
                    return None
            guard = current.get(self.guard_key)
            if guard is not None and guard == (self.function_guard if instance is None else id(instance)):
                return None
        except Exception:
            FAILURES.failed(f"the condition of the {self.role_name} role", self.where)
            return None
        return current

    def start(self, current: Context, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Active | None:
        """Start one admitted call: its span (none for a role without one) and its context, not yet
        attached. None when the call is not the role's (a relay) or starting failed: it runs untouched."""
        setup = ENGINE.setup
        span = rollout_id = spanless = None
        try:
            recorder = setup.recorder
            tracer = recorder.cached_tracer or recorder.tracer()
            if tracer is None:
                return None  # uninstrumented since the call was admitted
            active = Active(self, setup, current, instance, args, kwargs)
            call = active._call = Call(self, instance, args, kwargs) if self.makes_call else None
            row = self.find_row(instance, args, kwargs)
            if row is MISSING:
                row = None
            active.row = row
            if not self.spans:  # the role says what its call runs in (and, prepared, what it is made with)
                spanless = self.enter(self, active)
                if spanless is None:
                    return None  # it runs untouched, in its own context
            else:
                if row is None and self.relays is not None and self.relays(self, current):
                    return None
                try:
                    attributes, identity = self.start_attributes(self, row, current)
                except Exception:  # a schema that fails on this row: logged once, the span goes on without
                    FAILURES.failed(f"the start rules of the {self.role_name} role", self.where)
                    attributes, identity = {}, None
                if self.framework is not None:
                    attributes[semconv.FRAMEWORK] = self.framework
                if self.start_extractors:
                    run_extractors(self.start_extractors, call, attributes, self.where)
                    if self.extracted_identity is not None:
                        identity = self.extracted_identity(identity, attributes)
                if identity is not None:
                    active.identity = identity
                    rollout_id = identity.rollout_id
                opener = self.open_span if setup.job is None else self.open_span_in_job
                if opener is None:
                    span = active.span = tracer.start_span(self.span_name, current, self.span_kind, attributes)  # type: ignore[arg-type]  # (a role with a span has its name)
                else:
                    span = active.span = opener(self, tracer, setup.job, current, attributes)
                active.start_attributes = attributes
        except Exception:
            FAILURES.failed(f"the start of the {self.role_name} role", self.where)
            return None
        guard_key, guard = self.guard_key, self.function_guard if instance is None else id(instance)
        try:
            if spanless is not None:
                active.ctx = compat.with_values(spanless, None, None, guard_key, guard)
            elif rollout_id is None:
                active.ctx = compat.with_values(current, span, None, guard_key, guard)
            elif setup.propagate_baggage:
                active.ctx = compat.with_values(current, span, (semconv.BAGGAGE_ROLLOUT_ID, rollout_id), guard_key, guard)
            else:  # in-process only: a plain context value, which no propagator writes into headers
                in_process = compat.with_values(current, span, None, ROLLOUT_ID_CONTEXT_KEY, rollout_id)
                active.ctx = compat.with_values(in_process, None, None, guard_key, guard)
        except Exception:
            FAILURES.failed(f"the context of the {self.role_name} role", self.where)
            active.ctx = compat.with_values(current, span, None, guard_key, guard)
        return active


# The states of a call in flight (Active.state): running, deferred (returned, its span still open
# until what it waits for ends it: Role.defer), done.
_RUNNING, _DEFERRED, _DONE = 0, 1, 2


class Active:
    """One call in flight (``role.CallInFlight``, as its role's hooks see it). :meth:`finish` is the
    single, idempotent place it ends.

    ``setup`` is fixed when the call starts: an uninstrument() while it is in flight must not send
    its end (the reward count, the dispatch remembered for its verdict) to the next configuration.
    ``args``: the positional arguments the call is made with (the caller's, unless its role replaced
    its row).
    """

    __slots__ = (
        "_call",
        "args",
        "ctx",
        "current",
        "identity",
        "instance",
        "kwargs",
        "outcome",
        "plan",
        "returned_at",
        "row",
        "setup",
        "span",
        "start_attributes",
        "started_at",
        "state",
        "token",
    )
    # Slots set only where they are used (see __init__).
    started_at: int
    returned_at: int
    outcome: Any

    def __init__(
        self, plan: Plan, setup: Setup, current: Context, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.plan = plan
        self.setup = setup
        self.current = current
        self.instance = instance
        self.args = args
        self.kwargs = kwargs
        self._call: Call | None = None  # what the plan's extractors are given (None when it has none)
        self.span: Span | None = None
        self.identity: RolloutIdentity | None = None
        self.row: Any = None
        self.start_attributes: dict[str, Any] = _NO_ATTRIBUTES  # Plan.start sets the span's own
        self.ctx: Context = _NO_CONTEXT  # Plan.start sets the call's own before it returns it
        self.token: object | None = None
        self.state = _RUNNING
        # Set only where they are used, before they are read (a slot per call saved on every call):
        # started_at, by a role that makes spans from its result; returned_at, a deferred call's
        # return (ns), its end when its wait is abandoned; outcome, how it ended (a
        # gym.rollout.dispatches point), before its role's on_end.

    def attach(self) -> None:
        self.token = attach(self.ctx)

    def detach(self) -> None:
        token, self.token = self.token, None
        if token is not None:
            try:
                detach(token)
            except Exception:
                FAILURES.failed("detaching the context of", self.plan.where)

    def finish(self, result: Any = MISSING, exception: BaseException | None = None) -> None:
        """End the call, once: the role's end rules, the user's end extractors, the span, the role's end.

        Every exit of the call reaches it (return, raise, cancellation, close). When the role defers
        the end of a call that returned (``Role.defer``), this first finish only detaches its
        context and leaves its span open; the span then ends at the next finish, which the role's
        :class:`~gym_instrument.role.base.Pending` makes: with what was read (``result``: the
        role's end rules and the user's end extractors run over it), with what the read raised
        (``exception``: the call failed), or with neither when the wait was abandoned (the span ends
        at the time the call returned, never at the time the abandonment was noticed). A call
        without a span ends in its role's ``emit`` or ``on_failure``.
        """
        state = self.state
        if state == _DONE:
            return
        plan = self.plan
        span = self.span
        if state == _RUNNING:
            token = self.token
            if token is not None:
                self.token = None
                try:
                    detach(token)
                except Exception:
                    FAILURES.failed("detaching the context of", plan.where)
        self.state = _DONE
        try:
            if span is None:  # a role without a span: what its call's end does is its own
                if exception is None:
                    if plan.emit is not None:
                        plan.emit(plan, self, result)
                elif plan.on_failure is not None:
                    plan.on_failure(plan, self, exception)
                return
            if not span.is_recording():
                span.end()  # sampled out: nothing to read, count or remember
                return
            end_time = None
            attributes: dict[str, Any] | None = None
            if exception is None and result is not MISSING and plan.reads_result:
                try:
                    attributes = plan.on_success(plan, self.row, result)
                except Exception:  # a schema that fails on this result: logged once, the span goes on without
                    FAILURES.failed(f"the end rules of the {plan.role_name} role", plan.where)
            failed_as = attributes.get(semconv.ERROR_TYPE) if attributes and exception is None else None
            if state == _RUNNING:
                if exception is None and failed_as is None and plan.defer is not None:
                    # All set before defer(): what the role hands the call to may end it at once.
                    returned_at = time_ns()
                    if attributes:
                        span.set_attributes(attributes)
                    if self._call is not None:
                        self._call.result = result  # what the user's end extractors see if nothing is read
                    self.state = _DEFERRED
                    self.returned_at = returned_at
                    if plan.defer(plan, self, result):
                        return  # the span stays open: the role's Pending finishes it
                    self.state = _DONE
            elif result is MISSING and exception is None:
                end_time = self.returned_at  # abandoned: the span lasts as long as the call did
            if plan.end_extractors:
                call: Call = self._call  # type: ignore[assignment]
                if result is not MISSING or exception is not None:
                    call.result, call.exception = result, exception
                if attributes is None:
                    attributes = {}
                run_extractors(plan.end_extractors, call, attributes, plan.where)
                if exception is None:  # a failure returned as data: the schema's or an extractor's error.type
                    failed_as = attributes.get(semconv.ERROR_TYPE)
            if attributes:
                span.set_attributes(attributes)
            tallies = self.setup.recorder.tallies
            if failed_as is not None:
                end_failed(span, str(failed_as), end_time)
                outcome = tallies.error
            elif exception is None:
                span.end(end_time)
                outcome = tallies.ok
            else:
                cancelled = isinstance(exception, _CANCELLATION)
                end_span(span, exception, cancelled, end_time)
                outcome = tallies.cancelled if cancelled else tallies.error
            if plan.on_end is not None:
                self.outcome = outcome
                plan.on_end(plan, self, attributes)
        except Exception:
            FAILURES.failed(f"the end of the {plan.role_name} role", plan.where)
            self.state = _DONE  # (also when the role's defer raised: the span ends here, once)
            if span is not None:
                try:
                    span.end()  # idempotent in the SDK: a span that already ended warns, never raises
                except Exception:
                    pass

    # -- what a role's hooks may use of the call in flight (role.CallInFlight) ------------------

    def replace_row(self, value: Any) -> Context | None:
        if value is self.row:
            return None
        args = self.plan.locator.replace(self.instance, self.args, self.kwargs, value)
        if args is self.args:
            return None  # a keyword argument, changed in the call's own keywords
        self.args = args  # a positional one: the call is made with the active's arguments
        return self.current

    @property
    def call(self) -> Call:
        call = self._call
        if call is None:
            call = self._call = Call(self.plan, self.instance, self.args, self.kwargs)
        return call

    @property
    def ok(self) -> bool:
        return self.outcome is self.setup.recorder.tallies.ok

    def tracer(self) -> Any:
        return self.setup.recorder.tracer()

    def count(self, metric: str, attributes: dict[str, str] | None, amount: int) -> None:
        self.setup.recorder.count(metric, attributes, amount)

    @property
    def has_item_extractors(self) -> bool:
        return self._call is not None and bool(self.plan.end_extractors)

    def count_rewarded(self, rollout_id: Any) -> None:
        tallies = self.setup.recorder.tallies
        if type(rollout_id) is not str or tallies.rewarded_rollouts.first(rollout_id):
            next(tallies.rewarded)  # (Tally: one C-level call, read by the observable counter)

    def each_item(self, item: Any, attributes: dict[str, Any]) -> None:
        call = self._call
        if call is not None and self.plan.end_extractors:
            call.verdict = item
            run_extractors(self.plan.end_extractors, call, attributes, self.plan.where)
