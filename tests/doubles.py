"""Test doubles: stand-ins for the parts a test does not exercise.

:class:`KeywordReward` replaces the reward service in tests of the trainer's mechanics (dispatch, learning, faults,
dev evaluation): a reward function is any callable ``items -> list[ItemReward]``
(:mod:`cluster.experience`), and this one is deterministic, instant and needs neither Ray Serve nor a verifier.
"""
from __future__ import annotations

# One definition: `rlfh bench peer` gives both trainers it times this same reward, so the class lives in bench/peer.py
from bench.peer import KeywordReward  # noqa: F401
