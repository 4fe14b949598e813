"""Roles as decorators on code a user owns: ``@gym_instrument.dispatch``, ``@gym_instrument.verify``,
``@gym_instrument.health`` — one per role of the table that has one, made when asked for."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

from gym_instrument.plan.engine import ENGINE
from gym_instrument.role import ROLES
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.extractors import Extractor
from gym_instrument.target.patcher import GymWrapper, is_gym_wrapper, make_wrapper
from gym_instrument.target.target import PATH, Target

F = TypeVar("F", bound=Callable[..., Any])


class _RoleExtractors:
    """The extractors ``instrument()`` gives each role, and whether they replace its defaults: a
    decorated function takes them like a target does, whether it was decorated before or after."""

    def __init__(self) -> None:
        self.extractors: Mapping[str, Iterable[Extractor]] = {}
        self.replace: frozenset[str] = frozenset()
        # every decorated function alive, with its target
        self.wrappers: weakref.WeakKeyDictionary[GymWrapper, Target] = weakref.WeakKeyDictionary()
        self.lock = threading.Lock()

    def of(self, target: Target) -> tuple[tuple[Extractor, ...], bool]:
        """A decorated target's role extractors, and whether its role's defaults are replaced."""
        return tuple(self.extractors.get(target.role, ())), target.role in self.replace


_ROLE_EXTRACTORS = _RoleExtractors()


def use_role_extractors(extractors: Mapping[str, Iterable[Extractor]], replace_defaults: Iterable[str]) -> None:
    """Give every decorated function, now and from now on, the role extractors of an ``instrument()``
    (``{}`` and ``()`` when it is undone): theirs run before the decorator's own."""
    with _ROLE_EXTRACTORS.lock:
        _ROLE_EXTRACTORS.extractors = {role: tuple(found) for role, found in extractors.items()}
        _ROLE_EXTRACTORS.replace = frozenset(replace_defaults)
        wrappers = list(_ROLE_EXTRACTORS.wrappers.items())
    for wrapper, target in wrappers:
        role_extractors, replaced = _ROLE_EXTRACTORS.of(target)
        wrapper._self_gym_plan.use_extractors(
            (*role_extractors, *target.extractors), defaults=target.default_extractors and not replaced
        )


class RoleDecorator:
    """A role as a decorator on code you own: ``@gym_instrument.dispatch`` or
    ``@gym_instrument.dispatch(row_arg="episode", extractors=[...], default_extractors=True, when={...})``."""

    def __init__(self, role: str, default_schema: RolloutSchema) -> None:
        self.role = role
        self.default_schema = default_schema
        self.__doc__ = f"Trace a function as the {role!r} role (see :class:`~gym_instrument.Target` for the options)."

    @overload
    def __call__(self, function: F, /) -> F: ...

    @overload
    def __call__(
        self,
        function: None = None,
        /,
        *,
        row_arg: str | None = None,
        when: Mapping[str, Any] | None = None,
        extractors: Sequence[Extractor] = (),
        default_extractors: bool = True,
        schema: RolloutSchema | None = None,
    ) -> Callable[[F], F]: ...

    def __call__(
        self,
        function: F | None = None,
        /,
        *,
        row_arg: str | None = None,
        when: Mapping[str, Any] | None = None,
        extractors: Sequence[Extractor] = (),
        default_extractors: bool = True,
        schema: RolloutSchema | None = None,
    ) -> F | Callable[[F], F]:
        role = self.role

        def apply(to_wrap: F) -> F:
            if is_gym_wrapper(to_wrap):
                return to_wrap
            raw = getattr(to_wrap, "__func__", to_wrap)
            module = getattr(raw, "__module__", None) or "__main__"
            qualname = getattr(raw, "__qualname__", "function").replace("<locals>.", "").replace("<", "").replace(">", "")
            path = f"{module}:{qualname}"
            if not PATH.match(path):
                path = "__main__:function"
            target = Target(
                path,
                role,
                when=when,
                row_arg=row_arg,
                extractors=tuple(extractors),
                default_extractors=default_extractors,
                schema=schema,
            )
            if ROLES[role].uses_links:
                ENGINE.expect_verdicts()  # dispatches are remembered from now on
            with _ROLE_EXTRACTORS.lock:
                role_extractors, replaced = _ROLE_EXTRACTORS.of(target)
                wrapper = make_wrapper(to_wrap, target, self.default_schema, role_extractors, replaced)
                _ROLE_EXTRACTORS.wrappers[wrapper] = target
            return wrapper  # type: ignore[return-value]

        return apply if function is None else apply(function)

    def __repr__(self) -> str:
        return f"gym_instrument.{self.role}"


def decorator(name: str, default_schema: RolloutSchema) -> RoleDecorator | None:
    """The decorator of the role ``name`` in :data:`~gym_instrument.role.ROLES`, or None (no such role,
    or a role without one)."""
    role = ROLES.get(name)
    if role is None or not role.decorated:
        return None
    return RoleDecorator(name, default_schema)


def decorated_roles() -> list[str]:
    """The names of the roles that have a decorator, now."""
    return [name for name, role in ROLES.items() if role.decorated]
