"""The claim judge's training settings: how much of each source goes into a training set, and how it is trained.

Plain records with no torch, so ``rlfh judge --help`` reads their defaults without loading the model code
(:mod:`verifier_service.judge_data` and :mod:`verifier_service.judge_train` use them). Both are part of the
trained judge's cache key (:func:`verifier_service.judge_train.build_key`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataSettings:
    """How much of each source goes into one training set."""

    qa_items: int = 1200
    swaps_per_item: float = 2.0
    dialogue_items: int = 300
    summary_items: int = 200
    hand_repeats: int = 2
    policy_repeats: int = 2
    policy_questions: int = 0           # train questions the policy samples answers to (0: none)
    policy_samples: int = 2             # answers per question
    policy_temperature: float = 0.7
    policy_evidence_share: float = 0.5  # share of those prompts with the passage
    seed: int = 0


@dataclass(frozen=True)
class TrainSettings:
    """How the judge's LoRA adapter is trained."""

    lr: float = 1e-3
    batch_size: int = 16
    warmup_steps: int = 30
    max_examples: int = 4200    # the first N shuffled examples (0: all of them)
    epochs: int = 2
    rank: int = 16
    alpha: float = 32.0
    seed: int = 0
    threads: int = 0
