"""verifiers (package ``verifiers``, the ``verifiers.v1`` stack of 0.4.0): each episode attempt is a
dispatch, each task's scoring a verify, as a table of targets in the declarative form (data).
Both targets are optional. Which fields they read is the schema beside it (``schema.py``)."""

from __future__ import annotations

from typing import Any

PRESET: dict[str, Any] = {
    "targets": [
        # Awaited once per attempt by Env.run_slot (a retried episode is a second dispatch).
        {
            "path": "verifiers.v1.env:Env.run_episode",
            "role": "dispatch",
            "row": "task",
            "schema": "verifiers",
            "framework": "verifiers",
            "optional": True,
        },
        # Awaited inside the episode, so its span is a child of the dispatch span; a Task subclass
        # that overrides score is reached through the base class.
        {
            "path": "verifiers.v1.task:Task.score",
            "role": "verify",
            "row": "trace",
            "schema": "verifiers",
            "framework": "verifiers",
            "optional": True,
        },
    ]
}
