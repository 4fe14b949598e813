"""The declarative form: everything a preset says, as data — for code, environment and config files.

A target is a mapping (a TOML table, a JSON object, a Python dict)::

    [[targets]]
    path = "my_loop.rollouts:Runner.rollout"       # the function (required)
    role = "dispatch"                              # dispatch, verify, health or isolate (required)
    row = "job"                                    # the argument holding the row / request
    when = { mode = "train" }                      # traced only when these arguments have these values
    framework = "my_loop"                          # nemo.gym.framework on its spans
    schema = "generic"                             # built-in rules: "generic" (default), "nemo_gym", "verifiers", "module:OBJECT"
    defaults = true                                # the schema's rules apply (false: only what is declared here)
    optional = false                               # absent from this version of the library: debug log only
    extractors = ["my_loop.telemetry:dataset"]     # extractors by import path (after the call, or @at_start)
    start_extractors = []                          # extractors by import path, run before the span starts

    [targets.start]                                # attributes when the span starts (samplers see them)
    task_id = ["row.problem.id", "row.problem.title"]   # the first path that has a value
    task_index = "row.position"

    [targets.end]                                  # attributes after the call
    rollout_id = "result.attempts[-1].uid"
    reward = { path = "result.scores.*.value", map = { C = 1.0, I = 0.0 } }
    repeat = { path = "arg.epoch", offset = -1 }

    [targets.failure]                              # a failure that comes back as data
    when = "result.ok"                             # this path ...
    equals = false                                 # ... has this value (same type): the call failed
    error_type = ["result.failures[-1].kind"]      # error.type: the first path with a value, else "_OTHER"
    # (without equals: the call failed when the path is present and not None, e.g. when = "result.error")

A **path** (e.g. ``result.attempts[-1].uid``) is ``row``, ``arg.NAME``, ``self`` or ``result``
(``end`` and ``failure`` only), then any number of ``.field`` (a mapping key, a pydantic field
or extra, an attribute or a property; never a name that starts with ``__``), ``[N]`` (an item
of a list or tuple, negative from the end) and ``.*`` (the first value of a mapping that is not
None). Nothing is evaluated: a path that does not resolve is simply absent.

A rule is a path, a list of paths (the first that has a value), or a table with ``path`` (either)
and optionally ``map`` (a table of string -> value: a string value, or a bool as ``true``/``false``,
found in it is replaced, one not found becomes ``default`` when given), ``default`` and ``offset``
(an integer added to an int value: ``-1`` for a count from 1).

A rollout's facts are named by their short names (``task_id``, ``task_index``, ``repeat``,
``attempt``, ``rollout_id``, ``agent_name``, ``reward``, ``masked``, ``failure_kind``,
``error_type``: :data:`~gym_instrument.schema.declared.SHORT_NAMES`), the names the ``verdicts``
table uses; each stands for its span attribute, whose long name (``nemo.gym.task.id``) is
accepted too. Any other name is an attribute of the user's own.

Known attribute names (``nemo.gym.*``, ``error.type``) are converted by SPEC's rules: a task id
is rendered like a row's, indices must be ints >= 0, a reward must be a finite number, ids must
be non-empty strings; a value that fails is absent and the next path is tried. Rules compile to
extractors, so they follow the extractor return convention (``gym_instrument.schema.extractors``): a
``nemo.gym.rollout.id`` at the start is the rollout id (span attribute and baggage), an
``error.type`` at the end marks the call failed.

Every problem raises ``ValueError`` naming the target and the key. Read leniently (``skip=``, as
the environment's reader in ``config.settings`` does), a bad rule of ``start``, ``end`` or
``failure`` is reported and dropped and the target keeps its other rules; any other problem
skips the target.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gym_instrument import semconv
from gym_instrument.frameworks import FRAMEWORKS
from gym_instrument.lines import read_bounded
from gym_instrument.schema.base import GENERIC, RolloutSchema
from gym_instrument.schema.declared import (
    BATCH_OUTCOME_KEYS,
    PRESENT,
    SHORT_NAMES,
    TEMPLATE_NAMES,
    VERDICT_NAME_KEYS,
    AtStart,
    AttributeRules,
    BatchRules,
    Constant,
    DeclaredBatchSchema,
    DeclaredVerdictSchema,
    FailureRule,
    Template,
    ValueRule,
    VerdictRules,
)
from gym_instrument.schema.fields import MISSING
from gym_instrument.schema.paths import FieldPath
from gym_instrument.target.target import Target

TARGET_KEYS = (
    "path",
    "role",
    "row",
    "when",
    "framework",
    "schema",
    "defaults",
    "optional",
    "extractors",
    "start_extractors",
    "start",
    "end",
    "failure",
    "verdicts",
    "reward_rule",
    "batch",
)
BATCH_KEYS = ("items", "task_id", "task_index", "repeat", "attempt", "rollout_id", "reward", "masked", "failure_kind")
VERDICT_KEYS = ("items", "task_id", "task_index", "repeat", "attempt", "rollout_id", "verdict", "checks")
FAILURE_KEYS = ("when", "equals", "error_type")
RULE_KEYS = ("path", "map", "default", "offset", "template")
# What a rule's map and default may hold: the values a TOML or JSON file can give.
_SCALARS = (str, bool, int, float)
DOCUMENT_KEYS = ("targets",)
CONFIG_LIMIT = 1 << 20  # bytes of a configuration file read at most (a preset is a few KB)

Skip = Callable[[str], None]  # told the message of a rule that is dropped (lenient reading)

_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


# ---------------------------------------------------------------------------------------------
# One target from a mapping


def _no_unknown_keys(table: Mapping[Any, Any], known: Sequence[str]) -> None:
    """``ValueError`` naming the first key of ``table`` that is not ``known``, and what is."""
    unknown = [key for key in table if key not in known]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; expected {', '.join(known)}")


def import_object(path: Any) -> Any:
    """The object ``"package.module:Qualified.name"`` names (its module is imported now)."""
    if not isinstance(path, str) or not _IMPORT_PATH.match(path.strip()):
        raise ValueError(f"{path!r}: expected 'package.module:name'")
    module_name, _, qualname = path.strip().partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception as error:
        raise ValueError(f"cannot import {path!r}: {type(error).__name__}: {error}") from None
    return found


def _schema(name: Any) -> RolloutSchema:
    if isinstance(name, str) and name in FRAMEWORKS:
        return FRAMEWORKS[name].schema
    if name == "generic":
        return GENERIC
    if not isinstance(name, str) or ":" not in name:
        raise ValueError(f"unknown schema {name!r}; expected {', '.join((*FRAMEWORKS, 'generic'))} or 'module:OBJECT'")
    schema = import_object(name)
    if not isinstance(schema, RolloutSchema):
        raise ValueError(f"{name!r} is not a RolloutSchema")
    return schema


def _paths(value: Any, allow_result: bool, in_record: bool = False, in_batch: bool = False) -> tuple[FieldPath, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"expected a path or a list of paths, got {value!r}")
    paths = tuple(FieldPath(item) for item in items)
    for path in paths:
        _check_root(path, allow_result, in_record, in_batch)
    return paths


def _check_root(path: FieldPath, allow_result: bool, in_record: bool, in_batch: bool = False) -> None:
    if in_record and path.root != "item":
        raise ValueError(f"path {path.text!r}: a verdict record's fields start with item (the record)")
    if path.root == "item" and not (in_record or in_batch):
        raise ValueError(f"path {path.text!r}: item is a verdict record or a batch's item, only in verdicts and batch")
    if path.per_item and not in_batch:
        raise ValueError(f"path {path.text!r}: [i] is the position of a batch's item, only in batch")
    if path.root == "result" and not allow_result:
        raise ValueError(f"path {path.text!r}: the result is not known when the span starts (use end)")


def _template(value: Any, allow_result: bool, in_record: bool, in_batch: bool = False) -> Template:
    template = Template(value)
    for part in template.parts[1::2]:
        if isinstance(part, FieldPath):
            _check_root(part, allow_result, in_record, in_batch)
    return template


def _value_rule(value: Any, allow_result: bool, in_record: bool = False, in_batch: bool = False) -> ValueRule:
    if not isinstance(value, Mapping):
        return ValueRule(_paths(value, allow_result, in_record, in_batch))
    _no_unknown_keys(value, RULE_KEYS)
    if "template" in value:
        if len(value) > 1:
            raise ValueError("template: a value composed of others takes no path, map, default or offset")
        return ValueRule((), template=_template(value["template"], allow_result, in_record, in_batch))
    if "path" not in value:
        raise ValueError("a rule table needs path (a path or a list of paths) or template")
    paths = _paths(value["path"], allow_result, in_record, in_batch)
    value_map = value.get("map")
    if value_map is not None:
        if not isinstance(value_map, Mapping) or not value_map:
            raise ValueError(f"map: expected a table of string = value, got {value_map!r}")
        for key, mapped in value_map.items():
            if not isinstance(key, str) or type(mapped) not in _SCALARS:
                raise ValueError(f"map: {key!r} = {mapped!r}: expected a string key and a string, bool or number")
        value_map = dict(value_map)
    default = value.get("default", MISSING)
    if default is not MISSING and type(default) not in _SCALARS:
        raise ValueError(f"default: expected a string, bool or number, got {default!r}")
    if default is not MISSING and value_map is None:
        raise ValueError("default: applies to map (a value not in it); there is no map")
    offset = value.get("offset", 0)
    if type(offset) is not int:
        raise ValueError(f"offset: expected an integer, got {offset!r}")
    return ValueRule(paths, value_map, default, offset)


def _rules(value: Any, allow_result: bool, where: str, skip: Skip | None) -> AttributeRules | None:
    if not isinstance(value, Mapping) or not value:
        raise ValueError("expected a table of attribute = path(s)")
    rules: list[tuple[str, ValueRule]] = []
    named: dict[str, str] = {}  # attribute -> how the table names it
    for attribute, rule in value.items():
        try:
            if not isinstance(attribute, str) or not attribute:
                raise ValueError(f"attribute name {attribute!r}: expected a non-empty string")
            name = SHORT_NAMES.get(attribute, attribute)
            if name in named:
                raise ValueError(f"{attribute!r}: the table names {name} already, as {named[name]!r}")
            try:
                rules.append((name, _value_rule(rule, allow_result)))
            except ValueError as error:
                raise ValueError(f"{attribute!r}: {error}") from None
            named[name] = attribute
        except ValueError as error:
            if skip is None:
                raise
            skip(f"{where}: {error}; this rule is dropped, the target's other rules apply")
    rules.sort(key=lambda rule: rule[1].template is not None)  # templates last: they read the others
    return AttributeRules(tuple(rules), at_start=not allow_result, where=where) if rules else None


def _verdicts(value: Any, where: str) -> VerdictRules:
    if not isinstance(value, Mapping):
        raise ValueError("expected a table: items, rollout_id (or task_index or task_id, and repeat), verdict, checks")
    _no_unknown_keys(value, VERDICT_KEYS)
    if "verdict" not in value:
        raise ValueError("needs verdict (a path in the record, e.g. item.verdict; a table with map to rename values)")
    if "rollout_id" not in value and not ("repeat" in value and ("task_index" in value or "task_id" in value)):
        raise ValueError("needs rollout_id, or task_index or task_id and repeat: what names the rollout a record judges")

    def rule(key: str) -> ValueRule:
        try:
            return _value_rule(value[key], False, in_record=True)
        except ValueError as error:
            raise ValueError(f"{key}: {error}") from None

    items = None
    if "items" in value:
        try:
            items = FieldPath(_text(value["items"]))
            if items.root != "result":
                raise ValueError(f"path {items.text!r}: the records are in the result (result or result.NAME...)")
        except ValueError as error:
            raise ValueError(f"items: {error}") from None
    names = _names(value, rule)
    checks, check_field = None, None
    if "checks" in value:
        spec = value["checks"]
        if isinstance(spec, Mapping) and "field" in spec:
            check_field = _text(spec["field"])
            spec = {key: item for key, item in spec.items() if key != "field"}
        checks = ValueRule(_paths(spec.get("path") if isinstance(spec, Mapping) else spec, False, in_record=True))
    return VerdictRules(items, tuple(names), rule("verdict"), checks, check_field, where)


def _names(value: Mapping[str, Any], rule: Callable[[str], ValueRule]) -> tuple[tuple[str, ValueRule], ...]:
    """What names a record's (or a batch item's) rollout, templates last; a template naming a short
    name the table does not declare is refused."""
    names = [(attribute, rule(key)) for key, attribute in VERDICT_NAME_KEYS.items() if key in value]
    names.sort(key=lambda item: item[1].template is not None)
    declared = {attribute for attribute, _ in names}
    for attribute, named in names:
        template = named.template
        if template is None:
            continue
        for part in template.parts[1::2]:
            if isinstance(part, str) and part not in declared:
                key = next(key for key, known in VERDICT_NAME_KEYS.items() if known == attribute)
                short = next(short for short, known in TEMPLATE_NAMES.items() if known == part)
                raise ValueError(f"{key}: template {template.text!r} names {{{short}}}, which the table does not declare")
    return tuple(names)


def _batch(value: Any, where: str) -> BatchRules:
    if not isinstance(value, Mapping):
        raise ValueError("expected a table: items, rollout_id (or task_index or task_id, and repeat), reward")
    _no_unknown_keys(value, BATCH_KEYS)
    if "rollout_id" not in value and not ("repeat" in value and ("task_index" in value or "task_id" in value)):
        raise ValueError(
            "needs rollout_id, or task_index or task_id and repeat: what names each item's rollout"
            " (from the item, item.id, or from a list of the call's arguments at the item's position, arg.ids[i])"
        )

    def rule(key: str) -> ValueRule:
        try:
            return _value_rule(value[key], True, in_batch=True)
        except ValueError as error:
            raise ValueError(f"{key}: {error}") from None

    items = None
    if "items" in value:
        try:
            items = FieldPath(_text(value["items"]))
            if items.root != "result" or items.per_item:
                raise ValueError(f"path {items.text!r}: the items are a list in the result (result or result.NAME...)")
        except ValueError as error:
            raise ValueError(f"items: {error}") from None
    outcome = tuple((attribute, rule(key)) for key, attribute in BATCH_OUTCOME_KEYS.items() if key in value)
    return BatchRules(items, _names(value, rule), outcome, where)


def _reward_rule(value: Any) -> Constant:
    if value not in semconv.REWARD_RULES:
        raise ValueError(f"expected one of {', '.join(semconv.REWARD_RULES)}, got {value!r}")
    return Constant(((semconv.REWARD_RULE, value),))


def _failure(value: Any) -> FailureRule:
    if not isinstance(value, Mapping):
        raise ValueError("expected a table with when, equals and error_type")
    _no_unknown_keys(value, FAILURE_KEYS)
    if "when" not in value:
        raise ValueError("needs when (a path; with equals, the value that means failed)")
    equals = value.get("equals", PRESENT)
    if equals is not PRESENT and type(equals) not in _SCALARS:
        raise ValueError(f"equals: expected a string, bool or number, got {equals!r}")
    try:
        when = FieldPath(value["when"])
    except ValueError as error:
        raise ValueError(f"when: {error}") from None
    try:
        error_type = _paths(value["error_type"], True) if "error_type" in value else ()
    except ValueError as error:
        raise ValueError(f"error_type: {error}") from None
    return FailureRule(when, equals, error_type)


def _extractors(value: Any, at_start: bool) -> tuple[Callable[..., Any], ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ValueError(f"expected a list of 'package.module:function', got {value!r}")
    found = []
    for index, item in enumerate(items):
        extractor = import_object(item) if isinstance(item, str) else item
        if not callable(extractor):
            raise ValueError(f"[{index}] {item!r} is not callable")
        found.append(AtStart(extractor) if at_start else extractor)
    return tuple(found)


def _when(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError("expected a table of argument = value")
    for name, expected in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{name!r} is not an argument name")
        if type(expected) not in (str, bool, int, float):
            raise ValueError(f"{name}: expected a string, bool or number, got {expected!r}")
    return dict(value)


def _flag(value: Any) -> bool:
    if type(value) is not bool:
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value.strip()


def target_from_mapping(spec: Any, skip: Skip | None = None) -> Target:
    """A :class:`~gym_instrument.Target` from its declarative form (see the module); ValueError otherwise.

    ``skip``: read leniently: a bad rule of ``start``, ``end`` or ``failure`` is passed to ``skip``
    (a message naming the target and the key) and dropped, and the target keeps its other rules."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"target {spec!r}: expected a table with path and role")
    path = spec.get("path")
    label = f"target {path!r}" if isinstance(path, str) else "target without a path"
    unknown = [key for key in spec if key not in TARGET_KEYS]
    if unknown:
        raise ValueError(f"{label}: unknown key {unknown[0]!r}; expected one of {', '.join(TARGET_KEYS)}")
    for required in ("path", "role"):
        if required not in spec:
            raise ValueError(f"{label}: {required} is required")
    readers: dict[str, Callable[[Any], Any]] = {
        "row": _text,
        "when": _when,
        "framework": _text,
        "schema": _schema,
        "defaults": _flag,
        "optional": _flag,
        "extractors": lambda value: _extractors(value, at_start=False),
        "start_extractors": lambda value: _extractors(value, at_start=True),
        "start": lambda value: _rules(value, False, f"{label}: start", skip),
        "end": lambda value: _rules(value, True, f"{label}: end", skip),
        "failure": _failure,
        "verdicts": lambda value: _verdicts(value, label),
        "reward_rule": _reward_rule,
        "batch": lambda value: _batch(value, label),
    }
    only = {"verdicts": semconv.ROLE_HEALTH, "reward_rule": semconv.ROLE_VERIFY, "batch": semconv.ROLE_VERIFY}
    for key, role in only.items():
        if key in spec and spec["role"] != role:
            raise ValueError(f"{label}: {key}: applies to a {role} target, not to a {spec['role']!r} one")
    read: dict[str, Any] = {}
    for key, reader in readers.items():
        if key in spec:
            try:
                read[key] = reader(spec[key])
            except ValueError as error:
                message = f"{label}: {key}: {error}"
                if skip is None or key not in ("start", "end", "failure"):
                    raise ValueError(message) from None
                skip(f"{message}; this rule is dropped, the target's other rules apply")
    # Declared rules run after the user's named extractors; the failure rule last, so it sees them.
    extractors = (
        *read.get("start_extractors", ()),
        *read.get("extractors", ()),
        *((read["start"],) if read.get("start") is not None else ()),
        *((read["end"],) if read.get("end") is not None else ()),
        *((read["failure"],) if "failure" in read else ()),
        *((read["reward_rule"],) if "reward_rule" in read else ()),
    )
    schema = read.get("schema")
    if "verdicts" in read:
        schema = DeclaredVerdictSchema(schema if schema is not None else GENERIC, read["verdicts"])
    if "batch" in read:
        schema = DeclaredBatchSchema(schema if schema is not None else GENERIC, read["batch"])
    return Target(
        spec["path"],
        spec["role"],
        when=read.get("when"),
        row_arg=read.get("row"),
        extractors=extractors,
        default_extractors=read.get("defaults", True),
        optional=read.get("optional", False),
        schema=schema,
        framework=read.get("framework"),
    )


