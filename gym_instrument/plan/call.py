"""One call of a wrapped function: where its arguments sit (found once per function) and what
extractors see of it."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gym_instrument.schema.fields import MISSING


class ArgLocator:
    """Where a call's row (or request, or a condition's argument) sits, found once from the signature.

    The argument is looked up by name in the keywords, else by position: the position of the
    first candidate name among the parameters, else (no name given) the first positional
    argument after self.
    """

    __slots__ = ("index_bound", "index_unbound", "names")

    def __init__(self, function: Callable[..., Any], names: Sequence[str], explicit: str | None = None) -> None:
        self.names: tuple[str, ...] = (explicit,) if explicit else tuple(names)
        try:
            params = inspect.signature(function, follow_wrapped=False).parameters.values()
            positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            positional = []
        index: int | None = next((positional.index(name) for name in self.names if name in positional), None)
        if index is None:
            # Not named: the first positional argument (wrapt passes args without a bound self/cls).
            self.index_unbound: int | None = None if explicit else 0
            self.index_bound: int | None = None if explicit else 0
        else:
            self.index_unbound = index
            self.index_bound = index - 1 if index >= 1 else None

    def find(self, instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The argument's value for one call, or MISSING."""
        if kwargs:
            for name in self.names:
                if name in kwargs:
                    return kwargs[name]
        index = self.index_unbound if instance is None else self.index_bound
        if index is not None and index < len(args):
            return args[index]
        return MISSING

    def replace(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], value: Any) -> tuple[Any, ...]:
        """The positional arguments of a call whose argument becomes ``value``: where :meth:`find`
        finds it (a keyword is set in ``kwargs``, which the call is made with), else, absent, as the
        keyword of the first candidate name (none: nothing changes)."""
        for name in self.names:
            if name in kwargs:
                kwargs[name] = value
                return args
        index = self.index_unbound if instance is None else self.index_bound
        if index is not None and index < len(args):
            return (*args[:index], value, *args[index + 1 :])
        if self.names:
            kwargs[self.names[0]] = value
        return args


class CallSource(Protocol):
    """What a :class:`Call` reads of the wrapped function it belongs to (its plan)."""

    role_name: str
    target: Any
    function: Callable[..., Any]
    locator: ArgLocator
    argument_locators: dict[str, ArgLocator]
    binds_instance: bool


class Call:
    """One call of a wrapped function, as extractors see it."""

    __slots__ = ("_plan", "_row", "args", "exception", "instance", "kwargs", "result", "verdict")

    def __init__(self, plan: CallSource, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._plan = plan
        self.instance = instance
        self.args = args
        self.kwargs = kwargs
        self.result: Any = MISSING
        self.exception: BaseException | None = None
        self.verdict: Any = MISSING
        self._row: Any = MISSING

    @property
    def role(self) -> str:
        """``dispatch``, ``verify`` or ``health``."""
        return self._plan.role_name

    @property
    def target(self) -> Any:
        """The :class:`~gym_instrument.Target` the wrapped function was instrumented for."""
        return self._plan.target

    @property
    def function(self) -> Callable[..., Any]:
        """The original (unwrapped) function."""
        return self._plan.function

    @property
    def row(self) -> Any:
        """The dispatch row, or the verify/health request: the argument the target points at (None if absent)."""
        row = self._row
        if row is MISSING:
            found = self._plan.locator.find(self.instance, self.args, self.kwargs)
            row = self._row = None if found is MISSING else found
        return row

    def argument(self, name: str) -> Any:
        """One argument by parameter name (by keyword, else by its position), or None when absent."""
        locators = self._plan.argument_locators
        locator = locators.get(name)
        if locator is None:
            locator = locators[name] = ArgLocator(self._plan.function, (), name)
        found = locator.find(self.instance, self.args, self.kwargs)
        return None if found is MISSING else found

    @property
    def arguments(self) -> dict[str, Any]:
        """All arguments by parameter name, ``self`` or ``cls`` included (bound when asked: only
        extractors that ask pay for it)."""
        args = self.args
        if self.instance is not None and self._plan.binds_instance:
            args = (self.instance, *args)  # wrapt passes a method's self (a classmethod's cls) apart
        try:
            bound = inspect.signature(self._plan.function).bind_partial(*args, **self.kwargs)
        except (TypeError, ValueError):
            return dict(self.kwargs)
        return dict(bound.arguments)
