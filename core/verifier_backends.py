"""The verifier's backends, listed once: their names feed ``VERIFIER_BACKEND``'s choices (``core.config``), the
verifier's builders (``verifier_service.core``, which checks it builds exactly these) and the docs
(``docs/CONFIG.md`` is generated; ``tests/test_one_place.py`` checks the hand-written docs name every one).

Here, below the verifier, because the config reads it and must not import the verifier.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendSpec:
    name: str
    summary: str    # one line: what decides the labels


VERIFIER_BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec("evidence", "no LLM, CPU: rules decide every label against the passage (BM25 retrieval), the gold "
                "grader the answer's"),
    BackendSpec("judge", "the rules cut the response and find the statements that claim nothing; a trained claim "
                "judge (CLAIM_JUDGE_WEIGHTS) labels the rest against the evidence"),
    BackendSpec("llm", "an OpenAI-compatible endpoint at MODEL_URL judges with the paper's prompts"),
    BackendSpec("self", "the policy's own rollout engines judge, as in the paper (`rlfh train` only, where the "
                "verifier replicas are handed the engines)"),
)
BACKEND_NAMES: tuple[str, ...] = tuple(b.name for b in VERIFIER_BACKENDS)
