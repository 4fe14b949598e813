"""``make demo`` shows, per rollout, what the exported spans say; check it against the pipeline's own output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "demo"))

import run_demo


def test_demo_table_matches_the_rollouts_file(tmp_path: Path) -> None:
    spans, metrics, output = run_demo.run_pipeline(tmp_path)
    rollouts = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in map(json.loads, output.read_text().splitlines())}
    rows = run_demo.table(spans)
    assert len(rows) == 13  # 12 rollouts + the failed first attempt of one
    by_rollout_id = {row[2]: row for row in rows}
    assert by_rollout_id["1-2"][3] == "error: AgentUnavailable" and by_rollout_id["1-2"][4] == "-"
    assert by_rollout_id["1-2-a1"][4] == "healthy"
    for (task_index, repeat), rollout in rollouts.items():
        row = by_rollout_id[f"{task_index}-{repeat}" + ("-a1" if (task_index, repeat) == (1, 2) else "")]
        reward = rollout["reward"]
        if isinstance(reward, float) and not rollout.get("mask_sample"):
            assert row[3] == f"{reward:.1f}"
        else:
            assert row[3].startswith("(")
        assert row[4] in ("healthy", "unhealthy")
    assert sum(point["value"] for point in run_demo.metric_points(metrics, "gym.rollout.rewarded_total")) == 10
