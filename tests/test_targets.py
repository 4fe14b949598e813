"""Finding targets (before or after import, through base classes) and putting originals back."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
from typing import Any

import pytest
from pydantic import BaseModel

import gym_instrument
from gym_instrument import GymInstrumentor, Target, semconv
from gym_instrument.target.patcher import GymWrapper


class VerifyRequest(BaseModel):
    answer: str


def originals(module: Any) -> dict[str, Any]:
    return {
        "send_row": module.__dict__["send_row"],
        "score": module.__dict__["score"],
        "post": module.ServerClient.__dict__["post"],
        "verify": module.SimpleResourcesServer.__dict__["verify"],
        "mcqa_verify": module.McqaResourcesServer.__dict__["verify"],
        "init_subclass": module.SimpleResourcesServer.__dict__.get("__init_subclass__"),
    }


def test_import_before_instrument(make_module: Any, instrument: Any, telemetry: Any) -> None:
    module = importlib.import_module(make_module())
    instrument(targets=[f"{module.__name__}:send_row=dispatch"])
    module.send_row({"task_id": "a"})
    assert [span.attributes[semconv.TASK_ID] for span in telemetry.spans()] == ["a"]


def test_import_after_instrument(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module()
    instrument(targets=[f"{name}:send_row=dispatch"])
    assert name not in sys.modules  # instrument() imports no target module
    module = importlib.import_module(name)
    module.send_row({"task_id": "b"})
    assert [span.attributes[semconv.TASK_ID] for span in telemetry.spans()] == ["b"]


def test_uninstrument_restores_the_identical_objects(make_module: Any, instrument: Any, telemetry: Any) -> None:
    module = importlib.import_module(make_module(KINDS_SOURCE_FOR_RESTORE))
    before = {name: module.Holder.__dict__[name] for name in ("cm", "sm", "m")}
    before_function = module.__dict__["f"]
    instrumentor = instrument(
        targets=[f"{module.__name__}:Holder.{name}=dispatch" for name in before] + [f"{module.__name__}:f=verify"]
    )
    assert all(module.Holder.__dict__[name] is not before[name] for name in before)
    assert isinstance(module.Holder.__dict__["cm"], classmethod) and isinstance(module.Holder.__dict__["sm"], staticmethod)
    instrumentor.uninstrument()
    assert {name: module.Holder.__dict__[name] for name in before} == before
    assert all(module.Holder.__dict__[name] is before[name] for name in before)
    assert module.__dict__["f"] is before_function
    module.Holder.cm({})
    module.Holder.sm({})
    module.Holder().m({})
    module.f({})
    assert telemetry.spans() == []


def test_a_reference_taken_before_uninstrument_traces_no_more(make_module: Any, instrument: Any, telemetry: Any) -> None:
    """``from module import f`` while instrumented keeps the wrapper; after uninstrument() it passes through."""
    module = importlib.import_module(make_module(KINDS_SOURCE_FOR_RESTORE))
    instrumentor = instrument(targets=[f"{module.__name__}:f=verify"])
    taken = module.f
    assert taken({}) == 1.0
    assert len(telemetry.spans(semconv.SPAN_VERIFY)) == 1
    instrumentor.uninstrument()
    instrument(targets=[f"{module.__name__}:Holder.m=dispatch"])  # recording again, for another target
    telemetry.clear()
    assert taken({}) == 1.0
    assert telemetry.spans() == []
    module.Holder().m({})
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 1


KINDS_SOURCE_FOR_RESTORE = """
class Holder:
    @classmethod
    def cm(cls, row):
        return cls

    @staticmethod
    def sm(row):
        return row

    def m(self, row):
        return self


def f(request):
    return 1.0
"""


def test_uninstrument_restores_base_and_subclasses(make_module: Any, instrument: Any, telemetry: Any) -> None:
    module = importlib.import_module(make_module())
    before = originals(module)
    instrumentor = instrument(
        targets=[f"{module.__name__}:{path}=verify" for path in ("SimpleResourcesServer.verify", "score")]
        + [f"{module.__name__}:ServerClient.post=dispatch", f"{module.__name__}:send_row=dispatch"]
    )

    class Later(module.SimpleResourcesServer):
        async def verify(self, body: Any) -> Any:
            return {"reward": 1.0}

    later_original = Later.__dict__["verify"].__wrapped__
    assert module.SimpleResourcesServer.__dict__["__init_subclass__"] is not None
    instrumentor.uninstrument()
    after = originals(module)
    assert all(after[key] is before[key] for key in before), {k for k in before if after[k] is not before[k]}
    assert Later.__dict__["verify"] is later_original
    assert "__init_subclass__" not in module.SimpleResourcesServer.__dict__


def test_pending_hooks_are_disarmed(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module()
    instrumentor = instrument(targets=[f"{name}:send_row=dispatch"])
    instrumentor.uninstrument()
    module = importlib.import_module(name)
    assert not isinstance(module.__dict__["send_row"], GymWrapper)
    module.send_row({})
    assert telemetry.spans() == []


def test_subclass_overrides_existing_and_future(make_module: Any, instrument: Any, telemetry: Any) -> None:
    module = importlib.import_module(make_module())
    instrument(targets=[f"{module.__name__}:SimpleResourcesServer.verify=verify"])

    class DefinedLater(module.McqaResourcesServer):
        async def verify(self, body: Any) -> Any:
            return {"reward": 0.5}

    class Inherits(module.SimpleResourcesServer):
        pass

    async def run() -> list[Any]:
        return [
            await module.McqaResourcesServer().verify({"result": {"reward": 1.0}}),
            await DefinedLater().verify({}),
            await Inherits().verify({}),
            await module.SimpleResourcesServer().verify({}),
        ]

    assert asyncio.run(run()) == [{"reward": 1.0}, {"reward": 0.5}, {"reward": 0.0}, {"reward": 0.0}]
    rewards = [span.attributes[semconv.ROLLOUT_REWARD] for span in telemetry.spans(semconv.SPAN_VERIFY)]
    assert rewards == [1.0, 0.5, 0.0, 0.0]


MIXIN_SOURCE = """
class SimpleResourcesServer:
    async def verify(self, body):
        return {"reward": 0.0}


