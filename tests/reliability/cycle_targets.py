"""Functions of every kind, and classes with and without their own ``__init_subclass__``, for
the instrument/uninstrument cycles. No telemetry code."""

from __future__ import annotations

from typing import Any, ClassVar


def dispatch(row: Any) -> Any:
    return ("dispatched", row)


async def dispatch_async(row: Any) -> Any:
    return ("dispatched", row)


class Runner:
    def run(self, row: Any) -> Any:
        return ("run", row)

    @classmethod
    def run_classmethod(cls, row: Any) -> Any:
        return ("classmethod", row)

    @staticmethod
    def run_staticmethod(row: Any) -> Any:
        return ("staticmethod", row)


class ResourcesServer:
    """A base whose verify is overridden in subclasses (targeted through the base)."""

    def verify(self, body: Any) -> Any:
        return {"reward": 0.0}


class McqaServer(ResourcesServer):
    def verify(self, body: Any) -> Any:
        return {"reward": 1.0}


class RegisteringServer:
    """A base with its own ``__init_subclass__``, which must survive every cycle untouched."""

    registry: ClassVar[list[type]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        RegisteringServer.registry.append(cls)

    def verify(self, body: Any) -> Any:
        return {"reward": 0.5}


def targets(module_name: str = __name__) -> list[str]:
    return [
        f"{module_name}:dispatch=dispatch@nemo_gym",
        f"{module_name}:dispatch_async=dispatch@nemo_gym",
        f"{module_name}:Runner.run=dispatch@nemo_gym",
        f"{module_name}:Runner.run_classmethod=dispatch@nemo_gym",
        f"{module_name}:Runner.run_staticmethod=dispatch@nemo_gym",
        f"{module_name}:ResourcesServer.verify=verify@nemo_gym",
        f"{module_name}:RegisteringServer.verify=verify@nemo_gym",
    ]
