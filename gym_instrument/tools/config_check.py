"""``gym-instrument config check FILE``: what a configuration in the declarative form will do, before
a run. Each target: whether this interpreter can find it (its module is imported, as the run
imports it, and the function looked up, naming the nearest right name) and what each of its rules
will read; every problem with the message the running instrumentation would log, and what would
silently do nothing: a ``row`` or ``arg.NAME`` the function does not have, rules its role ignores,
a template naming a value no rule reads, a dispatch no health verdict could name."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_instrument import semconv
from gym_instrument.config.declare import target_entries, target_from_mapping
from gym_instrument.role import ROLES
from gym_instrument.schema.declared import (
    PRESENT,
    TEMPLATE_NAMES,
    AtStart,
    AttributeRules,
    Constant,
    DeclaredVerdictSchema,
    FailureRule,
    ValueRule,
)
from gym_instrument.schema.fields import MISSING
from gym_instrument.schema.paths import FieldPath
from gym_instrument.target.find import resolve_target
from gym_instrument.target.target import Target


@dataclass
class ConfigCheck:
    """What :func:`check_config` found: lines to print and the problems among them."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str) -> None:
        self.problems.append(message)
        self.lines.append(f"  problem: {message}")


def describe_rule(rule: ValueRule) -> str:
    """A rule as one line: its paths (or template), its map and its offset."""
    text = " or ".join(path.text for path in rule.paths) if rule.template is None else f"template {rule.template.text!r}"
    if rule.value_map is not None:
        mapped = ", ".join(f"{key!r}: {value!r}" for key, value in list(rule.value_map.items())[:6])
        more = ", …" if len(rule.value_map) > 6 else ""
        text += f", mapped by {{{mapped}{more}}}"
        if rule.default is not MISSING:
            text += f" (else {rule.default!r})"
    if rule.offset:
        text += f", {rule.offset:+d}"
    return text


def _describe(extractor: Any) -> list[str]:
    if isinstance(extractor, AttributeRules):
        table = "start" if extractor.at_start else "end"
        return [f"{table} {name}: {describe_rule(rule)}" for name, rule in extractor.rules]
    if isinstance(extractor, FailureRule):
        when = (
            f"{extractor.when.text} is present (not None)"
            if extractor.equals is PRESENT
            else f"{extractor.when.text} == {extractor.equals!r}"
        )
        kind = " or ".join(path.text for path in extractor.error_type) or "none"
        return [f"failure: when {when}; error.type from {kind} (else _OTHER)"]
    if isinstance(extractor, Constant):
        return [f"{name} = {value!r} on every span" for name, value in extractor.attributes]
    if isinstance(extractor, AtStart):
        return [f"start extractor {import_path(extractor.extractor)}"]
    return [f"extractor {import_path(extractor)}"]


def import_path(function: Callable[..., Any]) -> str:
    """A callable as a configuration names it: ``package.module:Qualified.name``."""
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}:{qualname}"
    return type(function).__qualname__


def _paths_of(target: Target) -> list[FieldPath]:
    """Every path of a target's declared rules, template placeholders included."""
    paths: list[FieldPath] = []
    for extractor in target.extractors:
        if isinstance(extractor, AttributeRules):
            for _, rule in extractor.rules:
                paths.extend(rule.paths)
                if rule.template is not None:
                    paths.extend(part for part in rule.template.parts[1::2] if isinstance(part, FieldPath))
        elif isinstance(extractor, FailureRule):
            paths.extend((extractor.when, *extractor.error_type))
    return paths


def _signature_problems(target: Target, function: Any) -> list[str]:
    """A ``row`` or ``arg.NAME`` the function does not have (a path through it is always absent)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    names = [name for name in parameters if name not in ("self", "cls")]
    problems = []
    wanted = [("row", target.row_arg)] if target.row_arg else []
    wanted += [(f"path {path.text!r}", path.argument) for path in _paths_of(target) if path.root == "arg"]
    for what, name in wanted:
        if name not in parameters:
            problems.append(
                f"target {target.path}: {what}: {target.qualname}() has no argument {name!r}"
                f" (it has {', '.join(names) or 'none'}); it would always be absent"
            )
    return problems


def _role_problems(target: Target) -> list[str]:
    """Rules the target's role ignores, and templates naming a value no rule of their table reads."""
    problems = []
    role = ROLES[target.role]
    for extractor in target.extractors:
        if isinstance(extractor, (AttributeRules, FailureRule)) and role.span_name is None:
            kind = "failure" if isinstance(extractor, FailureRule) else ("start" if extractor.at_start else "end")
            instead = "; say what its result is with verdicts" if target.role == semconv.ROLE_HEALTH else ""
            problems.append(
                f"target {target.path}: {kind}: the {target.role} role makes no span of its own,"
                f" so these rules do nothing{instead}"
            )
        if isinstance(extractor, AttributeRules):
            read = {name for name, _ in extractor.rules}
            for name, rule in extractor.rules:
                for part in rule.template.parts[1::2] if rule.template is not None else ():
                    if isinstance(part, str) and part not in read:
                        short = next(key for key, value in TEMPLATE_NAMES.items() if value == part)
                        problems.append(
                            f"target {target.path}: {name}: template {rule.template.text!r} names {{{short}}},"  # type: ignore[union-attr]
                            f" which no rule of this table reads ({part})"
                        )
    return problems