class WeatherVerifier:
    \"\"\"A mixin that is no SimpleResourcesServer subclass (as NeMo Gym 0.7.0's SimpleWeatherVerifier).\"\"\"

    async def verify(self, body):
        return {"reward": 1.0 if body.get("answer") == "sunny" else 0.0}


class WeatherServer(WeatherVerifier, SimpleResourcesServer):
    pass
"""


def test_verify_from_a_mixin_is_reached_wherever_the_mro_defines_it(make_module: Any, instrument: Any, telemetry: Any) -> None:
    module = importlib.import_module(make_module(MIXIN_SOURCE))
    mixin_original = module.WeatherVerifier.__dict__["verify"]
    instrumentor = instrument(targets=[f"{module.__name__}:SimpleResourcesServer.verify=verify"])

    class Middle(module.WeatherVerifier, module.SimpleResourcesServer):  # a second server on the same mixin
        __module__ = "__main__"  # defined in a server's app.py, after instrumenting

    class Leaf(Middle):  # the mixin is a base of a base
        pass

    class OwnOverride(module.WeatherServer):
        async def verify(self, body: Any) -> Any:
            return {"reward": 0.25}

    async def run() -> list[Any]:
        return [
            await module.WeatherServer().verify({"answer": "sunny"}),
            await Middle().verify({"answer": "rain"}),
            await Leaf().verify({"answer": "sunny"}),
            await OwnOverride().verify({}),
            await module.SimpleResourcesServer().verify({}),
        ]

    assert asyncio.run(run()) == [{"reward": 1.0}, {"reward": 0.0}, {"reward": 1.0}, {"reward": 0.25}, {"reward": 0.0}]
    rewards = [span.attributes[semconv.ROLLOUT_REWARD] for span in telemetry.spans(semconv.SPAN_VERIFY)]
    assert rewards == [1.0, 0.0, 1.0, 0.25, 0.0]  # exactly one verify span per call
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 5
    instrumentor.uninstrument()
    assert module.WeatherVerifier.__dict__["verify"] is mixin_original
    assert "verify" not in Middle.__dict__ and "verify" not in module.WeatherServer.__dict__


def test_a_mixin_after_the_base_in_the_mro_is_not_what_verify_resolves_to(
    make_module: Any, instrument: Any, telemetry: Any
) -> None:
    module = importlib.import_module(make_module(MIXIN_SOURCE.partition("class WeatherServer")[0]))
    mixin_original = module.WeatherVerifier.__dict__["verify"]
    instrument(targets=[f"{module.__name__}:SimpleResourcesServer.verify=verify"])

    class BaseFirst(module.SimpleResourcesServer, module.WeatherVerifier):
        pass

    assert asyncio.run(BaseFirst().verify({"answer": "sunny"})) == {"reward": 0.0}  # the base's own verify
    assert module.WeatherVerifier.__dict__["verify"] is mixin_original  # never reached, never wrapped
    assert len(telemetry.spans(semconv.SPAN_VERIFY)) == 1


def test_override_calling_super_is_one_span(make_module: Any, instrument: Any, telemetry: Any) -> None:
    module = importlib.import_module(make_module())
    instrument(targets=[f"{module.__name__}:SimpleResourcesServer.verify=verify"])

    class Delegating(module.SimpleResourcesServer):
        async def verify(self, body: Any) -> Any:
            return await super().verify(body)

    assert asyncio.run(Delegating().verify({})) == {"reward": 0.0}
    assert len(telemetry.spans(semconv.SPAN_VERIFY)) == 1


def test_subclass_init_subclass_still_runs(make_module: Any, instrument: Any) -> None:
    module = importlib.import_module(make_module())
    registered: list[Any] = []

    class Registry(module.SimpleResourcesServer):
        def __init_subclass__(cls, tag: str = "", **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)
            registered.append((cls.__name__, tag))

    instrument(targets=[f"{module.__name__}:SimpleResourcesServer.verify=verify"])

    class Tagged(Registry, tag="mcqa"):
        async def verify(self, body: Any) -> Any:
            return 1.0

    assert registered == [("Tagged", "mcqa")]
    assert isinstance(Tagged.__dict__["verify"], GymWrapper)


def test_instrument_twice_is_one_span_per_call(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module()
    instrument(targets=[f"{name}:send_row=dispatch"])
    GymInstrumentor().instrument(targets=[f"{name}:send_row=dispatch"], presets="none")  # warns, does nothing
    module = importlib.import_module(name)
    module.send_row({})
    assert len(telemetry.spans()) == 1


def test_same_target_twice_and_a_decorated_target_wrap_once(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module("import gym_instrument\n\n@gym_instrument.dispatch\ndef send(row):\n    return row\n\nalias = send\n")
    instrument(targets=[f"{name}:send=dispatch", f"{name}:send=dispatch", f"{name}:alias=dispatch"])
    module = importlib.import_module(name)
    module.send({})
    module.alias({})
    assert len(telemetry.spans()) == 2


def test_one_function_reachable_through_two_wrapped_names(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module("def send(row):\n    return row\n\nclass Client:\n    send = staticmethod(send)\n")
    instrument(targets=[f"{name}:send=dispatch", f"{name}:Client.send=dispatch"])
    module = importlib.import_module(name)
    module.Client.send({})
    module.send({})
    assert len(telemetry.spans()) == 2


def test_condition_limits_dispatch_to_run(pipeline: Any, telemetry: Any) -> None:
    client = pipeline.ServerClient()

    async def run() -> None:
        await client.post("agent", "/run", json={"task_id": "t"})
        await client.post("resources", "/verify", json={"task_id": "t"})
        await client.post("model", "/v1/responses", json={})
        await client.post("agent", url_path="/run", json={"task_id": "u"})

    asyncio.run(run())
    assert [span.attributes[semconv.TASK_ID] for span in telemetry.spans(semconv.SPAN_DISPATCH)] == ["t", "u"]


def test_signature_is_kept_for_fastapi(make_module: Any, instrument: Any) -> None:
    module = importlib.import_module(make_module())
    instrument(targets=[f"{module.__name__}:SimpleResourcesServer.verify=verify"])
    server = module.McqaResourcesServer()
    assert str(inspect.signature(server.verify)) == "(body)"
    assert inspect.iscoroutinefunction(server.verify)
    assert server.verify.__name__ == "verify"


def test_fastapi_parses_the_body_through_the_wrapper(make_module: Any, instrument: Any, telemetry: Any) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    module = importlib.import_module(make_module())
    instrument(targets=[f"{module.__name__}:SimpleResourcesServer.verify=verify"])

    class Server(module.SimpleResourcesServer):
        async def verify(self, body: VerifyRequest) -> dict[str, float]:
            return {"reward": 1.0 if body.answer == "B" else 0.0}

    app = FastAPI()
    app.post("/verify")(Server().verify)
    response = TestClient(app).post("/verify", json={"answer": "B"})
    assert response.json() == {"reward": 1.0}
    assert [span.attributes[semconv.ROLLOUT_REWARD] for span in telemetry.spans(semconv.SPAN_VERIFY)] == [1.0]


def test_decorators(instrument: Any, telemetry: Any) -> None:
    instrument()

    @gym_instrument.dispatch
    def run(row: Any) -> Any:
        return score({"result": 0.5})

    @gym_instrument.verify(row_arg="request")
    def score(request: Any) -> Any:
        return request["result"]

    @gym_instrument.health
    async def judge(rows: Any) -> Any:
        return [{"task_index": row["task_index"], "repeat": row["repeat"], "verdict": "healthy"} for row in rows]

    # A decorated function is the user's own: the common field names (the generic schema) by default.
    rows = [{"task_index": 0, "repeat": r, "task_id": "d"} for r in range(2)]
    assert [run(row) for row in rows] == [0.5, 0.5]
    assert len(asyncio.run(judge(rows))) == 2
    dispatches = telemetry.spans(semconv.SPAN_DISPATCH)
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    health = telemetry.spans(semconv.SPAN_HEALTH)
    assert [span.attributes[semconv.TASK_ID] for span in dispatches] == ["d", "d"]
    assert [span.attributes[semconv.ROLLOUT_ID] for span in verifies] == ["0-0", "0-1"]
    assert [span.parent.span_id for span in health] == [span.context.span_id for span in dispatches]
    assert run.__name__ == "run" and list(inspect.signature(score).parameters) == ["request"]


def test_target_parsing() -> None:
    assert Target.parse("a.b:C.d=verify") == Target("a.b:C.d", "verify")
    assert Target.parse(" a:f = health ") == Target("a:f", "health")
    with pytest.raises(ValueError, match="a schema after the role is read by instrument"):
        Target.parse("a:f=health@nemo_gym")
    for bad in ("a.b:C.d", "a.b=verify", "a.b:C.d=judge", ":f=verify", "a:f=", "a:1f=dispatch", "a:f=dispatch=x"):
        with pytest.raises(ValueError, match="target"):
            Target.parse(bad)
