"""Where: functions wrapped as their modules appear, and put back exactly.

The :class:`Patcher` wraps a target's function with wrapt when its module is imported — now, if it
already is, or later through a post-import hook — and, for a method, also the function every
subclass resolves it to, existing or defined later (``__init_subclass__`` on the base class): an
override, or a mixin's method that comes before the base in the subclass's MRO. ``restore()``
puts back every original object it replaced (classmethod and staticmethod objects included)
and disarms pending hooks; the wrapt hook registry only grows by one entry per module ever.
Wrapping a function makes its :class:`~gym_instrument.plan.plan.Plan` (:func:`make_wrapper`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import wrapt

from gym_instrument.plan.call import ArgLocator
from gym_instrument.plan.plan import Plan
from gym_instrument.plan.wrappers import WRAPPERS, function_kind
from gym_instrument.role import ROLES
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.extractors import Extractor
from gym_instrument.target.find import CAPTURED_HINT, captured_copies, missing_attribute
from gym_instrument.target.target import Target

_LOG = logging.getLogger("gym_instrument")


class GymWrapper(wrapt.FunctionWrapper):  # type: ignore[type-arg]
    """The wrapt wrapper this package installs; recognisable, so nothing is wrapped twice."""

    # wrapt looks this up on a subclass each time a wrapped method is bound to an instance; without
    # it the lookup raises and clears an AttributeError, about 0.3 us on every method call.
    __bound_function_wrapper__ = wrapt.BoundFunctionWrapper

    _self_gym_plan: Plan  # the plan its calls run (wrapt keeps _self_ attributes on the wrapper itself)


def is_gym_wrapper(value: Any) -> bool:
    return isinstance(value, GymWrapper)


def make_plan(
    original: Any,
    target: Target,
    default_schema: RolloutSchema,
    extra_extractors: Iterable[Extractor] = (),
    replace_defaults: bool = False,
) -> Plan:
    """The plan of one function object (or classmethod/staticmethod object) for a target: everything
    its calls need that is known now. ``default_schema``: the schema of a target that names none."""
    role = ROLES[target.role]
    function = getattr(original, "__func__", original)
    conditions = [(ArgLocator(function, (), name), value) for name, value in (target.when or {}).items()]
    schema = target.schema if target.schema is not None else default_schema
    return Plan(
        role,
        function,
        target,
        ArgLocator(function, role.row_names, target.row_arg or (role.row_names[0] if role.row_by_name else None)),
        conditions,
        schema,
        (*extra_extractors, *target.extractors),
        defaults=target.default_extractors and not replace_defaults,
        binds_instance=not isinstance(original, staticmethod),
    )


def make_wrapper(
    original: Any,
    target: Target,
    default_schema: RolloutSchema,
    extra_extractors: Iterable[Extractor] = (),
    replace_defaults: bool = False,
) -> GymWrapper:
    """Wrap one function object (or classmethod/staticmethod object) for a target's role."""
    plan = make_plan(original, target, default_schema, extra_extractors, replace_defaults)
    wrapper = GymWrapper(original, WRAPPERS[function_kind(original)](plan))
    wrapper._self_gym_plan = plan
    return wrapper


# One wrapt post-import hook per module name, for the life of the process: wrapt cannot remove a
# hook, so ours dispatches to whichever patchers are armed now, and arming again adds nothing.
_HOOK_LOCK = threading.RLock()
_PENDING_HOOKS: set[str] = set()
_PATCHERS_BY_MODULE: dict[str, list[Patcher]] = {}


def _on_import(module: ModuleType) -> None:
    name = module.__name__
    with _HOOK_LOCK:
        _PENDING_HOOKS.discard(name)
        patchers = list(_PATCHERS_BY_MODULE.get(name, ()))
    for patcher in patchers:
        patcher.patch_module(module)  # never raises: an exception here would fail the user's import


@dataclass
class _Patch:
    owner: Any
    attribute: str
    original: Any
    wrapper: GymWrapper
    target: Target