def _short_names(rule: ValueRule) -> set[str]:
    """The attributes a template's short placeholders name."""
    return {part for part in rule.template.parts[1::2] if isinstance(part, str)} if rule.template is not None else set()


def _names_a_rollout(target: Target) -> bool:
    """Whether a dispatch target's start rules name its rollout (a rollout id, or task index and repeat)."""
    read: set[str] = set()
    for extractor in target.extractors:
        if isinstance(extractor, AttributeRules) and extractor.at_start:
            names = {name for name, _ in extractor.rules}
            # (a template naming a value no rule reads never has a value)
            read.update(name for name, rule in extractor.rules if rule.template is None or names >= _short_names(rule))
        elif not isinstance(extractor, (AttributeRules, FailureRule, Constant)):
            return True  # an extractor of code may name it
    return semconv.ROLLOUT_ID in read or {semconv.TASK_INDEX, semconv.ROLLOUT_REPEAT} <= read


def check_config(source: Any) -> ConfigCheck:
    """Check a configuration (a file path, TOML/JSON text or a mapping); never raises ValueError."""
    found = ConfigCheck()
    try:
        entries = target_entries(source)
    except ValueError as error:
        found.problem(str(error))
        return found
    if not entries:
        found.problem("no targets: the configuration has no [[targets]] entries")
    targets: list[Target] = []
    for entry in entries:
        skipped: list[str] = []
        try:
            target = target_from_mapping(entry, skip=skipped.append)
        except (ValueError, RecursionError) as error:
            path = entry.get("path") if isinstance(entry, Mapping) else None
            found.lines.append(f"target {path!r}: skipped" if isinstance(path, str) else "a target: skipped")
            found.problem(str(error) if isinstance(error, ValueError) else "nested too deep")
            continue
        targets.append(target)
        function, where = resolve_target(target)
        found.lines.append(
            f"target {target.path} ({target.role}"
            + (f", framework {target.framework}" if target.framework else "")
            + "): "
            + ("cannot be found" if where else "found")
        )
        if where:
            found.problem(where)
        for message in skipped:
            found.problem(message)
        for message in (*(_signature_problems(target, function) if function is not None else ()), *_role_problems(target)):
            found.problem(message)
        if target.row_arg:
            found.lines.append(f"  row: the argument {target.row_arg!r}")
        if target.when:
            found.lines.append(f"  traced when: {', '.join(f'{name} = {value!r}' for name, value in target.when.items())}")
        for extractor in target.extractors:
            found.lines.extend(f"  {line}" for line in _describe(extractor))
        if isinstance(target.schema, DeclaredVerdictSchema):
            rules = target.schema.rules
            found.lines.append(f"  verdicts: records at {rules.items.text if rules.items else 'result'}")
            found.lines.extend(f"  verdicts {name}: {describe_rule(rule)}" for name, rule in rules.names)
            found.lines.append(f"  verdicts verdict: {describe_rule(rules.verdict)}")
            if rules.checks is not None:
                check_field = f", field {rules.check_field!r}" if rules.check_field else ""
                found.lines.append(f"  verdicts checks: {describe_rule(rules.checks)}{check_field}")
    if any(target.role == semconv.ROLE_HEALTH for target in targets):
        for target in targets:
            generic = target.schema is None or target.schema.name == "generic"  # (none: the generic default)
            if target.role == semconv.ROLE_DISPATCH and generic and not _names_a_rollout(target):
                found.problem(
                    f"target {target.path}: no start rule names its rollout (nemo.gym.rollout.id, or"
                    " nemo.gym.task.index and nemo.gym.rollout.repeat), unless its row has the generic fields:"
                    " a health verdict may find no dispatch"
                )
    return found
