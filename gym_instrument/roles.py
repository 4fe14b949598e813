"""What a wrapped function does in a rollout: dispatch, verify or health.

A role names its span and says what happens when the call ends (remember the dispatch for its
health verdict, count a reward, turn verdicts into child spans). One :class:`Binding` ties a
role to one wrapped function with its extractors and where its row sits; :func:`wrapper_for`
returns the wrapt wrapper for that function's kind. Whatever the kind, a span ends in exactly
one place (:meth:`Active.finish`), reached from every exit path, and the context is detached
where it was attached.

Generators: the span covers the iteration, from the first step to exhaustion, an exception or
``close()`` (an abandoned generator is closed by the garbage collector). Its context is current
only while the generator body runs, never in the consumer between items, so the consumer's
own spans are not parented to it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind

from gym_instrument import semconv
from gym_instrument.extract import (
    DEFAULT_EXTRACTORS,
    MISSING,
    ROLLOUT_ID_CONTEXT_KEY,
    ArgLocator,
    Call,
    Extractor,
    RolloutIdentity,
    digests_facts,
    identity_attributes,
    is_trusted,
    request_attributes,
    result_attributes,
    rollout_identity,
    runs_at_start,
    verdict_attributes_of,
    verdict_identity,
    verdicts_of,
)
from gym_instrument.job import JobContext, has_parent
from gym_instrument.linkage import DispatchLinks
from gym_instrument.record import (
    CONTEXT_KEYS,
    FAILURES,
    SUPPRESSION_KEYS,
    FrameworkSpan,
    Recorder,
    framework_span,
    run_extractors,
)

# (role, object) of the gym call running in a context, kept in the context the call attaches: a
# nested call of the same role on the same object (an override calling super(), a function
# reachable through two wrapped names) passes through, so one call makes one span.
_GUARD_KEY = context.create_key("gym_instrument.active")

_CANCELLATION = (asyncio.CancelledError, GeneratorExit)

# Metric attributes per outcome, built once (never mutated: instruments only read them).
_OUTCOME_ATTRIBUTES = {
    outcome: {semconv.OUTCOME: outcome} for outcome in (semconv.OUTCOME_OK, semconv.OUTCOME_ERROR, semconv.OUTCOME_CANCELLED)
}


_VERDICT_ATTRIBUTES = {verdict: {"verdict": verdict} for verdict in (*semconv.KNOWN_VERDICTS, semconv.VERDICT_OTHER)}


class Setup:
    """What one ``instrument()`` records with: the recorder, the dispatch memory, the baggage setting,
    whether ended dispatches are remembered (only when a health function could ask for them), and
    the job context of the process's environment that root dispatch spans are tied to."""

    __slots__ = ("job", "links", "propagate_baggage", "recorder", "remembers")

    def __init__(
        self,
        recorder: Recorder,
        links: DispatchLinks,
        propagate_baggage: bool,
        remembers: bool = True,
        job: JobContext | None = None,
    ) -> None:
        self.recorder = recorder
        self.links = links
        self.propagate_baggage = propagate_baggage
        self.remembers = remembers
        self.job = job
        links.on_evicted = partial(recorder.count, semconv.METRIC_LINK_EVICTIONS, None)


class Engine:
    """The current :class:`Setup`; ``instrument()`` swaps it, ``uninstrument()`` resets it."""

    def __init__(self) -> None:
        self.setup = Setup(Recorder(), DispatchLinks(1_000_000), True)
        self.health_decorated = False  # a function decorated with @health exists: dispatches are remembered

    def configure(self, setup: Setup) -> None:
        """Record with ``setup`` from now on (remembering dispatches anyway once a @health exists)."""
        setup.remembers = setup.remembers or self.health_decorated
        self.setup = setup

    def expect_verdicts(self) -> None:
        """A health function was decorated: remember dispatches from now on, whatever the configuration."""
        self.health_decorated = True
        self.setup.remembers = True

    @property
    def recorder(self) -> Recorder:
        return self.setup.recorder

    @property
    def links(self) -> DispatchLinks:
        return self.setup.links

    @property
    def propagate_baggage(self) -> bool:
        return self.setup.propagate_baggage


ENGINE = Engine()


