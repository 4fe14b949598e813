"""``gym-instrument config check FILE``: what a configuration in the declarative form will do, before
a run. Each target: whether this interpreter can find it (its module is looked up, not imported)
and what each of its rules will read; every problem with the message the running instrumentation
would log. Only what the configuration names as code (``extractors``, ``schema = "module:OBJECT"``)
is imported, as reading it for a run would."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_instrument.config.declare import target_entries, target_from_mapping
from gym_instrument.record.failures import name_of
from gym_instrument.schema.declared import PRESENT, AttributeRules, FailureRule, ValueRule
from gym_instrument.schema.fields import MISSING
from gym_instrument.target.find import target_problem


@dataclass
class ConfigCheck:
    """What :func:`check_config` found: lines to print and the problems among them."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str) -> None:
        self.problems.append(message)
        self.lines.append(f"  problem: {message}")


def describe_rule(rule: ValueRule) -> str:
    """A rule as one line: its paths, its map and its offset."""
    text = " or ".join(path.text for path in rule.paths)
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
    return [f"extractor {name_of(extractor)}"]


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
    for entry in entries:
        skipped: list[str] = []
        try:
            target = target_from_mapping(entry, skip=skipped.append)
        except (ValueError, RecursionError) as error:
            path = entry.get("path") if isinstance(entry, Mapping) else None
            found.lines.append(f"target {path!r}: skipped" if isinstance(path, str) else "a target: skipped")
            found.problem(str(error) if isinstance(error, ValueError) else "nested too deep")
            continue
        where = target_problem(target)
        found.lines.append(
            f"target {target.path} ({target.role}"
            + (f", framework {target.framework}" if target.framework else "")
            + "): "
            + ("cannot be found" if where else "its module is found (the function is looked up when it is imported)")
        )
        if where:
            found.problem(where)
        for message in skipped:
            found.problem(message)
        if target.row_arg:
            found.lines.append(f"  row: the argument {target.row_arg!r}")
        if target.when:
            found.lines.append(f"  traced when: {', '.join(f'{name} = {value!r}' for name, value in target.when.items())}")
        for extractor in target.extractors:
            found.lines.extend(f"  {line}" for line in _describe(extractor))
    return found
