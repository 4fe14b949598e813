"""Configuration: one frozen dataclass whose fields each declare their setting once — the
``instrument()`` argument (the field's name), its ``OTEL_PYTHON_GYM_*`` environment variable (or
none: code only), its default and its parser. :meth:`GymConfig.resolve` decides precedence,
argument > environment > default, here and nowhere else.

A bad value passed in code raises ``ValueError``; a bad value in the environment is logged with
the variable's name and skipped, so the application still starts. In a list setting
(``OTEL_PYTHON_GYM_TARGETS``, the targets of ``OTEL_PYTHON_GYM_CONFIG``) one bad entry is skipped
and the good ones still apply.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from gym_instrument.config.declare import parse_config, target_entries, target_from_mapping, target_from_short
from gym_instrument.frameworks import FRAMEWORKS
from gym_instrument.record.attributes import utf8_safe
from gym_instrument.record.job import JOB_LINK, JOB_MODES
from gym_instrument.record.step import STEP_FIXED, STEP_FROM_BAGGAGE, STEP_OFF, StepSource, whole_step
from gym_instrument.role import ROLES
from gym_instrument.schema.extractors import Extractor
from gym_instrument.target.find import target_problem
from gym_instrument.target.target import Target

_LOG = logging.getLogger("gym_instrument")

ENV_TARGETS = "OTEL_PYTHON_GYM_TARGETS"
ENV_PRESETS = "OTEL_PYTHON_GYM_PRESETS"
ENV_LINK_CAPACITY = "OTEL_PYTHON_GYM_LINK_CAPACITY"
ENV_BAGGAGE = "OTEL_PYTHON_GYM_BAGGAGE"
ENV_JOB_CONTEXT = "OTEL_PYTHON_GYM_JOB_CONTEXT"
ENV_CONFIG = "OTEL_PYTHON_GYM_CONFIG"
ENV_LINK_DIR = "OTEL_PYTHON_GYM_LINK_DIR"
ENV_LINK_FILES = "OTEL_PYTHON_GYM_LINK_FILES"
ENV_PROPAGATION = "OTEL_PYTHON_GYM_PROPAGATION"
ENV_SERVER_TELEMETRY = "OTEL_PYTHON_GYM_SERVER_TELEMETRY"
ENV_MODEL_CALLS = "OTEL_PYTHON_GYM_MODEL_CALLS"
ENV_TRAIN_STEP = "OTEL_PYTHON_GYM_TRAIN_STEP"
# Not an instrument() setting: the file the gym_json_file exporters write to (tools.export), read
# when the SDK builds them (with no arguments).
ENV_JSON_FILE = "OTEL_PYTHON_GYM_JSON_FILE"

# Every shipped preset: each is armed only when its framework's module is imported (a post-import
# hook), so a process without that framework pays nothing for it.
DEFAULT_PRESETS = tuple(FRAMEWORKS)
DEFAULT_LINK_CAPACITY = 1_000_000


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


# -- parsers: a value from code or from the environment, or ValueError -----------------------------


def parse_target(item: Any) -> Target:
    """A target from the short form (``module:Qualified.name=role[@schema]``), the declarative form (a
    mapping) or a Target."""
    return target_from_mapping(item) if isinstance(item, Mapping) else target_from_short(item)


def parse_targets(value: str | Iterable[str | Mapping[str, Any] | Target]) -> tuple[Target, ...]:
    items = _split(value) if isinstance(value, str) else list(value)
    return tuple(parse_target(item) for item in items)


def _config_entry(item: Any) -> Target:
    """A target of ``OTEL_PYTHON_GYM_CONFIG``, read leniently: a bad rule is logged and dropped, the
    target keeps its other rules (a problem with the target itself skips it, logged by the caller)."""
    return target_from_mapping(item, skip=lambda message: _LOG.error("gym_instrument: %s: %s", ENV_CONFIG, message))


def parse_presets(value: str | Iterable[str]) -> tuple[str, ...]:
    names = _split(value) if isinstance(value, str) else [str(name).strip() for name in value]
    if [name.lower() for name in names] == ["none"] or not names:
        return ()
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown:
        raise ValueError(f"unknown preset {', '.join(map(repr, unknown))}; known: {', '.join(sorted(FRAMEWORKS))}, none")
    return tuple(dict.fromkeys(names))


def parse_capacity(value: str | int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"link capacity must be a whole number >= 1, got {value!r}")
    try:
        capacity = int(value) if isinstance(value, (int, str)) else None
    except ValueError:
        capacity = None
    if capacity is None or capacity < 1:
        raise ValueError(f"link capacity must be a whole number >= 1, got {value!r}")
    return capacity


def parse_bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_directory(value: str | os.PathLike[str]) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip():
        raise ValueError(f"link directory must be a path, got {value!r}")
    return os.path.abspath(os.path.expanduser(os.fspath(value).strip()))


def parse_job_mode(value: str) -> str:
    mode = str(value).strip().lower()
    if mode not in JOB_MODES:
        raise ValueError(f"job context must be one of {', '.join(JOB_MODES)}, got {value!r}")
    return mode


def parse_train_step(value: Any) -> StepSource:
    """``"baggage"``, ``"off"``, a step (``120``, ``"120"``) or a step and a policy version
    (``"120:ckpt-120"``: the version is everything after the first colon)."""
    if isinstance(value, StepSource):
        return value
    if isinstance(value, str) and value.strip().lower() in (STEP_FROM_BAGGAGE, STEP_OFF):
        return StepSource(value.strip().lower())
    step_text, version = value, None
    if isinstance(value, str) and ":" in value:
        step_text, version = value.split(":", 1)
        version = version.strip()
    step = whole_step(step_text)
    if step is None or version == "":
        raise ValueError(f"train step must be baggage, off, a whole number >= 0 or STEP:POLICY_VERSION, got {value!r}")
    return StepSource(STEP_FIXED, step, None if version is None else utf8_safe(version))


def parse_extractors(value: Any) -> Mapping[str, tuple[Extractor, ...]]:
    if not isinstance(value, Mapping):
        raise ValueError("extractors must map a role (dispatch, verify, health) to a list of callables")
    checked: dict[str, tuple[Extractor, ...]] = {}
    for role, callables in value.items():
        if role not in ROLES:
            raise ValueError(f"extractors: unknown role {role!r}; expected one of {', '.join(ROLES)}")
        try:
            items = (callables,) if callable(callables) else tuple(callables)
        except TypeError:
            items = (callables,)
        if not all(callable(item) for item in items):
            raise ValueError(f"extractors for {role!r} must be callables")
        checked[role] = items
    return MappingProxyType(checked)


def parse_roles(value: str | Iterable[str]) -> frozenset[str]:
    try:
        roles = frozenset([value] if isinstance(value, str) else value)
    except TypeError:
        raise ValueError(f"replace_default_extractors: expected role names, got {value!r}") from None
    unknown = roles - set(ROLES)
    if unknown:
        raise ValueError(f"replace_default_extractors: unknown role(s) {sorted(unknown)}")
    return roles


def _as_given(value: Any) -> Any:
    return value


# -- what a later instrument() call adds to the running configuration ------------------------------


def _more_targets(running: tuple[Target, ...], added: tuple[Target, ...]) -> tuple[Target, ...]:
    return running + tuple(target for target in added if target not in running)


def _more_extractors(
    running: Mapping[str, tuple[Extractor, ...]], added: Mapping[str, tuple[Extractor, ...]]
) -> Mapping[str, tuple[Extractor, ...]]:
    merged = dict(running)
    for role, extractors in added.items():
        merged[role] = merged.get(role, ()) + tuple(e for e in extractors if e not in merged.get(role, ()))
    return MappingProxyType(merged)


def _more_roles(running: frozenset[str], added: frozenset[str]) -> frozenset[str]:
    return running | added


# -- a target that this interpreter cannot find -----------------------------------------------------


def _checked_target(target: Target) -> Target:
    problem = target_problem(target)
    if problem is not None:
        raise ValueError(problem)
    return target


# -- the settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """How one :class:`GymConfig` field is set.

    ``env``: its environment variable, or None (code only). ``parse``: a value from code or the
    environment, or ``ValueError``. ``entry``: for a list setting, the parser of one entry (an
    environment entry that fails it is skipped, the others apply). ``check``: a check of one entry
    against this interpreter, made when resolving for ``instrument()`` (``check=True``).
    ``combine``: how a later ``instrument()`` call adds to the running value (None: it replaces it).
    ``entries``: how an environment value is cut into entries (default: at commas).
    """

    env: str | None
    parse: Callable[[Any], Any]
    entry: Callable[[Any], Any] | None = None
    entries: Callable[[str], list[Any]] = _split
    check: Callable[[Any], Any] | None = None
    combine: Callable[[Any, Any], Any] | None = None


_SETTING = "gym_instrument.setting"


def _declare(env: str | None, parse: Callable[[Any], Any], **how: Any) -> dict[str, Setting]:
    """A field's metadata: its :class:`Setting`."""
    return {_SETTING: Setting(env, parse, **how)}