def target_from_short(spec: Any) -> Target:
    """A :class:`~gym_instrument.Target` from the short form ``"package.module:Qualified.name=role"``,
    optionally with the schema its calls are read through: ``"...=role@nemo_gym"`` (a name as the
    mapping form's ``schema``; without one, the generic schema's common field names)."""
    if not isinstance(spec, str):
        return Target.parse(spec)
    path, separator, role = spec.strip().rpartition("=")
    role, at, schema_name = role.partition("@")
    target = Target.parse(f"{path}{separator}{role}")
    if not at:
        return target
    try:
        schema = _schema(schema_name.strip())
    except ValueError as error:
        raise ValueError(f"target {spec.strip()!r}: schema: {error}") from None
    return dataclasses.replace(target, schema=schema)


# ---------------------------------------------------------------------------------------------
# Documents: a mapping, a TOML or JSON file, or TOML or JSON text


def _toml_loads(text: str) -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        except ModuleNotFoundError:
            raise ValueError(
                "reading TOML needs Python 3.11+ (tomllib) or the tomli package (pip install tomli); "
                "or write the configuration as JSON"
            ) from None
    return tomllib.loads(text)


def read_document(source: Any) -> Mapping[str, Any]:
    """The configuration document ``source`` holds: a mapping as it is; text that starts with ``{``
    (JSON) or ``[`` or spans lines (TOML); else the path of a ``.json`` or TOML file (of at most
    ``CONFIG_LIMIT`` bytes). Every problem, a document nested too deep included, is ``ValueError``."""
    if isinstance(source, Mapping):
        return source
    if isinstance(source, Path):
        source = str(source)
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"expected a mapping, a file path or TOML/JSON text, got {source!r}")
    text = source.strip()
    content, is_json = text, text.startswith("{")
    if not is_json and not text.startswith("[") and "\n" not in text:
        try:
            content, is_json = read_bounded(text, CONFIG_LIMIT).decode("utf-8"), text.endswith(".json")
        except OSError as error:
            raise ValueError(f"cannot read {text!r}: {error.strerror or error}") from None
        except ValueError as error:  # too large, or not UTF-8
            raise ValueError(f"cannot read {text!r}: {error}") from None
    try:
        document = json.loads(content) if is_json else _toml_loads(content)
    except ValueError as error:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        raise ValueError(f"cannot parse {text[:60]!r}: {error}") from None
    except RecursionError:
        raise ValueError(f"cannot parse {text[:60]!r}: nested too deep") from None
    if not isinstance(document, Mapping):
        raise ValueError("the configuration must be a table (an object) with a targets list")
    return document


def target_entries(source: Any) -> list[Any]:
    """The target entries of a configuration document (each checked by :func:`target_from_mapping`)."""
    document = read_document(source)
    _no_unknown_keys(document, DOCUMENT_KEYS)
    entries = document.get("targets", [])
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise ValueError("targets: expected a list of tables")
    return list(entries)


def parse_config(source: Any) -> tuple[Target, ...]:
    """Every target of a configuration document; the first problem raises ValueError."""
    if isinstance(source, (list, tuple)):
        return tuple(target for item in source for target in parse_config(item))
    return tuple(target_from_mapping(entry) for entry in target_entries(source))


_PRESET_TARGETS: dict[str, tuple[Target, ...]] = {}


def preset_targets(name: str) -> tuple[Target, ...]:
    """The targets of the framework ``name``'s preset (read once)."""
    targets = _PRESET_TARGETS.get(name)
    if targets is None:
        targets = _PRESET_TARGETS[name] = parse_config(FRAMEWORKS[name].preset)
    return targets
