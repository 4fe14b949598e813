"""``gym-instrument config check [FILE] [--targets TARGETS]``: what a configuration will do, before
a run. It reads the declarative form (a file or its text, as ``OTEL_PYTHON_GYM_CONFIG``) and the
short form (``module:Qualified.name=role[@schema]``, comma-separated, as ``OTEL_PYTHON_GYM_TARGETS``);
given neither, those two variables of its environment. Each target: whether this interpreter can
find it (its module is imported, as the run imports it, and the function looked up, naming the
nearest right name) and what each of its rules will read; every problem with the message the
running instrumentation would log, and what would silently do nothing: a ``row`` or ``arg.NAME``
the function does not have, rules its role ignores, a template naming a value no rule reads.
Notes say what depends on the rows a run will pass, which no check can see."""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_instrument import semconv
from gym_instrument.config.declare import target_entries, target_from_mapping, target_from_short
from gym_instrument.config.settings import ENV_CONFIG, ENV_TARGETS
from gym_instrument.role import ROLES
from gym_instrument.schema.declared import (
    PRESENT,
    TEMPLATE_NAMES,
    AtStart,
    AttributeRules,
    Constant,
    DeclaredBatchSchema,
    DeclaredVerdictSchema,
    FailureRule,
    ValueRule,
)
from gym_instrument.schema.fields import MISSING
from gym_instrument.schema.paths import FieldPath
from gym_instrument.target.find import CAPTURED_HINT, captured_copies, resolve_target
from gym_instrument.target.target import Target


@dataclass
class ConfigCheck:
    """What :func:`check_config` found: lines to print and the problems among them."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str) -> None:
        self.problems.append(message)
        self.lines.append(f"  problem: {message}")

    def note(self, message: str) -> None:
        """What depends on what a run passes (not a problem: the exit code stays 0)."""
        self.lines.append(f"  note: {message}")


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
    """Every path of a target's declared rules (its batch's included), template placeholders included."""
    rules: list[ValueRule] = []
    paths: list[FieldPath] = []
    for extractor in target.extractors:
        if isinstance(extractor, AttributeRules):
            rules.extend(rule for _, rule in extractor.rules)
        elif isinstance(extractor, FailureRule):
            paths.extend((extractor.when, *extractor.error_type))
    if isinstance(target.schema, DeclaredBatchSchema):
        rules.extend(rule for _, rule in (*target.schema.rules.names, *target.schema.rules.outcome))
    for rule in rules:
        paths.extend(rule.paths)
        if rule.template is not None:
            paths.extend(part for part in rule.template.parts[1::2] if isinstance(part, FieldPath))
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
    """Whether a dispatch target's start rules name its rollout (a rollout id, or a task index or id and a repeat)."""
    read: set[str] = set()
    for extractor in target.extractors:
        if isinstance(extractor, AttributeRules) and extractor.at_start:
            names = {name for name, _ in extractor.rules}
            # (a template naming a value no rule reads never has a value)
            read.update(name for name, rule in extractor.rules if rule.template is None or names >= _short_names(rule))
        elif not isinstance(extractor, (AttributeRules, FailureRule, Constant)):
            return True  # an extractor of code may name it
    return semconv.ROLLOUT_ID in read or bool(semconv.ROLLOUT_REPEAT in read and read & {semconv.TASK_INDEX, semconv.TASK_ID})


# One entry of the short form, as OTEL_PYTHON_GYM_TARGETS holds it (a file path never looks like this).
_SHORT_FORM = re.compile(r"^\s*[\w.]+:[\w.]+\s*=\s*\w+(@[\w.:]+)?\s*(,|$)")


def check_config(source: Any = None, targets: str | None = None) -> ConfigCheck:
    """Check a configuration: ``source`` in the declarative form (a file path, TOML/JSON text or a
    mapping) and/or ``targets`` in the short form (comma-separated, as ``OTEL_PYTHON_GYM_TARGETS``);
    with neither, the ``OTEL_PYTHON_GYM_CONFIG`` and ``OTEL_PYTHON_GYM_TARGETS`` of the environment.
    Never raises ValueError."""
    found = ConfigCheck()
    if source is None and targets is None:
        source, targets = os.environ.get(ENV_CONFIG) or None, os.environ.get(ENV_TARGETS) or None
        named = [name for name, value in ((ENV_CONFIG, source), (ENV_TARGETS, targets)) if value]
        if not named:
            found.problem(f"nothing to check: give a FILE or --targets, or set {ENV_CONFIG} or {ENV_TARGETS}")
            return found
        found.lines.append(f"from the environment: {' and '.join(named)}")
    read: list[_Entry] = []
    if source is not None:
        read.extend(_declared_targets(source, found))
    if targets is not None:
        read.extend(_short_targets(targets))
    judged = any(entry.target is not None and entry.target.role == semconv.ROLE_HEALTH for entry in read)
    for entry in read:
        if entry.target is None:  # (it could not be read: its problems name it)
            found.lines.append(f"target {entry.label!r}: skipped" if entry.label else "a target: skipped")
            for message in entry.problems:
                found.problem(message)
        else:
            _check_target(entry.target, entry.problems, found, judged)
    return found


