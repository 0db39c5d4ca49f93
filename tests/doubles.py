"""Test doubles: stand-ins for the parts a test does not exercise.

:class:`KeywordReward` replaces the reward service in tests of the trainer's mechanics (dispatch, learning, faults,
dev evaluation): a reward function is any callable ``items -> list[ItemReward]``
(:mod:`cluster.experience`), and this one is deterministic, instant and needs neither Ray Serve nor a verifier.
"""
from __future__ import annotations

import re
from typing import Any

from reward_service.schemas import ItemReward


class KeywordReward:
    """In-process reward: ``value`` on every token that overlaps an occurrence of ``word``.

    Matching is case-insensitive on whole words of the response text; token positions come from the
    items' ``token_offsets`` (the same alignment contract as the service). Tokens of a matched word get
    label sign +1 (as a "Correct" statement), so FSPO runs work with it too. A response containing the
    word counts as correct.
    """

    def __init__(self, word: str, value: float = 1.0):
        if not word.strip():
            raise ValueError("KeywordReward: word must be a non-empty string")
        self.word = word.strip()
        self.value = float(value)
        self._re = re.compile(r"(?<!\w)" + re.escape(self.word) + r"(?!\w)", re.IGNORECASE)

    def __call__(self, items: list[dict[str, Any]]) -> list[ItemReward]:
        out = []
        for it in items:
            spans = [m.span() for m in self._re.finditer(it["response"])]
            offsets = it["token_offsets"]
            rewards = [0.0] * len(offsets)
            signs = [0] * len(offsets)
            for s, e in spans:
                for t, (a, b) in enumerate(offsets):
                    if a < e and b > s:  # token overlaps the word
                        rewards[t] = self.value
                        signs[t] = 1
            out.append(ItemReward(token_rewards=rewards, token_label_signs=signs, score=float(sum(rewards)),
                                  is_correct=bool(spans), abstained=False, label_counts={"Correct": len(spans)},
                                  num_statements=len(spans), num_unaligned=0, num_tokens=len(offsets)))
        return out