class Patcher:
    """Arms targets, wraps them as their modules appear, and restores every original."""

    def __init__(
        self,
        default_schema: RolloutSchema,
        extractors: Mapping[str, Iterable[Extractor]] | None = None,
        replace_defaults: Iterable[str] = (),
    ) -> None:
        self._default_schema = default_schema
        self._extractors = {role: tuple(extractors.get(role, ())) for role in ROLES} if extractors else {}
        self._replace_defaults = frozenset(replace_defaults)
        self._targets: dict[str, list[Target]] = {}
        self._patches: list[_Patch] = []
        self._subclass_hooks: list[tuple[type, Any]] = []  # (base class, previous __dict__ value or None)
        self._watched: dict[type, list[Target]] = {}
        self._reported: set[Target] = set()  # targets whose unwrapped copies were logged
        self._lock = threading.RLock()
        self.armed = False

    # -- arming --------------------------------------------------------------------------------

    def arm(self, targets: Iterable[Target]) -> None:
        self.armed = True
        for target in targets:
            self._targets.setdefault(target.module, []).append(target)
        for module_name in self._targets:
            with _HOOK_LOCK:
                patchers = _PATCHERS_BY_MODULE.setdefault(module_name, [])
                if self not in patchers:
                    patchers.append(self)
                already = sys.modules.get(module_name)
                register = already is None and module_name not in _PENDING_HOOKS
                if register:
                    _PENDING_HOOKS.add(module_name)
            if already is not None:
                self.patch_module(already)
            elif register:
                wrapt.register_post_import_hook(_on_import, module_name)

    def patch_module(self, module: ModuleType) -> None:
        if not self.armed:
            return
        for target in self._targets.get(module.__name__, ()):
            try:
                self._patch_target(module, target)
            except Exception as error:
                level = logging.DEBUG if target.optional else logging.WARNING
                _LOG.log(level, "gym_instrument: target %s not instrumented: %s", target.label, error)

    def _patch_target(self, module: ModuleType, target: Target) -> None:
        owner: Any = module
        where = f"module {module.__name__!r}"
        *owner_path, attribute = target.qualname.split(".")
        for index, part in enumerate(owner_path):
            # Looked up in the namespace, not with getattr: a module's own message for a missing
            # name while it is still being imported blames a circular import.
            inner = vars(owner).get(part) if isinstance(owner, ModuleType) else getattr(owner, part, None)
            if inner is None:
                raise AttributeError(missing_attribute(owner, part, where))
            owner, where = inner, repr(f"{module.__name__}:{'.'.join(owner_path[: index + 1])}")
        if attribute not in vars(owner):
            raise AttributeError(missing_attribute(owner, attribute, where))
        with self._lock:
            self._wrap(owner, attribute, target)
            if isinstance(owner, type):
                self._reach_subclasses(owner, attribute, target)

    def _wrap(self, owner: Any, attribute: str, target: Target) -> None:
        original = vars(owner)[attribute]
        if is_gym_wrapper(original):
            return  # already ours (instrumented twice, or a decorated function): one span per call
        if not callable(getattr(original, "__func__", original)):
            raise TypeError(f"{target.path} is not a function")
        wrapper = make_wrapper(
            original,
            target,
            self._default_schema,
            self._extractors.get(target.role, ()),
            replace_defaults=target.role in self._replace_defaults,
        )
        setattr(owner, attribute, wrapper)
        self._patches.append(_Patch(owner, attribute, original, wrapper, target))
        if isinstance(owner, ModuleType):
            self._report_captured(owner, attribute, original, target)

    def _report_captured(self, module: ModuleType, attribute: str, original: Any, target: Target) -> None:
        """Log, once per target, where the module (or the script, when the module was imported
        before ``instrument()``) holds the function as it was before it was wrapped."""
        if target in self._reported:
            return
        holders = [(module.__name__, captured_copies(module, original, attribute))]
        main = sys.modules.get("__main__")
        if main is not None and main is not module:
            holders.append(("__main__", captured_copies(main, original, "")))
        where = [f"module {name!r} holds it in {', '.join(copies)}" for name, copies in holders if copies]
        if where:
            self._reported.add(target)
            _LOG.warning(
                "gym_instrument: target %s: %s, taken before it was wrapped; %s", target.label, "; ".join(where), CAPTURED_HINT
            )

    def _reach_subclasses(self, base: type, attribute: str, target: Target) -> None:
        """Wrap overrides in existing subclasses, and arrange for future ones to be wrapped too."""
        pending: list[type] = list(type.__subclasses__(base)) if base is not type else []
        seen: set[int] = set()
        while pending:
            subclass = pending.pop()
            if id(subclass) in seen:
                continue
            seen.add(id(subclass))
            try:
                self._wrap_resolved(base, subclass, attribute, target)
            except Exception as error:  # one odd subclass (a property, a non-callable) leaves the others wrapped
                _LOG.warning("gym_instrument: override %s.%s not instrumented: %s", subclass.__qualname__, attribute, error)
            pending.extend(type.__subclasses__(subclass))
        if base not in self._watched:
            self._watch_subclasses(base)
        watched = self._watched.setdefault(base, [])
        if target not in watched:
            watched.append(target)

    def _wrap_resolved(self, base: type, subclass: type, attribute: str, target: Target) -> None:
        """Wrap the function a subclass's attribute resolves to, in the class of its MRO that defines
        it: the subclass (an override), a base between it and ``base``, or a mixin that is no subclass
        of ``base`` at all (NeMo Gym 0.7.0's ``SimpleWeatherResourcesServer`` takes ``verify`` from
        ``SimpleWeatherVerifier``). Wrapped once where it is defined, so a mixin reachable through two
        subclasses is one wrapper, and one span per call."""
        for owner in subclass.__mro__:
            if owner is base:
                return  # resolves to the base's own function, wrapped with the base
            if attribute in vars(owner):
                self._wrap(owner, attribute, target)
                return

    def _watch_subclasses(self, base: type) -> None:
        patcher = self
        previous = vars(base).get("__init_subclass__")

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            if previous is not None:
                previous.__get__(None, cls)(**kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
            patcher._on_subclass(base, cls)

        base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[method-assign,assignment,arg-type]
        self._subclass_hooks.append((base, previous))

    def _on_subclass(self, base: type, subclass: type) -> None:
        if not self.armed:
            return
        for target in self._watched.get(base, ()):
            attribute = target.qualname.rsplit(".", 1)[-1]
            try:
                with self._lock:
                    self._wrap_resolved(base, subclass, attribute, target)
            except Exception as error:
                _LOG.warning("gym_instrument: override %s.%s not instrumented: %s", subclass.__qualname__, attribute, error)

    def update(
        self, targets: Iterable[Target], extractors: Mapping[str, Iterable[Extractor]], replace_defaults: Iterable[str]
    ) -> None:
        """Arm ``targets`` with ``extractors`` in place of what is armed, without unwrapping what stays.

        A target armed already keeps its wrappers (a reference someone took to one keeps working)
        and its plan takes the new extractors; a new target is armed; a target no longer wanted is
        put back and disarmed.
        """
        wanted = list(dict.fromkeys(targets))
        with self._lock:
            self._extractors = {role: tuple(extractors.get(role, ())) for role in ROLES}
            self._replace_defaults = frozenset(replace_defaults)
            armed = [target for module_targets in self._targets.values() for target in module_targets]
            gone = {target for target in armed if target not in wanted}
            for patch in [patch for patch in self._patches if patch.target in gone]:
                self._put_back(patch)
                self._patches.remove(patch)
            for watched in self._watched.values():
                watched[:] = [target for target in watched if target not in gone]
            for patch in self._patches:
                target = patch.target
                patch.wrapper._self_gym_plan.use_extractors(
                    (*self._extractors.get(target.role, ()), *target.extractors),
                    defaults=target.default_extractors and target.role not in self._replace_defaults,
                )
            self._targets = {}
            for target in wanted:
                self._targets.setdefault(target.module, []).append(target)
        self._forget_modules_without_targets()
        self.arm(())

    def _forget_modules_without_targets(self) -> None:
        with _HOOK_LOCK:
            for module_name, patchers in list(_PATCHERS_BY_MODULE.items()):
                if self in patchers and module_name not in self._targets:
                    patchers.remove(self)
                    if not patchers:
                        del _PATCHERS_BY_MODULE[module_name]

    @staticmethod
    def _put_back(patch: _Patch) -> None:
        # Disarmed whether or not it can be put back: a reference taken before (``from mod
        # import f``, or someone who wrapped over it) passes calls through from now on.
        patch.wrapper._self_gym_plan.armed = False
        if vars(patch.owner).get(patch.attribute) is patch.wrapper:
            setattr(patch.owner, patch.attribute, patch.original)

    # -- restoring -----------------------------------------------------------------------------

    def restore(self) -> None:
        """Put back every original object and disarm hooks; wrappers someone wrapped over are disarmed."""
        with self._lock:
            self.armed = False
            with _HOOK_LOCK:
                for module_name in self._targets:
                    patchers = _PATCHERS_BY_MODULE.get(module_name, [])
                    if self in patchers:
                        patchers.remove(self)
                    if not patchers:
                        _PATCHERS_BY_MODULE.pop(module_name, None)
            for patch in reversed(self._patches):
                self._put_back(patch)
            for base, previous in reversed(self._subclass_hooks):
                if previous is None:
                    if "__init_subclass__" in vars(base):
                        delattr(base, "__init_subclass__")
                else:
                    base.__init_subclass__ = previous
            self._patches.clear()
            self._subclass_hooks.clear()
            self._watched.clear()
            self._targets.clear()
