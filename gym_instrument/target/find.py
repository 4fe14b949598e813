"""Whether a target can be found in this interpreter, without importing anything to find out."""

from __future__ import annotations

import sys
from typing import Any

from gym_instrument.target.target import Target


def nearest(name: str, candidates: Any) -> str:
    """``"; did you mean 'X'?"`` for the candidate closest to a misspelled ``name``, else ``""``."""
    import difflib  # only a wrong name's message needs it: not imported at every process's start

    try:
        found = difflib.get_close_matches(name, [c for c in candidates if isinstance(c, str) and not c.startswith("__")], 1, 0.7)
    except Exception:
        return ""
    return f"; did you mean {found[0]!r}?" if found else ""


def missing_attribute(owner: Any, name: str, where: str) -> str:
    """Why ``name`` cannot be found on ``owner`` (a module or class), with the nearest right name."""
    try:
        names = list(vars(owner))
    except TypeError:
        names = []
    return f"{where} has no attribute {name!r}{nearest(name, names)}"


def _module_names(locations: list[str] | None) -> list[str]:
    import pkgutil  # as difflib: only for a missing module's message

    try:
        return [module.name for module in pkgutil.iter_modules(locations)]
    except Exception:
        return []


def check_importable(target: Target, suggest: bool = True) -> str | None:
    """Why a target's module cannot be found, or None. Nothing is imported to find out: a
    package's modules are looked up on its path, the way the import system would. ``suggest``: name
    the nearest module when one is missing (it lists the path's modules: only for a message)."""
    import importlib.util

    top, *parts = target.module.split(".")
    try:
        spec = getattr(sys.modules[top], "__spec__", None) if top in sys.modules else importlib.util.find_spec(top)
    except (ImportError, ValueError) as error:
        return f"target {target}: cannot import {top!r}: {error}"
    if spec is None and top not in sys.modules:
        return f"target {target}: no module named {top!r}{nearest(top, [*sys.modules, *_module_names(None)]) if suggest else ''}"
    name = top
    for part in parts:
        parent, name = name, f"{name}.{part}"
        if name in sys.modules:
            spec = getattr(sys.modules[name], "__spec__", None)
            continue
        module = sys.modules.get(parent)
        locations = getattr(module, "__path__", None) if module is not None else getattr(spec, "submodule_search_locations", None)
        if locations is None:
            return None if spec is None else f"target {target}: no module named {name!r} ({parent!r} is not a package)"
        spec = _find_submodule(name, list(locations))
        if spec is None:
            siblings = [f"{parent}.{sibling}" for sibling in _module_names(list(locations))] if suggest else []
            return f"target {target}: no module named {name!r}{nearest(name, siblings)}"
    return None


def _find_submodule(name: str, locations: list[str]) -> Any:
    """The spec the import system's finders give for a submodule on its package's path, or None."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(name, locations)
        except Exception:
            continue
        if spec is not None:
            return spec
    return None


def target_problem(target: Target, suggest: bool = True) -> str | None:
    """Why a target cannot be instrumented here, or None. Nothing is imported to find out: its
    module must be findable, and when that module is already imported it must define the function."""
    return check_importable(target, suggest) or _missing_attribute(target)


SCRIPT_HINT = (
    "a script's own functions (module __main__) are defined after instrumentation starts, so they are "
    "never wrapped: put them in a module beside the script, import it from the script, and name "
    "that module (path = 'my_loop:play')"
)


def _missing_attribute(target: Target) -> str | None:
    """Why a target whose module is already imported cannot be found there, or None."""
    module = sys.modules.get(target.module)
    if module is None:
        return None  # found when its module is imported (post-import hook)
    problem = _missing_in(target, module)
    if problem is not None and target.module == "__main__":
        return f"{problem}; {SCRIPT_HINT}"
    return problem


def resolve_target(target: Target) -> tuple[Any, str | None]:
    """Import a target's module, as the running instrumentation does when the program imports it,
    and find its function: (the function, None), or (None, why not, naming the nearest right name)."""
    import importlib

    if target.module == "__main__":
        return None, f"target {target}: {SCRIPT_HINT}"
    problem = check_importable(target)
    if problem is not None:
        return None, problem
    try:
        module = importlib.import_module(target.module)
    except BaseException as error:  # a module that fails to import, or exits, as it would in the run
        return None, f"target {target}: importing {target.module!r} failed: {type(error).__name__}: {error}"
    problem = _missing_in(target, module)
    if problem is not None:
        return None, problem
    owner: Any = module
    for part in target.qualname.split("."):
        owner = getattr(owner, part)
    return owner, None


def _missing_in(target: Target, module: Any) -> str | None:
    """Why a target cannot be found in its (imported) module, or None."""
    owner: Any = module
    *owner_path, attribute = target.qualname.split(".")
    where = f"module {target.module!r}"
    for index, part in enumerate(owner_path):
        inner = getattr(owner, part, None)
        if inner is None:
            return f"target {target}: {missing_attribute(owner, part, where)}"
        owner, where = inner, repr(f"{target.module}:{'.'.join(owner_path[: index + 1])}")
    try:
        defined_here = attribute in vars(owner)
    except TypeError:
        defined_here = False
    if defined_here:
        return None
    if getattr(owner, attribute, None) is not None:  # patching it would need the class that defines it
        return f"target {target}: {target.qualname!r} is inherited, not defined there; target the class that defines it"
    return f"target {target}: {missing_attribute(owner, attribute, where)}"


CAPTURED_HINT = (
    "calls through it are not traced: a module's own body runs before its functions are wrapped (they are "
    "wrapped when the import ends). Build such a list where the function is imported (from module import "
    "function, in another module), or call the function by its module's name when it is called"
)


def captured_copies(module: Any, function: Any, attribute: str) -> list[str]:
    """Where a module's globals hold ``function`` other than as its own ``attribute``: another name
    for it, or an item of a list, tuple, dict or set held by a global (one level down), such as a
    module-level ``REWARD_FUNCS = [accuracy, fmt]``. Each such copy was taken before the function
    could be wrapped, and calls through it are not traced. Never raises."""
    found: list[str] = []
    try:
        for name, value in list(vars(module).items()):
            if name.startswith("__"):
                continue
            if value is function:
                if name != attribute:
                    found.append(name)
            elif type(value) in (list, tuple):
                found.extend(f"{name}[{index}]" for index, item in enumerate(value[:1024]) if item is function)
            elif type(value) is dict:
                found.extend(f"{name}[{key!r}]" for key, item in list(value.items())[:1024] if item is function)
            elif type(value) in (set, frozenset) and len(value) <= 1024 and any(item is function for item in value):
                found.append(f"{name} (a set)")
    except Exception:  # a module whose globals cannot be read: nothing to say
        return found
    return found[:8]
