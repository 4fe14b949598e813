"""Reward functions in TRL's signature, ``f(prompts, completions, **columns) -> list[float]`` (the
dataset's columns arrive as lists, one item per completion), over reasoning-gym's own scorers."""

from __future__ import annotations

from typing import Any

import reasoning_gym
from reasoning_gym.utils import extract_answer


def accuracy_reward(prompts: list[str], completions: list[str], entry: list[dict[str, Any]], **kwargs: Any) -> list[float]:
    """reasoning-gym's ``score_answer`` of the answer in each completion's ``<answer>`` tags."""
    scores = []
    for completion, task in zip(completions, entry, strict=True):
        score_answer = reasoning_gym.get_score_answer_fn(task["metadata"]["source_dataset"])
        scores.append(float(score_answer(answer=extract_answer(completion), entry=task)))
    return scores


def format_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """0.5 for an answer in ``<answer>`` tags."""
    return [0.5 if extract_answer(completion) is not None else 0.0 for completion in completions]
