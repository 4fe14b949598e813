"""A run's rollouts per training step: reward, success, infrastructure failures and tokens.

A rollout's step is the ``nemo.gym.train.step`` of its dispatch span (and its policy version, the
``nemo.gym.policy.version`` there), kept on its record in the rollout store
(:mod:`gym_instrument.tools.report.rollouts`). After the join each rollout, decided once, is added
to its step here, as it is to its task; a rollout whose dispatch names no step is under step
``None``. Only a run in which some dispatch names a step has per-step figures.

Memory: a few counters per step, and at most ``POLICY_VERSIONS`` policy version names.
"""

from __future__ import annotations

from typing import Any

POLICY_VERSIONS = 4  # policy versions named per step (more are counted)


class StepCounts:
    """The rollouts of one step, each added once."""

    __slots__ = (
        "infra_failures",
        "more_versions",
        "reward_total",
        "rollouts",
        "scored",
        "successes",
        "token_rollouts",
        "tokens",
        "versions",
    )

    def __init__(self) -> None:
        self.rollouts = 0
        self.scored = 0
        self.successes = 0
        self.reward_total = 0.0
        self.infra_failures = 0
        self.token_rollouts = 0
        self.tokens = 0
        self.versions: list[str] = []
        self.more_versions = 0

    def add(self, policy_version: str | None, reward: float | None, success: bool, infra: bool, tokens: int | None) -> None:
        self.rollouts += 1
        if reward is not None:
            self.scored += 1
            self.reward_total += reward
        self.successes += success
        self.infra_failures += infra
        if tokens is not None:
            self.token_rollouts += 1
            self.tokens += tokens
        if policy_version is not None and policy_version not in self.versions:
            if len(self.versions) < POLICY_VERSIONS:
                self.versions.append(policy_version)
            else:
                self.more_versions += 1

    def figures(self, step: int | None) -> dict[str, Any]:
        return {
            "step": step,
            "policy_versions": sorted(self.versions),
            "more_policy_versions": self.more_versions,
            "rollouts": self.rollouts,
            "scored": self.scored,
            "successes": self.successes,
            "mean_reward": self.reward_total / self.scored if self.scored else None,
            "success_rate": self.successes / self.scored if self.scored else None,
            "infra_failures": self.infra_failures,
            "infra_share": self.infra_failures / self.rollouts if self.rollouts else None,
            "token_rollouts": self.token_rollouts,
            "tokens": self.tokens,
            "tokens_mean": self.tokens / self.token_rollouts if self.token_rollouts else None,
        }


class StepFigures:
    """Every counted rollout by its step (:meth:`add`), then the figures, steps in order (:meth:`figures`)."""

    def __init__(self) -> None:
        self.steps: dict[int | None, StepCounts] = {}

    def add(
        self,
        step: int | None,
        policy_version: str | None,
        reward: float | None,
        success: bool,
        infra: bool,
        tokens: int | None,
    ) -> None:
        """One rollout: its step, policy version, reward (scored only), outcome and tokens (input + output)."""
        counts = self.steps.get(step)
        if counts is None:
            counts = self.steps[step] = StepCounts()
        counts.add(policy_version, reward, success, infra, tokens)

    def figures(self) -> list[dict[str, Any]] | None:
        """One entry per step, in step order, the rollouts of no step last; None when no rollout named a step."""
        if not any(step is not None for step in self.steps):
            return None
        order = sorted(self.steps, key=lambda step: (step is None, step or 0))
        return [self.steps[step].figures(step) for step in order]
