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
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.trace import Span, SpanKind

from gym_instrument import semconv
from gym_instrument.extract import (
    MISSING,
    ROLLOUT_ID_CONTEXT_KEY,
    ArgLocator,
    Call,
    Extractor,
    runs_at_start,
    verdict_identity,
    verdicts_of,
)
from gym_instrument.linkage import DispatchLinks
from gym_instrument.record import FAILURES, Recorder, run_extractors

# (role, object) of the gym call running in this context: a nested call of the same role on
# the same object (an override calling super(), a function reachable through two wrapped
# names) passes through, so one call makes one span.
_ACTIVE: ContextVar[tuple[str, int] | None] = ContextVar("gym_instrument_active", default=None)

_CANCELLATION = (asyncio.CancelledError, GeneratorExit)

# Metric attributes per outcome, built once (never mutated: instruments only read them).
_OUTCOME_ATTRIBUTES = {
    outcome: {semconv.OUTCOME: outcome} for outcome in (semconv.OUTCOME_OK, semconv.OUTCOME_ERROR, semconv.OUTCOME_CANCELLED)
}


class Engine:
    """What every binding records with; ``instrument()`` swaps it, ``uninstrument()`` resets it."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.links = DispatchLinks(1_000_000)
        self.propagate_baggage = True

    def configure(self, recorder: Recorder, links: DispatchLinks, propagate_baggage: bool) -> None:
        self.recorder, self.links, self.propagate_baggage = recorder, links, propagate_baggage


ENGINE = Engine()


class Role:
    name: str = ""
    span_name: str | None = None
    row_names: tuple[str, ...] = ()

    def current_context(self, span: Span, call: Call) -> context.Context:
        return trace.set_span_in_context(span)

    def spanless_context(self) -> context.Context | None:
        """For a role with no span: the context to make current during the call (None: leave it)."""
        return None

    def on_end(self, active: Active) -> None:
        raise NotImplementedError


class DispatchRole(Role):
    name = semconv.ROLE_DISPATCH
    span_name = semconv.SPAN_DISPATCH
    row_names = ("row", "json")

    def current_context(self, span: Span, call: Call) -> context.Context:
        ctx = trace.set_span_in_context(span)
        rollout_id = call.identity.rollout_id
        if rollout_id is not None:
            if ENGINE.propagate_baggage:
                ctx = baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id, ctx)
            else:
                ctx = context.set_value(ROLLOUT_ID_CONTEXT_KEY, rollout_id, ctx)
        return ctx

    def on_end(self, active: Active) -> None:
        span, call = active.span, active.call
        recorder = active.recorder
        if span is None:
            return
        if not span.is_recording():
            span.end()
            return
        active.set_end_attributes()
        recorder.end_span(span, call.exception, active.cancelled)
        if call.exception is None:
            identity = call.identity
            evicted = active.links.remember(
                span.get_span_context(),
                identity.task_index,
                identity.rollout_index,
                identity.attempt,
                identity.rollout_id if identity.custom_id else None,
            )
            if evicted:
                recorder.count(semconv.METRIC_LINK_EVICTIONS, None, evicted)
        recorder.count(semconv.METRIC_DISPATCHES, _OUTCOME_ATTRIBUTES[active.outcome])


class VerifyRole(Role):
    name = semconv.ROLE_VERIFY
    span_name = semconv.SPAN_VERIFY
    row_names = ("body", "request")

    def on_end(self, active: Active) -> None:
        span = active.span
        if span is None:
            return
        if not span.is_recording():
            span.end()
            return
        attributes = active.set_end_attributes()
        active.recorder.end_span(span, active.call.exception, active.cancelled)
        if semconv.ROLLOUT_REWARD in attributes:
            active.recorder.count(semconv.METRIC_REWARDED)


class HealthRole(Role):
    """No span around the health pass itself: one child span per verdict of a traced dispatch."""

    name = semconv.ROLE_HEALTH
    span_name = None
    row_names = ("rollout_paths",)

    def on_end(self, active: Active) -> None:
        call = active.call
        if call.exception is None:
            self.emit(active, call.result)

    @staticmethod
    def emit(active: Active, result: Any) -> None:
        tracer, call, links, recorder = active.tracer, active.call, active.links, active.recorder
        extractors = active.binding.end_extractors
        for verdict in verdicts_of(result):
            rollout_id, task_index, rollout_index = verdict_identity(verdict)
            link = links.take(rollout_id, task_index, rollout_index)
            if link is None:
                continue  # never traced here (or evicted): no orphan root span
            call.verdict = verdict
            attributes: dict[str, Any] = {}
            run_extractors(extractors, call, attributes)
            attributes[semconv.ROLLOUT_ID] = link.rollout_id
            recorder.emit_child(tracer, semconv.SPAN_HEALTH, link.span_context, attributes)
            name = attributes.get(semconv.HEALTH_VERDICT)
            recorder.count(
                semconv.METRIC_VERDICTS,
                {"verdict": name if name in semconv.KNOWN_VERDICTS else semconv.VERDICT_OTHER},
            )


class IsolateRole(Role):
    """A request boundary: the call runs in an empty OpenTelemetry context, with no gym call active.

    uvicorn can start a keep-alive connection's next request inside the context of the previous
    one (its task is created from a transport callback that ran in that context); the ASGI
    middleware would then parent the request to the previous request's ended span and ignore
    its own ``traceparent`` and ``baggage``, so a verify would carry another rollout's id.
    """

    name = semconv.ROLE_ISOLATE
    span_name = None

    def spanless_context(self) -> context.Context:
        return context.Context()

    def on_end(self, active: Active) -> None:
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
        self.target = target
        self.function = function
        self.armed = True
        self.locator = ArgLocator(function, role.row_names, row_arg)
        self.function_guard = (role.name, id(function))  # the guard of a call without an instance
        self.conditions = tuple((ArgLocator(function, (), name), value) for name, value in (when or {}).items())
        if role.name == semconv.ROLE_HEALTH:
            self.start_extractors: tuple[Extractor, ...] = ()
            self.end_extractors: tuple[Extractor, ...] = tuple(extractors)
        else:
            self.start_extractors = tuple(e for e in extractors if runs_at_start(e))
            self.end_extractors = tuple(e for e in extractors if not runs_at_start(e))

    def applies(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether this call is traced: the target's conditions hold and it is not a nested same-role call."""
        for locator, expected in self.conditions:
            value = locator.find(instance, args, kwargs)
            if value is MISSING or type(value) is not type(expected) or value != expected:
                return False
        return _ACTIVE.get() != (self.function_guard if instance is None else (self.role.name, id(instance)))

    def start(self, tracer: trace.Tracer, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Active:
        """Start the span for one call (health: no span, only the call is kept for its verdicts)."""
        guard = self.function_guard if instance is None else (self.role.name, id(instance))
        call = Call(self.role.name, self.target, self.function, instance, args, kwargs, self.locator)
        role = self.role
        if role.span_name is None:
            return Active(self, tracer, call, None, role.spanless_context(), guard)
        attributes: dict[str, Any] = {}
        run_extractors(self.start_extractors, call, attributes)
        span = tracer.start_span(role.span_name, kind=SpanKind.INTERNAL, attributes=attributes)
        try:
            ctx = role.current_context(span, call)
        except Exception:
            FAILURES.failed("context of role", role)
            ctx = trace.set_span_in_context(span)
        return Active(self, tracer, call, span, ctx, guard)


class Active:
    """One traced call in flight. :meth:`finish` is the single, idempotent place it ends."""

    __slots__ = ("_done", "_tokens", "binding", "call", "cancelled", "ctx", "guard", "links", "recorder", "span", "tracer")

    def __init__(
        self, binding: Binding, tracer: trace.Tracer, call: Call, span: Span | None, ctx: Any, guard: tuple[str, int]
    ) -> None:
        self.binding = binding
        self.tracer = tracer
        self.call = call
        self.span = span
        self.ctx = ctx
        self.guard = guard
        # Fixed when the call starts: an uninstrument() while it is in flight must not send its end
        # (the reward count, the dispatch remembered for its verdict) to the next configuration.
        self.recorder = ENGINE.recorder
        self.links = ENGINE.links
        self.cancelled = False
        self._tokens: tuple[object, Token[Any]] | None = None
        self._done = False

    @property
    def outcome(self) -> str:
        if self.cancelled:
            return semconv.OUTCOME_CANCELLED
        return semconv.OUTCOME_OK if self.call.exception is None else semconv.OUTCOME_ERROR

    def attach(self) -> None:
        self._tokens = (context.attach(self.ctx) if self.ctx is not None else None, _ACTIVE.set(self.guard))

    def detach(self) -> None:
        tokens, self._tokens = self._tokens, None
        if tokens is not None:
            _ACTIVE.reset(tokens[1])
            if tokens[0] is not None:
                context.detach(tokens[0])  # type: ignore[arg-type]

    def set_end_attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        if not self.binding.end_extractors:
            return attributes
        run_extractors(self.binding.end_extractors, self.call, attributes)
        if attributes and self.span is not None:
            self.span.set_attributes(attributes)
        return attributes

    def finish(self, result: Any = MISSING, exception: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.detach()
        except Exception:
            FAILURES.failed("context detach of", Active.detach)
        try:
            self.call.result = result
            self.call.exception = exception
            self.cancelled = isinstance(exception, _CANCELLATION)
            self.binding.role.on_end(self)
        except Exception:
            FAILURES.failed("end of role", self.binding.role)
            if self.span is not None:
                try:
                    self.span.end()  # idempotent in the SDK: a span that already ended warns, never raises
                except Exception:
                    pass


def _tracer_if_applies(binding: Binding, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> trace.Tracer | None:
    """The tracer when this call is to be traced; None passes the call through untouched."""
    if not binding.armed:
        return None
    tracer = ENGINE.recorder.tracer()
    if tracer is None:
        return None
    try:
        return tracer if binding.applies(instance, args, kwargs) else None
    except Exception:
        FAILURES.failed("condition of", binding.role)
        return None


def _start(binding: Binding, tracer: trace.Tracer, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Active | None:
    try:
        return binding.start(tracer, instance, args, kwargs)
    except Exception:
        FAILURES.failed("start of", binding.role)
        return None


def _sync_wrapper(binding: Binding) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tracer = _tracer_if_applies(binding, instance, args, kwargs)
        active = None if tracer is None else _start(binding, tracer, instance, args, kwargs)
        if active is None:
            return wrapped(*args, **kwargs)
        active.attach()
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exception:
            active.finish(exception=exception)
            raise
        active.finish(result=result)
        return result

    return wrapper


def _async_wrapper(binding: Binding) -> Callable[..., Any]:
    # The span starts when the coroutine starts running, so a coroutine never awaited leaves no span.
    async def traced(tracer: trace.Tracer, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = _start(binding, tracer, instance, args, kwargs)
        if active is None:
            return await wrapped(*args, **kwargs)
        active.attach()
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exception:
            active.finish(exception=exception)
            raise
        active.finish(result=result)
        return result

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tracer = _tracer_if_applies(binding, instance, args, kwargs)
        if tracer is None:
            return wrapped(*args, **kwargs)  # not traced: the original coroutine object itself
        return traced(tracer, wrapped, instance, args, kwargs)

    return wrapper


def _generator_wrapper(binding: Binding) -> Callable[..., Any]:
    # The span starts at the first step, so a generator never iterated leaves no span.
    def traced(tracer: trace.Tracer, generator: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = _start(binding, tracer, instance, args, kwargs)
        if active is None:
            return (yield from generator)
        is_health = active.span is None
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
        tracer = _tracer_if_applies(binding, instance, args, kwargs)
        generator = wrapped(*args, **kwargs)
        if tracer is None:
            return generator
        return traced(tracer, generator, instance, args, kwargs)

    return wrapper


def _async_generator_wrapper(binding: Binding) -> Callable[..., Any]:
    async def traced(tracer: trace.Tracer, generator: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = _start(binding, tracer, instance, args, kwargs)
        is_health = active is not None and active.span is None
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
        tracer = _tracer_if_applies(binding, instance, args, kwargs)
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