def _call_context(
    current: Context, span: Span | None, guard: tuple[str, int], rollout_id: str | None, propagate: bool
) -> Context:
    """``current`` with the call's span, its rollout id (W3C baggage, or in-process only) and its guard."""
    keys = CONTEXT_KEYS
    if keys is None:  # the API keeps span and baggage some other way: its public functions, one by one
        ctx = current if span is None else trace.set_span_in_context(span, current)
        if rollout_id is not None:
            if propagate:
                ctx = baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id, ctx)
            else:
                ctx = context.set_value(ROLLOUT_ID_CONTEXT_KEY, rollout_id, ctx)
        return context.set_value(_GUARD_KEY, guard, ctx)
    values = dict(current)
    if span is not None:
        values[keys[0]] = span
    if rollout_id is not None:
        if propagate:
            entries = current.get(keys[1])
            entries = dict(entries) if isinstance(entries, dict) else {}
            entries[semconv.BAGGAGE_ROLLOUT_ID] = rollout_id
            values[keys[1]] = entries
        else:
            values[ROLLOUT_ID_CONTEXT_KEY] = rollout_id
    values[_GUARD_KEY] = guard
    return Context(values)


class Role:
    name: str = ""
    span_name: str | None = None
    row_names: tuple[str, ...] = ()
    carries_rollout_id = False  # the call's context carries its rollout id (baggage)
    isolates = False  # the call runs in an empty context

    def start_attributes(self, binding: Binding, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        """The span's start attributes from the role's default extractors, and the rollout's identity."""
        return {}, None

    def relays(self, current: Context) -> bool:
        """Whether a call with no row of its own, in ``current``, is not this role's (it runs untouched)."""
        return False

    def open_span(self, tracer: trace.Tracer, setup: Setup, current: Context, attributes: dict[str, Any]) -> Span:
        """The call's span: a new one, or the framework's own span of the same name that it runs in."""
        outer = framework_span(current, self.span_name) if current else None  # type: ignore[arg-type]  # an empty context has no span
        if outer is not None:
            if attributes:
                outer.set_attributes(attributes)
            return FrameworkSpan(outer)
        return tracer.start_span(self.span_name, context=current, kind=SpanKind.INTERNAL, attributes=attributes)  # type: ignore[arg-type]

    def on_end(self, active: Active, result: Any, exception: BaseException | None) -> None:
        raise NotImplementedError

    def ended(self, setup: Setup, span: Span, identity: RolloutIdentity | None, result: Any) -> None:
        """The end of a recording span whose call returned, when only the default extractors apply."""
        span.end()


class DispatchRole(Role):
    name = semconv.ROLE_DISPATCH
    span_name = semconv.SPAN_DISPATCH
    row_names = ("row", "json")
    carries_rollout_id = True

    def start_attributes(self, binding: Binding, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        identity = rollout_identity(row)  # it names the span and the baggage whatever the extractors
        return (identity_attributes(identity) if binding.defaults else {}), identity

    def relays(self, current: Context) -> bool:
        # A relay of a rollout already in flight (NeMo Gym 0.7.0's environment server forwards the
        # agent's /run as bytes): no row of its own, and the context already names a rollout. It is
        # not a new dispatch; the HTTP spans around it keep the trace unbroken.
        return (
            baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID, current) is not None
            or context.get_value(ROLLOUT_ID_CONTEXT_KEY, current) is not None
        )

    def open_span(self, tracer: trace.Tracer, setup: Setup, current: Context, attributes: dict[str, Any]) -> Span:
        job = setup.job
        if job is None or has_parent(current):
            return Role.open_span(self, tracer, setup, current, attributes)
        # A root dispatch in a process started for a job (TRACEPARENT): linked to it, or its child.
        if job.as_parent:
            return tracer.start_span(
                self.span_name, context=job.parent_of(current), kind=SpanKind.INTERNAL, attributes=attributes
            )  # type: ignore[arg-type]
        return tracer.start_span(self.span_name, context=current, kind=SpanKind.INTERNAL, attributes=attributes, links=job.links)  # type: ignore[arg-type]

    def on_end(self, active: Active, result: Any, exception: BaseException | None) -> None:
        span = active.span
        if span is None:
            return
        if not span.is_recording():
            span.end()
            return
        if active.binding.end_plan:
            active.set_end_attributes({}, result, exception)
        if exception is None:
            self.ended(active.setup, span, active.identity, result)
        else:
            recorder = active.setup.recorder
            cancelled = isinstance(exception, _CANCELLATION)
            recorder.end_span(span, exception, cancelled)
            recorder.count(
                semconv.METRIC_DISPATCHES,
                _OUTCOME_ATTRIBUTES[semconv.OUTCOME_CANCELLED if cancelled else semconv.OUTCOME_ERROR],
            )

    def ended(self, setup: Setup, span: Span, identity: RolloutIdentity | None, result: Any) -> None:
        span.end()
        # Remembered for a health verdict when a health function is configured (a target or @health);
        # identity None: the row could not be read, and nothing names the rollout.
        if identity is not None and setup.remembers:
            setup.links.remember(
                span.get_span_context(),
                identity.task_index,
                identity.rollout_index,
                identity.attempt,
                identity.rollout_id if identity.custom_id else None,
            )
        setup.recorder.count(semconv.METRIC_DISPATCHES, _OUTCOME_ATTRIBUTES[semconv.OUTCOME_OK])


class VerifyRole(Role):
    name = semconv.ROLE_VERIFY
    span_name = semconv.SPAN_VERIFY
    row_names = ("body", "request")

    def start_attributes(self, binding: Binding, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        return (request_attributes(row, current) if binding.defaults else {}), None

    def on_end(self, active: Active, result: Any, exception: BaseException | None) -> None:
        span = active.span
        if span is None:
            return
        if not span.is_recording():
            span.end()
            return
        attributes = self._result_attributes(result) if active.binding.defaults else {}
        attributes = active.set_end_attributes(attributes, result, exception)
        self._close(active.setup, span, attributes, exception)

    def ended(self, setup: Setup, span: Span, identity: RolloutIdentity | None, result: Any) -> None:
        attributes = self._result_attributes(result)
        if attributes:
            span.set_attributes(attributes)
        self._close(setup, span, attributes, None)

    def _result_attributes(self, result: Any) -> dict[str, Any]:
        try:
            return result_attributes(result)
        except Exception:  # as an extractor's failure: logged once, the span goes on without
            FAILURES.failed("default extractor of", self)
            return {}

    @staticmethod
    def _close(setup: Setup, span: Span, attributes: dict[str, Any], exception: BaseException | None) -> None:
        if exception is None:
            span.end()
        else:
            setup.recorder.end_span(span, exception, isinstance(exception, _CANCELLATION))
        if semconv.ROLLOUT_REWARD in attributes:
            setup.recorder.count(semconv.METRIC_REWARDED)


class HealthRole(Role):
    """No span around the health pass itself: one child span per verdict of a traced dispatch."""

    name = semconv.ROLE_HEALTH
    span_name = None
    row_names = ("rollout_paths",)

    def on_end(self, active: Active, result: Any, exception: BaseException | None) -> None:
        if exception is None:
            self.emit(active, result)

    @staticmethod
    def emit(active: Active, result: Any) -> None:
        links, recorder = active.setup.links, active.setup.recorder
        tracer = recorder.tracer()
        if tracer is None:
            return
        plan, defaults, call = active.binding.end_plan, active.binding.defaults, active.call
        current = context.get_current()
        # Each health span's parent is an ended dispatch span: set in (a copy of) the current context, not made current.
        values = dict(current) if CONTEXT_KEYS is not None else None
        spanned: list[Any] = []  # the verdict name of each span, counted once per pass (the same sums)
        try:
            verdicts = [*verdicts_of(result)]
            facts = digests_facts(verdicts)  # NeMo Gym's digests, each read once
            names = [
                fact[0] if fact is not None else verdict_identity(verdict) for verdict, fact in zip(verdicts, facts, strict=True)
            ]
            for verdict, fact, link in zip(verdicts, facts, links.take_many(names), strict=True):
                if link is None:
                    continue  # never traced here (or evicted): no orphan root span
                if fact is not None and defaults:
                    attributes = fact[1]
                else:
                    attributes = {}
                    if defaults:
                        try:
                            attributes = verdict_attributes_of(verdict)
                        except Exception:  # as an extractor's failure: logged once, the span goes on without
                            FAILURES.failed("default extractor of", HealthRole)
                if plan:
                    call.verdict = verdict  # type: ignore[union-attr]
                    run_extractors(plan, call, attributes)
                attributes[semconv.ROLLOUT_ID] = link[1]
                if values is not None:
                    values[CONTEXT_KEYS[0]] = NonRecordingSpan(link[0])  # type: ignore[index]
                    parent = Context(values)
                else:
                    parent = trace.set_span_in_context(NonRecordingSpan(link[0]), current)
                tracer.start_span(semconv.SPAN_HEALTH, context=parent, kind=SpanKind.INTERNAL, attributes=attributes).end()
                spanned.append(attributes.get(semconv.HEALTH_VERDICT))
        finally:
            tally: Counter[str] = Counter()
            for name, count in Counter(spanned).items():
                tally[name if name in semconv.KNOWN_VERDICTS else semconv.VERDICT_OTHER] += count
            for name, count in tally.items():
                recorder.count(semconv.METRIC_VERDICTS, _VERDICT_ATTRIBUTES[name], count)


class IsolateRole(Role):
    """A request boundary: the call runs in an empty OpenTelemetry context, with no gym call active.

    uvicorn can start a keep-alive connection's next request inside the context of the previous
    one (its task is created from a transport callback that ran in that context); the ASGI
    middleware would then parent the request to the previous request's ended span and ignore
    its own ``traceparent`` and ``baggage``, so a verify would carry another rollout's id.
    """

    name = semconv.ROLE_ISOLATE
    span_name = None
    isolates = True

    def on_end(self, active: Active, result: Any, exception: BaseException | None) -> None:
        pass


ROLES: dict[str, Role] = {role.name: role for role in (DispatchRole(), VerifyRole(), HealthRole(), IsolateRole())}


class Binding:
    """One role applied to one function: its extractors, where its row sits, when it applies."""

    def __init__(
        self,
        role: Role,
        function: Callable[..., Any],
        target: Any,
        extractors: Sequence[Extractor],
        row_arg: str | None = None,
        when: Mapping[str, Any] | None = None,
    ) -> None:
        self.role = role
        self.role_name = role.name
        self.target = target
        self.function = function
        self.armed = True
        self.locator = ArgLocator(function, role.row_names, row_arg)
        self.function_guard = (role.name, id(function))  # the guard of a call without an instance
        # (name, its position with a bound instance, without one, the value it must have)
        self.conditions = tuple(
            (name, locator.index_bound, locator.index_unbound, value)
            for name, value in (when or {}).items()
            for locator in (ArgLocator(function, (), name),)
        )
        # The role's default extractors run as the role's own code (the same functions, without
        # building a Call for them); the plans hold the others, in order, after them.
        defaults = DEFAULT_EXTRACTORS[role.name]
        self.defaults = bool(defaults) and tuple(extractors[: len(defaults)]) == defaults
        others = tuple(extractors[len(defaults) :]) if self.defaults else tuple(extractors)
        at_start = () if role.name == semconv.ROLE_HEALTH else tuple(e for e in others if runs_at_start(e))
        self.start_plan = tuple((e, is_trusted(e)) for e in at_start)
        self.end_plan = tuple((e, is_trusted(e)) for e in others if e not in at_start)
        self.plans = bool(self.start_plan or self.end_plan)  # a call then has a Call for its extractors
        # Only the role's defaults, for a role that spans one call: wrapper_for gives it the short path.
        self.fast = self.defaults and not self.plans and role.name in (semconv.ROLE_DISPATCH, semconv.ROLE_VERIFY)

    def admit(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[trace.Tracer, Context] | None:
        """The tracer and the current context when this call is traced; None passes it through untouched.

        Traced when something records (an SDK is set; with none, nothing else is looked at),
        instrumentation is not suppressed, the target's conditions hold, and it is not a nested
        call of the same role on the same object.
        """
        if not self.armed:
            return None
        try:
            recorder = ENGINE.setup.recorder
            tracer = recorder.cached_tracer or recorder.tracer()
            if tracer is None:
                return None
            current = context.get_current()
            if SUPPRESSION_KEYS is None:  # the keys could not be found: the API's own check
                if not is_instrumentation_enabled():
                    return None
            else:
                for key in SUPPRESSION_KEYS:
                    if current.get(key):
                        return None
            for name, index_bound, index_unbound, expected in self.conditions:
                # ArgLocator.find for one name, written out: it runs on every call of the target
                if kwargs and name in kwargs:
                    value = kwargs[name]
                else:
                    index = index_unbound if instance is None else index_bound
                    if index is None or index >= len(args):
                        return None
                    value = args[index]
                if type(value) is not type(expected) or value != expected:
                    return None
            if current.get(_GUARD_KEY) == (self.function_guard if instance is None else (self.role_name, id(instance))):
                return None
        except Exception:
            FAILURES.failed("condition of", self.role)
            return None
        return tracer, current

    def check(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> trace.Tracer | None:
        """The tracer when a call is traced, decided when it is made (a coroutine or generator starts later)."""
        admitted = self.admit(instance, args, kwargs)
        return None if admitted is None else admitted[0]

    def enter(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Active | None:
        """A plain function's call, checked, started and attached; None passes it through untouched."""
        admitted = self.admit(instance, args, kwargs)
        if admitted is None:
            return None
        active = self.start(admitted[0], ENGINE.setup, admitted[1], instance, args, kwargs)
        if active is not None:
            active._token = context.attach(active.ctx)  # type: ignore[arg-type]
        return active

    def start(
        self, tracer: trace.Tracer, setup: Setup, current: Context, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Active | None:
        """Start the span for one call (health, isolate: no span) and its context; None when the call
        is not the role's (a relay) or starting failed: it then runs untouched."""
        role = self.role
        span = rollout_id = None
        try:
            call = Call(self, instance, args, kwargs) if self.plans else None
            active = Active(self, setup, call)
            if role.span_name is not None:
                found = self.locator.find(instance, args, kwargs)
                row = None if found is MISSING else found
                if row is None and role.relays(current):
                    return None
                if call is not None:
                    call._row = row
                try:
                    attributes, identity = role.start_attributes(self, row, current)
                except Exception:  # as an extractor's failure: logged once, the span goes on without
                    FAILURES.failed("default extractor of", role)
                    attributes, identity = {}, None
                if identity is not None:
                    active.identity = identity
                    rollout_id = identity.rollout_id
                    if call is not None:
                        call._identity = identity
                if self.start_plan:
                    run_extractors(self.start_plan, call, attributes)
                span = active.span = role.open_span(tracer, setup, current, attributes)
        except Exception:
            FAILURES.failed("start of", role)
            return None
        guard = self.function_guard if instance is None else (self.role_name, id(instance))
        try:
            if role.isolates:
                active.ctx = Context({_GUARD_KEY: guard})
            else:
                active.ctx = _call_context(current, span, guard, rollout_id, setup.propagate_baggage)
        except Exception:
            FAILURES.failed("context of role", role)
            active.ctx = _call_context(current, span, guard, None, True)
        return active


class Active:
    """One traced call in flight. :meth:`finish` is the single, idempotent place it ends.

    ``setup`` is fixed when the call starts: an uninstrument() while it is in flight must not send
    its end (the reward count, the dispatch remembered for its verdict) to the next configuration.
    ``call`` is what the binding's own extractors are given (None when it has none).
    """

    __slots__ = ("_done", "_token", "binding", "call", "ctx", "identity", "setup", "span")

    def __init__(self, binding: Binding, setup: Setup, call: Call | None) -> None:
        self.binding = binding
        self.setup = setup
        self.call = call
        self.span: Span | None = None
        self.identity: RolloutIdentity | None = None
        self.ctx: Context | None = None
        self._token: object | None = None
        self._done = False

    def attach(self) -> None:
        self._token = context.attach(self.ctx)  # type: ignore[arg-type]

    def detach(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            context.detach(token)  # type: ignore[arg-type]

    def set_end_attributes(self, attributes: dict[str, Any], result: Any, exception: BaseException | None) -> dict[str, Any]:
        """Put the role's own end attributes and those of the end extractors on the span."""
        plan = self.binding.end_plan
        if plan:
            call: Call = self.call  # type: ignore[assignment]
            call.result, call.exception = result, exception
            run_extractors(plan, call, attributes)
        if attributes and self.span is not None:
            self.span.set_attributes(attributes)
        return attributes

    def finish(self, result: Any = MISSING, exception: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        token = self._token
        if token is not None:
            self._token = None
            try:
                context.detach(token)  # type: ignore[arg-type]
            except Exception:
                FAILURES.failed("context detach of", Active.detach)
        try:
            self.binding.role.on_end(self, result, exception)
        except Exception:
            FAILURES.failed("end of role", self.binding.role)
            if self.span is not None:
                try:
                    self.span.end()  # idempotent in the SDK: a span that already ended warns, never raises
                except Exception:
                    pass


def _sync_wrapper(binding: Binding) -> Callable[..., Any]:
    if binding.fast:
        return _short_sync_wrapper(binding)
    enter = binding.enter

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = enter(instance, args, kwargs)
        if active is None:
            return wrapped(*args, **kwargs)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise
        active.finish(result)
        return result

    return wrapper


def _async_wrapper(binding: Binding) -> Callable[..., Any]:
    if binding.fast:
        return _short_async_wrapper(binding)

    # The span starts when the coroutine starts running, so a coroutine never awaited leaves no span.
    async def traced(tracer: trace.Tracer, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = binding.start(tracer, ENGINE.setup, context.get_current(), instance, args, kwargs)
        if active is None:
            return await wrapped(*args, **kwargs)
        active._token = context.attach(active.ctx)  # type: ignore[arg-type]
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise
        active.finish(result)
        return result

    check = binding.check

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tracer = check(instance, args, kwargs)
        if tracer is None:
            return wrapped(*args, **kwargs)  # not traced: the original coroutine object itself
        return traced(tracer, wrapped, instance, args, kwargs)

    return wrapper


# The short path: a dispatch or verify with only the role's default extractors (the usual target),
# in one frame from admission to end. What it does is Binding.start and Active.finish without a
# Call, an Active or their calls: the role computes the attributes (start_attributes) and ends a
# returned call (ended); any other end (raised, cancelled, not recording) is the role's on_end.
# tests/test_roles.py runs the same calls through both paths and compares what they export.


def _short_start(binding: Binding) -> Callable[..., tuple[Span | None, RolloutIdentity | None]]:
    """The short path's start, for both wrappers: the call's span and identity, or (None, None)
    when the call is not the role's (a relay) or starting failed, and it runs untouched."""
    role, find = binding.role, binding.locator.find

    def start(
        tracer: trace.Tracer, setup: Setup, current: Context, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Span | None, RolloutIdentity | None]:
        try:
            row = find(instance, args, kwargs)
            row = None if row is MISSING else row
            if row is None and role.relays(current):
                return None, None
            try:
                attributes, identity = role.start_attributes(binding, row, current)
            except Exception:  # as an extractor's failure: logged once, the span goes on without
                FAILURES.failed("default extractor of", role)
                attributes, identity = {}, None
            return role.open_span(tracer, setup, current, attributes), identity
        except Exception:
            FAILURES.failed("start of", role)
            return None, None

    return start


def _short_sync_wrapper(binding: Binding) -> Callable[..., Any]:
    admit, start = binding.admit, _short_start(binding)

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        admitted = admit(instance, args, kwargs)
        if admitted is None:
            return wrapped(*args, **kwargs)
        tracer, current = admitted
        setup = ENGINE.setup
        span, identity = start(tracer, setup, current, instance, args, kwargs)
        if span is None:
            return wrapped(*args, **kwargs)
        token = _attach_call_context(binding, setup, current, span, identity, instance)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exception:
            _end_short(binding, setup, span, identity, token, MISSING, exception)
            raise
        _end_short(binding, setup, span, identity, token, result, None)
        return result

    return wrapper


def _short_async_wrapper(binding: Binding) -> Callable[..., Any]:
    admit, start = binding.admit, _short_start(binding)

    # The span starts when the coroutine starts running, so a coroutine never awaited leaves no span.
    async def traced(tracer: trace.Tracer, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        current = context.get_current()
        setup = ENGINE.setup
        span, identity = start(tracer, setup, current, instance, args, kwargs)
        if span is None:
            return await wrapped(*args, **kwargs)
        token = _attach_call_context(binding, setup, current, span, identity, instance)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exception:
            _end_short(binding, setup, span, identity, token, MISSING, exception)
            raise
        _end_short(binding, setup, span, identity, token, result, None)
        return result

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        admitted = admit(instance, args, kwargs)
        if admitted is None:
            return wrapped(*args, **kwargs)  # not traced: the original coroutine object itself
        return traced(admitted[0], wrapped, instance, args, kwargs)

    return wrapper


def _attach_call_context(
    binding: Binding, setup: Setup, current: Context, span: Span, identity: RolloutIdentity | None, instance: Any
) -> object:
    guard = binding.function_guard if instance is None else (binding.role_name, id(instance))
    try:
        ctx = _call_context(current, span, guard, None if identity is None else identity.rollout_id, setup.propagate_baggage)
    except Exception:
        FAILURES.failed("context of role", binding.role)
        ctx = _call_context(current, span, guard, None, True)
    return context.attach(ctx)


def _end_short(
    binding: Binding,
    setup: Setup,
    span: Span,
    identity: RolloutIdentity | None,
    token: object,
    result: Any,
    exception: BaseException | None,
) -> None:
    """:meth:`Active.finish` of the short path."""
    try:
        context.detach(token)  # type: ignore[arg-type]
    except Exception:
        FAILURES.failed("context detach of", Active.detach)
    role = binding.role
    try:
        if exception is None and span.is_recording():
            role.ended(setup, span, identity, result)
        else:
            active = Active(binding, setup, None)
            active.span, active.identity = span, identity
            role.on_end(active, result, exception)
    except Exception:
        FAILURES.failed("end of role", role)
        try:
            span.end()  # idempotent in the SDK: a span that already ended warns, never raises
        except Exception:
            pass


def _generator_wrapper(binding: Binding) -> Callable[..., Any]:
    # The span starts at the first step, so a generator never iterated leaves no span.
    def traced(tracer: trace.Tracer, generator: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = binding.start(tracer, ENGINE.setup, context.get_current(), instance, args, kwargs)
        if active is None:
            return (yield from generator)
        is_health = binding.role_name == semconv.ROLE_HEALTH
        to_send: Any = None
        to_throw: BaseException | None = None
        try:
            while True:
                active.attach()
                try:
                    item = generator.throw(to_throw) if to_throw is not None else generator.send(to_send)
                except StopIteration as stop:
                    active.finish(result=stop.value)
                    return stop.value
                active.detach()
                if is_health:
                    _emit_health_item(active, item)
                to_send, to_throw = None, None
                try:
                    to_send = yield item
                except GeneratorExit:
                    generator.close()
                    raise
                except BaseException as thrown:
                    to_throw = thrown
        except BaseException as exception:
            active.finish(exception=exception)
            raise

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tracer = binding.check(instance, args, kwargs)
        generator = wrapped(*args, **kwargs)
        if tracer is None:
            return generator
        return traced(tracer, generator, instance, args, kwargs)

    return wrapper


def _async_generator_wrapper(binding: Binding) -> Callable[..., Any]:
    async def traced(tracer: trace.Tracer, generator: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = binding.start(tracer, ENGINE.setup, context.get_current(), instance, args, kwargs)
        is_health = active is not None and binding.role_name == semconv.ROLE_HEALTH
        to_send: Any = None
        to_throw: BaseException | None = None
        try:
            while True:
                if active is not None:
                    active.attach()
                try:
                    if to_throw is not None:
                        item = await generator.athrow(to_throw)
                    else:
                        item = await generator.asend(to_send)
                except StopAsyncIteration:
                    if active is not None:
                        active.finish(result=None)
                    return
                if active is not None:
                    active.detach()
                if is_health:
                    _emit_health_item(active, item)  # type: ignore[arg-type]
                to_send, to_throw = None, None
                try:
                    to_send = yield item
                except GeneratorExit:
                    await generator.aclose()
                    raise
                except BaseException as thrown:
                    to_throw = thrown
        except BaseException as exception:
            if active is not None:
                active.finish(exception=exception)
            raise

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tracer = binding.check(instance, args, kwargs)
        generator = wrapped(*args, **kwargs)
        if tracer is None:
            return generator
        return traced(tracer, generator, instance, args, kwargs)

    return wrapper


def _emit_health_item(active: Active, item: Any) -> None:
    try:
        HealthRole.emit(active, item)
    except Exception:
        FAILURES.failed("health item of", active.binding.role)


def function_kind(function: Any) -> str:
    raw = getattr(function, "__func__", function)  # classmethod / staticmethod objects
    if inspect.isasyncgenfunction(raw):
        return "async_generator"
    if inspect.iscoroutinefunction(raw):
        return "coroutine"
    if inspect.isgeneratorfunction(raw):
        return "generator"
    return "sync"


_WRAPPERS = {
    "sync": _sync_wrapper,
    "coroutine": _async_wrapper,
    "generator": _generator_wrapper,
    "async_generator": _async_generator_wrapper,
}


def wrapper_for(binding: Binding, function: Any) -> Callable[..., Any]:
    """The wrapt wrapper function for one binding, by the kind of the function it wraps."""
    return _WRAPPERS[function_kind(function)](binding)