def _no_extractors() -> Mapping[str, tuple[Extractor, ...]]:
    return MappingProxyType({})


@dataclass(frozen=True)
class GymConfig:
    """Everything ``instrument()`` is configured with; each field declares its setting once.

    Example::

        GymConfig.resolve({"link_capacity": 10_000})       # argument > OTEL_PYTHON_GYM_* > default
    """

    targets: tuple[Target, ...] = field(
        default=(),
        metadata=_declare(ENV_TARGETS, parse_targets, entry=parse_target, check=_checked_target, combine=_more_targets),
    )
    presets: tuple[str, ...] = field(default=DEFAULT_PRESETS, metadata=_declare(ENV_PRESETS, parse_presets))
    # Targets in the declarative form (config.declare): a TOML or JSON file, TOML/JSON text, or a mapping.
    config: tuple[Target, ...] = field(
        default=(),
        metadata=_declare(
            ENV_CONFIG,
            parse_config,
            entry=_config_entry,
            entries=target_entries,
            check=_checked_target,
            combine=_more_targets,
        ),
    )
    link_capacity: int = field(default=DEFAULT_LINK_CAPACITY, metadata=_declare(ENV_LINK_CAPACITY, parse_capacity))
    baggage: bool = field(default=True, metadata=_declare(ENV_BAGGAGE, parse_bool))
    # Persisted links (link.files): ended dispatches written for a health pass in another process,
    # beside the run's output (when its schema knows it) or in link_dir; link_files=False: neither.
    link_dir: str | None = field(default=None, metadata=_declare(ENV_LINK_DIR, parse_directory))
    link_files: bool = field(default=True, metadata=_declare(ENV_LINK_FILES, parse_bool))
    job_context: str = field(default=JOB_LINK, metadata=_declare(ENV_JOB_CONTEXT, parse_job_mode))
    # The package's own context propagation at a framework's hops (inject and receive targets) when
    # no contrib HTTP instrumentation is active there; False: receive targets only isolate.
    propagation: bool = field(default=True, metadata=_declare(ENV_PROPAGATION, parse_bool))
    # False: a server framework's own telemetry (FastAPI >= 0.165's spans, metrics and logs) is off
    # for the requests its receive targets handle, when its schema knows the switch.
    server_telemetry: bool = field(default=True, metadata=_declare(ENV_SERVER_TELEMETRY, parse_bool))
    # One span per model call (model_call targets); False: those targets are not wrapped at all.
    model_calls: bool = field(default=True, metadata=_declare(ENV_MODEL_CALLS, parse_bool))
    # Where a dispatch's training step and policy version come from (record.step): "baggage" (the
    # context's, else the process's BAGGAGE), "off", or a fixed "STEP[:POLICY_VERSION]" for the process.
    train_step: StepSource = field(default=StepSource(), metadata=_declare(ENV_TRAIN_STEP, parse_train_step))
    # Code only: no environment variable.
    extractors: Mapping[str, tuple[Extractor, ...]] = field(
        default_factory=_no_extractors, metadata=_declare(None, parse_extractors, combine=_more_extractors)
    )
    replace_default_extractors: frozenset[str] = field(
        default=frozenset(), metadata=_declare(None, parse_roles, combine=_more_roles)
    )
    tracer_provider: Any = field(default=None, metadata=_declare(None, _as_given))  # None: the global provider
    meter_provider: Any = field(default=None, metadata=_declare(None, _as_given))

    @classmethod
    def settings(cls) -> dict[str, Setting]:
        """Each field's :class:`Setting`, by field (and ``instrument()`` argument) name."""
        return {spec.name: spec.metadata[_SETTING] for spec in fields(cls)}

    @classmethod
    def resolve(
        cls,
        arguments: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
        *,
        running: GymConfig | None = None,
        check: bool = False,
    ) -> GymConfig:
        """Arguments (raise on bad values) > environment (log and skip bad values) > defaults.

        ``running``: the configuration of an ``instrument()`` already in effect. An argument then
        replaces its value (or adds to it: targets, extractors, replace_default_extractors), and
        what no argument gives stays as it runs; the environment is not read again.
        ``check``: also reject (code) or skip (environment) targets this interpreter cannot find.
        An argument of None counts as not given.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, setting in cls.settings().items():
            if arguments.get(name) is not None:
                value = setting.parse(arguments[name])
                if check and setting.check is not None:
                    value = tuple(setting.check(item) for item in value)
                if running is not None and setting.combine is not None:
                    value = setting.combine(getattr(running, name), value)
                values[name] = value
            elif running is not None:
                values[name] = getattr(running, name)
            elif setting.env is not None and environ.get(setting.env, "").strip():
                parsed = _from_environment(setting, environ[setting.env], check)
                if parsed is not None:
                    values[name] = parsed
        return cls(**values)


def _reason(error: Exception) -> str:
    """A failure as one line: a ValueError's message (ours), else the kind of failure."""
    if isinstance(error, ValueError):
        return str(error)
    return "nested too deep" if isinstance(error, RecursionError) else f"{type(error).__name__} while reading it"


def _from_environment(setting: Setting, raw: str, check: bool) -> Any:
    if setting.entry is not None:
        # One bad entry is skipped; the good ones still apply.
        try:
            items = setting.entries(raw)
        except Exception as error:  # any failure reading it skips this setting only, in one line
            _LOG.error("gym_instrument: %s=%r ignored: %s", setting.env, raw[:200], _reason(error))
            return None
        entries = []
        for item in items:
            try:
                entry = setting.entry(item)
                if isinstance(entry, Target):  # its messages name the variable it came from
                    entry = dataclasses.replace(entry, source=setting.env)
                entries.append(setting.check(entry) if check and setting.check is not None else entry)
            except Exception as error:
                _LOG.error("gym_instrument: %s: skipped %s", setting.env, _reason(error))
        return tuple(entries)
    try:
        return setting.parse(raw)
    except ValueError as error:
        _LOG.error("gym_instrument: %s=%r ignored: %s; using the default", setting.env, raw, error)
        return None
