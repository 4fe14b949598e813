"""NeMo Gym (package ``nemo-gym``): the collector's dispatch, the resources servers' verify, the
model servers' model calls and the rollout-health pass, as a table of targets in the declarative form (data). Every target is
optional: a NeMo Gym version without it is fine. How its rows, results and verdicts are read is
its schema, beside it (``schema.py``)."""

from __future__ import annotations

from typing import Any

FRAMEWORK = "nemo_gym"

PRESET: dict[str, Any] = {
    "targets": [
        # Every rollout goes through this generic client method as a POST to an agent's /run; the
        # same method carries /verify, /seed_session, model calls and more, which are not rollouts.
        {
            "path": "nemo_gym.server_utils:ServerClient.post",
            "role": "dispatch",
            "when": {"url_path": "/run"},
            "row": "json",
            "schema": "nemo_gym",
            "framework": FRAMEWORK,
            "optional": True,
        },
        # Each resources server overrides verify in its own subclass (often in __main__): the base
        # class target reaches every override, existing or defined later.
        {
            "path": "nemo_gym.base_resources_server:SimpleResourcesServer.verify",
            "role": "verify",
            "row": "body",
            "schema": "nemo_gym",
            "framework": FRAMEWORK,
            "optional": True,
        },
        # A whole collection, and an aggregation of shards (0.7.0): the dispatches a run makes persist
        # their links beside its output file, and a merge of shards is recorded, so that a health
        # pass in another process (gym eval aggregate, gym eval health-check) finds its dispatches.
        {
            "path": "nemo_gym.rollout_collection:RolloutCollectionHelper.run_from_config",
            "role": "run",
            "schema": "nemo_gym",
            "optional": True,
        },
        {
            "path": "nemo_gym.rollout_collection:RolloutAggregationHelper.run_from_config",
            "role": "run",
            "schema": "nemo_gym",
            "optional": True,
        },
        # The collector reads a /run response's body (the rollout's result, with its token usage)
        # after the POST returned: the read ends the dispatch span with the rollout's totals. The
        # collector imported the function by name, so its own module's name is patched too.
        {"path": "nemo_gym.server_utils:get_response_json", "role": "read_result", "schema": "nemo_gym", "optional": True},
        {"path": "nemo_gym.rollout_collection:get_response_json", "role": "read_result", "schema": "nemo_gym", "optional": True},
        # Model calls, where a model server serves them: each server overrides these in its own
        # subclass (the base class target reaches every override). A responses() that calls
        # chat_completions() is one model call, one span.
        {
            "path": "nemo_gym.base_responses_api_model:SimpleResponsesAPIModel.responses",
            "role": "model_call",
            "row": "body",
            "schema": "nemo_gym",
            "framework": FRAMEWORK,
            "optional": True,
        },
        {
            "path": "nemo_gym.base_responses_api_model:SimpleResponsesAPIModel.chat_completions",
            "role": "model_call",
            "row": "body",
            "schema": "nemo_gym",
            "framework": FRAMEWORK,
            "optional": True,
        },
        # Newer releases only; imported lazily by the collector, so the module attribute is patched.
        {"path": "nemo_gym.rollout_health:run_health_checks", "role": "health", "schema": "nemo_gym", "optional": True},
        # Every hop between Gym's processes goes through this one function (0.7.0's docstring: "the
        # only place Gym talks to another server"): the current context goes into its headers (where
        # contrib's aiohttp-client instrumentation handles the request, its client span's replaces it).
        {"path": "nemo_gym.server_utils:request", "role": "inject", "schema": "nemo_gym", "optional": True},
        # NeMo Gym's servers run on uvicorn, which can start a keep-alive connection's next request
        # inside the previous request's context: each request cycle starts from an empty context with
        # the request's own traceparent and baggage in it (extracted here, unless contrib's FastAPI
        # instrumentation does it for this request), never as part of another rollout.
        {
            "path": "uvicorn.protocols.http.h11_impl:RequestResponseCycle.run_asgi",
            "role": "receive",
            "schema": "nemo_gym",
            "optional": True,
        },
        {
            "path": "uvicorn.protocols.http.httptools_impl:RequestResponseCycle.run_asgi",
            "role": "receive",
            "schema": "nemo_gym",
            "optional": True,
        },
    ]
}
