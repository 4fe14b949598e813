"""A target: which function is wrapped (by import path), for which role, and how its calls are read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_instrument.role import ROLES
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.extractors import Extractor

PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


@dataclass(frozen=True)
class Target:
    """A function to wrap, by import path and role.

    Example::

        Target("my_loop.rollouts:Runner.send", "dispatch", row_arg="episode")
        Target("nemo_gym.server_utils:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json")
        Target.parse("my_loop.scoring:score=verify")

    ``when`` maps argument names to the value the call must pass for it to be traced.
    ``row_arg`` points at the argument holding the row (dispatch) or request (verify).
    ``extractors`` run for this target on top of the role's own attribute rules, or instead of
    them with ``default_extractors=False``. ``schema`` says how the framework's rows, results and
    verdicts are read (default: the generic schema's common field names; in the short form,
    ``"module:Qualified.name=role@nemo_gym"`` names one, read by ``instrument()``). ``optional`` targets
    (presets) may be absent from a version of their library: that is logged at debug level only.
    ``framework`` names the rollout framework on its spans (``nemo.gym.framework``). The mapping
    form (``gym_instrument.config.declare``) says all of this, attribute rules included, as data.
    """

    path: str
    role: str
    when: Mapping[str, Any] | None = None
    row_arg: str | None = None
    extractors: tuple[Extractor, ...] = ()
    default_extractors: bool = True
    optional: bool = False
    schema: RolloutSchema | None = None
    framework: str | None = None
    # Where the target was configured (an environment variable's name), for the messages about it.
    source: str | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        # ``when`` is a dict: hashed by what names the target (equal targets share these).
        return hash((self.path, self.role, self.row_arg))

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not PATH.match(self.path):
            raise ValueError(f"target {self.path!r}: expected 'package.module:Qualified.name'")
        if self.role not in ROLES:
            raise ValueError(f"target {self.path!r}: unknown role {self.role!r}; expected one of {', '.join(ROLES)}")
        object.__setattr__(self, "extractors", tuple(self.extractors))
        if not all(callable(extractor) for extractor in self.extractors):
            raise ValueError(f"target {self.path!r}: every extractor must be callable")

    @property
    def module(self) -> str:
        return self.path.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.path.partition(":")[2]

    @classmethod
    def parse(cls, spec: str | Target) -> Target:
        """A target from the short form ``"package.module:Qualified.name=role"``, or a Target (the
        mapping form is read by ``gym_instrument.config.declare.target_from_mapping``)."""
        if isinstance(spec, Target):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"target {spec!r}: expected 'package.module:Qualified.name=role', a mapping or a Target")
        path, separator, role = spec.strip().rpartition("=")
        if not separator:
            raise ValueError(f"target {spec.strip()!r}: expected 'package.module:Qualified.name=role'")
        if "@" in role:  # schema names are known above this layer
            raise ValueError(
                f"target {spec.strip()!r}: a schema after the role is read by instrument(targets=[...]) and"
                " OTEL_PYTHON_GYM_TARGETS; a Target takes schema="
            )
        return cls(path.strip(), role.strip())

    def __str__(self) -> str:
        return f"{self.path}={self.role}"

    @property
    def label(self) -> str:
        """The target as messages name it: with the setting it came from, when it came from one."""
        return f"{self} (from {self.source})" if self.source else str(self)
