"""The engine: one precomputed :class:`Plan` per wrapped function, one start path, one end path.

At wrap time a target becomes a plan: its role (``roles``), where its row sits and the condition
its arguments must meet, the schema its attributes are read through, the user's extractors split
into those that run at the start and at the end, and the role's capability flags as plain
booleans. At call time one wrapper per kind of function runs it: sync, coroutine, generator,
async generator and async context manager. Each one admits the call (:meth:`Plan.admit`), starts
it (:meth:`Plan.start`) and ends it in exactly one idempotent place (:meth:`Active.finish`),
reached from every exit path; the context is detached where it was attached. The extractor
return convention (``extract``) is applied in those two places and nowhere else: a rollout id
from a start extractor names the rollout (baggage included), an ``error.type`` from an end
extractor marks a returned call failed.

Generators: the span covers the iteration, from the first step to exhaustion, an exception or
``close()`` (an abandoned generator is closed by the garbage collector). Its context is current
only while the generator body runs, never in the consumer between items, so the consumer's
own spans are not parented to it. An async context manager's span covers the body of the
``async with``, which runs with the span current.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import wrapt
from opentelemetry import context
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from gym_instrument import compat, semconv
from gym_instrument.compat import attach, current_context, detach
from gym_instrument.extract import Call, Extractor, run_extractors, runs_at_start
from gym_instrument.job import JobContext
from gym_instrument.linkage import DispatchLinks
from gym_instrument.record import FAILURES, Recorder
from gym_instrument.roles import ROLLOUT_ID_CONTEXT_KEY, Role
from gym_instrument.schema import MISSING, RolloutIdentity, RolloutSchema, named_identity, rollout_id_string

if TYPE_CHECKING:
    from gym_instrument.targets import ArgLocator, Target

# The object (instance, or function without one) of the gym call of a role running in a context,
# kept under the role's own key in the context the call attaches: a nested call of the same role
# on the same object (an override calling super(), a function reachable through two wrapped
# names) passes through, so one call makes one span.
_GUARD_KEYS: dict[str, str] = {}


def _guard_key(role: Role) -> str:
    key = _GUARD_KEYS.get(role.name)
    if key is None:
        key = _GUARD_KEYS[role.name] = context.create_key(f"gym_instrument.active.{role.name}")
    return key


_CANCELLATION = (asyncio.CancelledError, GeneratorExit)


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
_INTERNAL = SpanKind.INTERNAL
_NO_CONTEXT = Context()  # an Active's until Plan.start gives it its own (a Context is never changed in place)


class Plan:
    """Everything one wrapped function's calls need that can be known when it is wrapped."""

    __slots__ = (
        "adopts",
        "argument_locators",
        "armed",
        "binds_instance",
        "carries_rollout_id",
        "conditions",
        "counts_outcome",
        "counts_reward",
        "defaults",
        "direct",
        "emits",
        "end_extractors",
        "find_row",
        "framework",
        "function",
        "function_guard",
        "guard_key",
        "isolates",
        "locator",
        "makes_call",
        "open_span",
        "reads_result",
        "remembers",
        "role",
        "role_name",
        "schema",
        "span_name",
        "spans",
        "start_attributes",
        "start_extractors",
        "target",
    )

    def __init__(
        self,
        role: Role,
        function: Callable[..., Any],
        target: Target,
        locator: ArgLocator,
        conditions: Sequence[tuple[str, int | None, int | None, Any]],
        schema: RolloutSchema,
        extractors: Sequence[Extractor],
        defaults: bool,
        binds_instance: bool,
    ) -> None:
        self.role = role
        self.role_name = role.name
        self.target = target
        self.function = function
        self.schema = schema
        self.locator = locator
        # The role's and the locator's methods, bound once: called on every call of the target.
        self.find_row = locator.find
        self.start_attributes = role.start_attributes
        self.open_span = role.open_span
        # (argument name, its position with a bound instance, without one, the value it must have)
        self.conditions = tuple(conditions)
        self.guard_key = _guard_key(role)
        self.function_guard = id(function)  # the guard of a call without an instance
        self.armed = True
        self.binds_instance = binds_instance
        self.spans = role.span_name is not None
        self.adopts = role.span_name in schema.framework_spans
        self.span_name = role.span_name
        self.direct = self.spans and not self.adopts  # a plain span when no job is set (Role.open_span)
        self.framework = target.framework  # nemo.gym.framework on its spans, when its target names one
        self.argument_locators: dict[str, ArgLocator] = {}  # Call.argument's, made on first use
        self.use_extractors(extractors, defaults)
        # The role's capability flags, as plain booleans.
        self.counts_outcome = role.counts_outcome
        self.counts_reward = role.counts_reward
        self.carries_rollout_id = role.carries_rollout_id
        self.remembers = role.remembers_dispatch
        self.emits = role.emits_child_spans
        self.isolates = role.isolates

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
        self.reads_result = defaults and type(self.role).on_success is not Role.on_success

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
            if recorder.cached_tracer is None and recorder.tracer() is None:
                return None
            current = current_context()
            keys = compat.SUPPRESSION_KEYS
            if keys is None:
                if compat.suppressed(current):
                    return None
            else:
                for key in keys:
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
            guard = current.get(self.guard_key)
            if guard is not None and guard == (self.function_guard if instance is None else id(instance)):
                return None
        except Exception:
            FAILURES.failed("condition of", self.role)
            return None
        return current

    def start(self, current: Context, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Active | None:
        """Start one admitted call: its span (none for a role without one) and its context, not yet
        attached. None when the call is not the role's (a relay) or starting failed: it runs untouched."""
        role = self.role
        setup = ENGINE.setup
        span = rollout_id = None
        try:
            recorder = setup.recorder
            tracer = recorder.cached_tracer or recorder.tracer()
            if tracer is None:
                return None  # uninstrumented since the call was admitted
            active = Active(self, setup)
            call = active.call = Call(self, instance, args, kwargs) if self.makes_call else None
            if self.spans:
                row = self.find_row(instance, args, kwargs)
                if row is MISSING:
                    row = None
                if row is None and role.relays(current):
                    return None
                try:
                    attributes, identity = self.start_attributes(self, row, current)
                except Exception:  # a schema that fails on this row: logged once, the span goes on without
                    FAILURES.failed("attribute rules of", role)
                    attributes, identity = {}, None
                if identity is not None:
                    active.identity = identity
                    rollout_id = identity.rollout_id
                if self.framework is not None:
                    attributes[semconv.FRAMEWORK] = self.framework
                if self.start_extractors:
                    run_extractors(self.start_extractors, call, attributes)  # type: ignore[arg-type]
                    if self.carries_rollout_id:
                        # An extractor's rollout id names the rollout, baggage included (extract's convention).
                        extracted = rollout_id_string(attributes.get(semconv.ROLLOUT_ID))
                        if extracted is not None and extracted != rollout_id:
                            rollout_id = extracted
                            active.identity = named_identity(active.identity, extracted)
                if self.direct and setup.job is None:
                    span = active.span = tracer.start_span(self.span_name, current, _INTERNAL, attributes)  # type: ignore[arg-type]  # (a role with a span has its name)
                else:
                    span = active.span = self.open_span(self, tracer, setup, current, attributes)
        except Exception:
            FAILURES.failed("start of", role)
            return None
        guard_key, guard = self.guard_key, self.function_guard if instance is None else id(instance)
        try:
            if self.isolates:
                active.ctx = Context({guard_key: guard})
            elif rollout_id is None:
                active.ctx = compat.with_values(current, span, None, guard_key, guard)
            elif setup.propagate_baggage:
                active.ctx = compat.with_values(current, span, (semconv.BAGGAGE_ROLLOUT_ID, rollout_id), guard_key, guard)
            else:  # in-process only: a plain context value, which no propagator writes into headers
                in_process = compat.with_values(current, span, None, ROLLOUT_ID_CONTEXT_KEY, rollout_id)
                active.ctx = compat.with_values(in_process, None, None, guard_key, guard)
        except Exception:
            FAILURES.failed("context of role", role)
            active.ctx = compat.with_values(current, span, None, guard_key, guard)
        return active


class Active:
    """One call in flight. :meth:`finish` is the single, idempotent place it ends.

    ``setup`` is fixed when the call starts: an uninstrument() while it is in flight must not send
    its end (the reward count, the dispatch remembered for its verdict) to the next configuration.
    ``call`` is what the plan's extractors are given (None when it has none).
    """

    __slots__ = ("call", "ctx", "done", "identity", "plan", "setup", "span", "token")

    def __init__(self, plan: Plan, setup: Setup) -> None:
        self.plan = plan
        self.setup = setup
        self.call: Call | None = None
        self.span: Span | None = None
        self.identity: RolloutIdentity | None = None
        self.ctx: Context = _NO_CONTEXT  # Plan.start sets the call's own before it returns it
        self.token: object | None = None
        self.done = False

    def attach(self) -> None:
        self.token = attach(self.ctx)

    def detach(self) -> None:
        token, self.token = self.token, None
        if token is not None:
            try:
                detach(token)
            except Exception:
                FAILURES.failed("context detach of", Active.detach)

    def finish(self, result: Any = MISSING, exception: BaseException | None = None) -> None:
        """End the call: the role's end rules, the user's end extractors, the span, the counts."""
        if self.done:
            return
        self.done = True
        token = self.token
        if token is not None:
            self.token = None
            try:
                detach(token)
            except Exception:
                FAILURES.failed("context detach of", Active.detach)
        plan = self.plan
        span = self.span
        try:
            if plan.emits:
                if exception is None:
                    plan.role.emit(self, result)
                return
            if span is None:
                return
            if not span.is_recording():
                span.end()  # sampled out: nothing to read, count or remember
                return
            attributes: dict[str, Any] | None = None
            failed_as = None  # error.type an end extractor returned for a call that returned
            if exception is None and plan.reads_result:
                try:
                    attributes = plan.role.on_success(plan, result)
                except Exception:  # a schema that fails on this result: logged once, the span goes on without
                    FAILURES.failed("attribute rules of", plan.role)
            if plan.end_extractors:
                call: Call = self.call  # type: ignore[assignment]
                call.result, call.exception = result, exception
                if attributes is None:
                    attributes = {}
                run_extractors(plan.end_extractors, call, attributes)
                if exception is None:
                    failed_as = attributes.get(semconv.ERROR_TYPE)
            if attributes:
                span.set_attributes(attributes)
            setup = self.setup
            tallies = setup.recorder.tallies
            if failed_as is not None:  # a failure that came back as data (extract's convention)
                span.set_status(Status(StatusCode.ERROR, str(failed_as)))
                span.end()
                outcome = tallies.error
            elif exception is None:
                span.end()
                if plan.remembers and setup.remembers:
                    identity = self.identity
                    # identity None: the row could not be read, and nothing names the rollout.
                    if identity is not None:
                        setup.links.remember(span.get_span_context(), identity)
                outcome = tallies.ok
            else:
                cancelled = isinstance(exception, _CANCELLATION)
                setup.recorder.end_span(span, exception, cancelled)
                outcome = tallies.cancelled if cancelled else tallies.error
            if plan.counts_reward and attributes and semconv.ROLLOUT_REWARD in attributes:
                next(tallies.rewarded)  # (Tally: one C-level call, read by the observable counter)
            if plan.counts_outcome:
                next(outcome)
        except Exception:
            FAILURES.failed("end of role", plan.role)
            if span is not None:
                try:
                    span.end()  # idempotent in the SDK: a span that already ended warns, never raises
                except Exception:
                    pass


# ---------------------------------------------------------------------------------------------
# One wrapper per kind of function. Each admits, starts, attaches and finishes; nothing else.


def _sync_wrapper(plan: Plan) -> Callable[..., Any]:
    admit, start = plan.admit, plan.start

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        current = admit(instance, args, kwargs)
        if current is None:
            return wrapped(*args, **kwargs)
        active = start(current, instance, args, kwargs)
        if active is None:
            return wrapped(*args, **kwargs)
        active.token = attach(active.ctx)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise
        active.finish(result)
        return result

    return wrapper


def _coroutine_wrapper(plan: Plan) -> Callable[..., Any]:
    admit, start = plan.admit, plan.start

    # The span starts when the coroutine starts running, so a coroutine never awaited leaves no span.
    async def traced(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = start(current_context(), instance, args, kwargs)
        if active is None:
            return await wrapped(*args, **kwargs)
        active.token = attach(active.ctx)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise
        active.finish(result)
        return result

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if admit(instance, args, kwargs) is None:
            return wrapped(*args, **kwargs)  # not traced: the original coroutine object itself
        return traced(wrapped, instance, args, kwargs)

    return wrapper


def _tracing_what_it_makes(admit: Callable[..., Context | None], traced: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper of a function that makes a generator or a context manager: the call is admitted
    when it is made, and what it made is traced from its first step (or its entering) on."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        admitted = admit(instance, args, kwargs)
        made = wrapped(*args, **kwargs)
        return made if admitted is None else traced(made, instance, args, kwargs)

    return wrapper


def _generator_wrapper(plan: Plan) -> Callable[..., Any]:
    start, emits = plan.start, plan.emits

    # The span starts at the first step, so a generator never iterated leaves no span.
    def traced(generator: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = start(current_context(), instance, args, kwargs)
        if active is None:
            return (yield from generator)
        to_send: Any = None
        to_throw: BaseException | None = None
        try:
            while True:
                active.attach()
                try:
                    item = generator.throw(to_throw) if to_throw is not None else generator.send(to_send)
                except StopIteration as stop:
                    active.finish(stop.value)
                    return stop.value
                active.detach()
                if emits:
                    _emit_item(active, item)
                to_send, to_throw = None, None
                try:
                    to_send = yield item
                except GeneratorExit:
                    generator.close()
                    raise
                except BaseException as thrown:
                    to_throw = thrown
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise

    return _tracing_what_it_makes(plan.admit, traced)


def _async_generator_wrapper(plan: Plan) -> Callable[..., Any]:
    start, emits = plan.start, plan.emits

    async def traced(generator: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        active = start(current_context(), instance, args, kwargs)
        if active is None:
            async for item in _passthrough(generator):
                yield item
            return
        to_send: Any = None
        to_throw: BaseException | None = None
        try:
            while True:
                active.attach()
                try:
                    item = await (generator.athrow(to_throw) if to_throw is not None else generator.asend(to_send))
                except StopAsyncIteration:
                    active.finish(None)
                    return
                active.detach()
                if emits:
                    _emit_item(active, item)
                to_send, to_throw = None, None
                try:
                    to_send = yield item
                except GeneratorExit:
                    await generator.aclose()
                    raise
                except BaseException as thrown:
                    to_throw = thrown
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise

    return _tracing_what_it_makes(plan.admit, traced)


async def _passthrough(generator: Any) -> Any:
    """An async generator's items, values sent and exceptions thrown, untouched (a relay's generator)."""
    to_send: Any = None
    to_throw: BaseException | None = None
    while True:
        try:
            item = await (generator.athrow(to_throw) if to_throw is not None else generator.asend(to_send))
        except StopAsyncIteration:
            return
        to_send, to_throw = None, None
        try:
            to_send = yield item
        except GeneratorExit:
            await generator.aclose()
            raise
        except BaseException as thrown:
            to_throw = thrown


class _TracedAsyncContextManager(wrapt.ObjectProxy):  # type: ignore[type-arg]
    """The async context manager a target returned, with the call's span around the ``async with`` body.

    Everything but entering and leaving is the manager's own (wrapt forwards it). The span starts
    when the body is entered, is current in the body, and ends when it is left: the result is what
    ``__aenter__`` returned; an exception that leaves the block (one the manager does not
    suppress) is the call's exception.
    """

    def __init__(self, manager: Any, plan: Plan, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__(manager)
        self._self_plan = plan
        self._self_call = (instance, args, kwargs)
        self._self_active: Active | None = None
        self._self_entered: Any = None

    async def __aenter__(self) -> Any:
        active = self._self_plan.start(current_context(), *self._self_call)
        if active is None:
            return await self.__wrapped__.__aenter__()
        active.token = attach(active.ctx)
        try:
            entered = await self.__wrapped__.__aenter__()
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise
        self._self_active, self._self_entered = active, entered
        return entered

    async def __aexit__(self, kind: Any, exception: BaseException | None, traceback: Any) -> Any:
        active, self._self_active = self._self_active, None
        if active is None:
            return await self.__wrapped__.__aexit__(kind, exception, traceback)
        try:
            suppressed = await self.__wrapped__.__aexit__(kind, exception, traceback)
        except BaseException as raised:
            active.finish(MISSING, raised)
            raise
        if exception is not None and not suppressed:
            active.finish(MISSING, exception)
        else:
            active.finish(self._self_entered)
        return suppressed


def _async_context_manager_wrapper(plan: Plan) -> Callable[..., Any]:
    def traced(manager: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not hasattr(type(manager), "__aenter__"):
            return manager  # not an async context manager after all: untouched
        return _TracedAsyncContextManager(manager, plan, instance, args, kwargs)

    return _tracing_what_it_makes(plan.admit, traced)


def _emit_item(active: Active, item: Any) -> None:
    try:
        active.plan.role.emit(active, item)
    except Exception:
        FAILURES.failed("health item of", active.plan.role)


def function_kind(function: Any) -> str:
    """``sync``, ``coroutine``, ``generator``, ``async_generator`` or ``async_context_manager``."""
    raw = getattr(function, "__func__", function)  # classmethod / staticmethod objects
    if inspect.isasyncgenfunction(raw):
        return "async_generator"
    if inspect.iscoroutinefunction(raw):
        return "coroutine"
    if inspect.isgeneratorfunction(raw):
        return "generator"
    # contextlib.asynccontextmanager: a plain function wrapping an async generator function
    if inspect.isasyncgenfunction(getattr(raw, "__wrapped__", None)):
        return "async_context_manager"
    return "sync"


WRAPPERS: Mapping[str, Callable[[Plan], Callable[..., Any]]] = {
    "sync": _sync_wrapper,
    "coroutine": _coroutine_wrapper,
    "generator": _generator_wrapper,
    "async_generator": _async_generator_wrapper,
    "async_context_manager": _async_context_manager_wrapper,
}
