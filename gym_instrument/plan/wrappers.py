"""One wrapper per kind of function: sync, coroutine, generator, async generator and async context
manager. Each admits the call (:meth:`Plan.admit`), starts it (:meth:`Plan.start`), attaches its
context, and ends it in exactly one idempotent place (:meth:`Active.finish`); nothing else.

Generators: the span covers the iteration, from the first step to exhaustion, an exception or
``close()`` (an abandoned generator is closed by the garbage collector). Its context is current
only while the generator body runs, never in the consumer between items, so the consumer's
own spans are not parented to it. An async context manager's span covers the body of the
``async with``, which runs with the span current.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import wrapt
from opentelemetry.context import Context

from gym_instrument.compat import attach, current_context
from gym_instrument.plan.plan import Active, Plan
from gym_instrument.record.failures import FAILURES
from gym_instrument.schema.fields import MISSING


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
            result = wrapped(*active.args, **kwargs)
        except BaseException as exception:
            active.finish(MISSING, exception)
            raise
        active.finish(result)
        return result

    return wrapper


def _coroutine_wrapper(plan: Plan) -> Callable[..., Any]:
    admit, start = plan.admit, plan.start
    prepared = plan.prepare is not None

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
        current = admit(instance, args, kwargs)
        if current is None:
            return wrapped(*args, **kwargs)  # not traced: the original coroutine object itself
        if prepared:
            # A role without a span that prepares its call (its arguments, or its context: an ASGI
            # application's) does so when the call is made, and the coroutine is made then, as
            # unwrapped: arguments that do not fit raise at the call (uvicorn calls an application
            # with none to tell a factory from it).
            active = start(current, instance, args, kwargs)
            if active is None:
                return wrapped(*args, **kwargs)
            return _run(active, wrapped(*active.args, **kwargs))
        return traced(wrapped, instance, args, kwargs)

    return wrapper


async def _run(active: Active, coroutine: Any) -> Any:
    """Await ``coroutine`` in the call's context; the call ends with what it returned or raised."""
    active.token = attach(active.ctx)
    try:
        result = await coroutine
    except BaseException as exception:
        active.finish(MISSING, exception)
        raise
    active.finish(result)
    return result


def _tracing_what_it_makes(admit: Callable[..., Context | None], traced: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper of a function that makes a generator or a context manager: the call is admitted
    when it is made, and what it made is traced from its first step (or its entering) on."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        admitted = admit(instance, args, kwargs)
        made = wrapped(*args, **kwargs)
        return made if admitted is None else traced(made, instance, args, kwargs)

    return wrapper


def _generator_wrapper(plan: Plan) -> Callable[..., Any]:
    start, emits = plan.start, plan.emit is not None

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
    start, emits = plan.start, plan.emit is not None

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
    plan = active.plan
    try:
        plan.emit(plan, active, item)  # type: ignore[misc]  # (called only for a plan whose role emits)
    except Exception:
        FAILURES.failed(f"the child spans of the {plan.role_name} role", plan.where)


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
