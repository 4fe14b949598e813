"""A rollout pipeline shaped like NeMo Gym 0.7.0's sharded runs, with no telemetry code: a collector
that dispatches its rows and writes ``output_jsonl_fpath``, an aggregation that merges the shards
its ``input_glob`` matches and then runs the health pass, and the health pass itself."""

from __future__ import annotations

import asyncio
import glob
import json
from pathlib import Path
from typing import Any


class ServerClient:
    async def post(self, server_name: str, url_path: str, **kwargs: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        row = kwargs.get("json") or {}
        return {**row, "reward": float(row.get("_ng_rollout_index", 0) % 2)}


class RolloutCollectionHelper:
    async def run_from_config(self, config: dict[str, Any]) -> list[dict[str, Any]]:
        client = ServerClient()
        results = await asyncio.gather(*(client.post("agent", "/run", json=row) for row in config["rows"]))
        with open(config["output_jsonl_fpath"], "w") as out:
            out.writelines(json.dumps(result) + "\n" for result in results)
        return results


class RolloutAggregationHelper:
    async def run_from_config(self, config: dict[str, Any]) -> Any:
        paths = [
            path
            for pattern in config["input_glob"].split(",")
            for path in sorted(glob.glob(pattern.strip()))
            if not Path(path).stem.endswith(("_failures", "_materialized_inputs"))
        ]
        rows = [json.loads(line) for path in paths for line in Path(path).read_text().splitlines() if line.strip()]
        rows.sort(key=lambda row: (row["_ng_task_index"], row["_ng_rollout_index"]))
        output = Path(config["output_jsonl_fpath"])
        output.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return await asyncio.to_thread(run_health_checks, output, output_dir=output.parent)


def run_health_checks(rollout_paths: Any, *, output_dir: Any = None) -> dict[str, Any]:
    paths = [rollout_paths] if isinstance(rollout_paths, (str, Path)) else list(rollout_paths)
    digests = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            task_index, rollout_index = row["_ng_task_index"], row["_ng_rollout_index"]
            healthy = row["reward"] > 0
            digests.append(
                {
                    "task_index": task_index,
                    "rollout_index": rollout_index,
                    "rollout_id": f"{task_index}-{rollout_index}",
                    "verdict": "healthy" if healthy else "unhealthy",
                    "findings": []
                    if healthy
                    else [{"check": "model_call_zero_completion_tokens"}, {"check": "agent_turn_hollow"}],
                }
            )
    if output_dir is not None:
        Path(output_dir, "rollout_verdicts.jsonl").write_text("".join(json.dumps(d) + "\n" for d in digests))
    return {"rollouts": digests}