@dataclass
class _Entry:
    """One target as read, in the order given: the target (None: it could not be read), and its
    problems (the rules dropped from it, or why it could not be read)."""

    target: Target | None
    problems: list[str]
    label: str | None = None  # what names one that could not be read


def _declared_targets(source: Any, found: ConfigCheck) -> list[_Entry]:
    """The targets of a configuration in the declarative form (a problem with the whole of it is
    ``found``'s)."""
    try:
        entries = target_entries(source)
    except ValueError as error:
        message = str(error)
        if isinstance(source, str) and message.startswith("cannot read") and _SHORT_FORM.match(source):
            message += f"; targets in the {ENV_TARGETS} form are given with --targets"
        found.problem(message)
        return []
    if not entries:
        found.problem("no targets: the configuration has no [[targets]] entries")
    read: list[_Entry] = []
    for entry in entries:
        skipped: list[str] = []
        try:
            read.append(_Entry(target_from_mapping(entry, skip=skipped.append), skipped))
        except (ValueError, RecursionError) as error:
            path = entry.get("path") if isinstance(entry, Mapping) else None
            problem = str(error) if isinstance(error, ValueError) else "nested too deep"
            read.append(_Entry(None, [problem], path if isinstance(path, str) else None))
    return read


def _short_targets(text: str) -> list[_Entry]:
    """The targets of the short form, comma-separated (``module:Qualified.name=role[@schema]``)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        problem = f"no targets: expected {ENV_TARGETS}'s form, module:Qualified.name=role[@schema], comma-separated"
        return [_Entry(None, [problem], text)]
    read: list[_Entry] = []
    for item in items:
        try:
            read.append(_Entry(target_from_short(item), []))
        except ValueError as error:
            read.append(_Entry(None, [str(error)], item))
    return read


def _check_target(target: Target, skipped: list[str], found: ConfigCheck, judged: bool) -> None:
    """One target's lines: found or not, its problems, and what each of its rules reads (``judged``:
    a health target of the same configuration looks for its dispatches)."""
    function, where = resolve_target(target)
    found.lines.append(
        f"target {target.path} ({target.role}"
        + (f", framework {target.framework}" if target.framework else "")
        + (f", schema {target.schema.name}" if target.schema is not None and target.schema.name != "generic" else "")
        + "): "
        + ("cannot be found" if where else "found")
    )
    if where:
        found.problem(where)
    for message in skipped:
        found.problem(message)
    for message in (*(_signature_problems(target, function) if function is not None else ()), *_role_problems(target)):
        found.problem(message)
    if function is not None and "." not in target.qualname:  # (a module's function: its module may hold copies)
        copies = captured_copies(sys.modules.get(target.module), getattr(function, "__func__", function), target.qualname)
        if copies:
            found.problem(
                f"target {target.path}: module {target.module!r} holds it in {', '.join(copies)} when it is"
                f" imported, before it can be wrapped; {CAPTURED_HINT}"
            )
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
    if isinstance(target.schema, DeclaredBatchSchema):
        batch = target.schema.rules
        found.lines.append(f"  batch: one verify span per item of {batch.items.text if batch.items else 'result'}")
        found.lines.extend(f"  batch {name}: {describe_rule(rule)}" for name, rule in (*batch.names, *batch.outcome))
    generic = target.schema is None or target.schema.name == "generic"  # (none: the generic default)
    if judged and target.role == semconv.ROLE_DISPATCH and generic and not _names_a_rollout(target):
        found.note(
            "no start rule names its rollout: the generic schema names it from its row's rollout_id, else"
            " task_index or task_id and repeat (or rollout_index); a dispatch whose row has none gets no health span"
        )
