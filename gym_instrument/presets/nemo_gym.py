"""NeMo Gym (package ``nemo-gym``): the collector's dispatch, the resources servers' verify and
the rollout-health pass. Every target is optional: a NeMo Gym version without it is fine. How its
rows, results and verdicts are read is its schema, beside it (``nemo_gym_schema.py``)."""

from __future__ import annotations

from gym_instrument.presets.nemo_gym_schema import SCHEMA
from gym_instrument.targets import Target

TARGETS: tuple[Target, ...] = (
    # Every rollout goes through this generic client method as a POST to an agent's /run; the
    # same method carries /verify, /seed_session, model calls and more, which are not rollouts.
    Target(
        "nemo_gym.server_utils:ServerClient.post",
        "dispatch",
        when={"url_path": "/run"},
        row_arg="json",
        optional=True,
        schema=SCHEMA,
    ),
    # Each resources server overrides verify in its own subclass (often in __main__): the base
    # class target reaches every override, existing or defined later.
    Target(
        "nemo_gym.base_resources_server:SimpleResourcesServer.verify",
        "verify",
        row_arg="body",
        optional=True,
        schema=SCHEMA,
    ),
    # Newer releases only; imported lazily by the collector, so the module attribute is patched.
    Target("nemo_gym.rollout_health:run_health_checks", "health", optional=True, schema=SCHEMA),
    # NeMo Gym's servers run on uvicorn, which can start a keep-alive connection's next request
    # inside the previous request's context: each request cycle starts from an empty context, so
    # it is traced from its own traceparent and baggage, never as part of another rollout.
    Target("uvicorn.protocols.http.h11_impl:RequestResponseCycle.run_asgi", "isolate", optional=True),
    Target("uvicorn.protocols.http.httptools_impl:RequestResponseCycle.run_asgi", "isolate", optional=True),
)
