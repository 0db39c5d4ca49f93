"""The loop learns: with an in-process token reward on one word, the policy says that word more often.

The driver runs its real loop (real Ray actor groups, DeepSpeed on CPU, the real SmolLM2-135M, HF rollout
engine, weight sync) with :class:`doubles.KeywordReward` plugged in instead of the reward service.
Before and after 3 steps the rollout engine samples 8 held-out prompts x 8 samples with a fixed seed; the share
of responses containing the word and its mean count must rise clearly (measured on the 2-core CI machine,
2026-11-26: 0.48 -> 0.88 and 0.58 -> 1.28 occurrences per 12-token response after 3 steps, against +0.25 and x1.5
needed; 5 steps gave 0.98 and 1.59, 3 clear both bounds with room; the run is seeded end to
end, so it is reproducible up to the thread count's float rounding).
"""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slow

WORD = "the"
EVAL_SEED = 1234
EVAL_SAMPLES = 8
GEN_TOKENS = 12


def word_stats(samples, word: str = WORD) -> tuple[float, float]:
    """(share of responses containing the word, mean occurrences per response)."""
    pat = re.compile(r"(?<!\w)" + re.escape(word) + r"(?!\w)", re.IGNORECASE)
    counts = [len(pat.findall(s.response_text)) for s in samples]
    return sum(1 for c in counts if c) / len(counts), sum(counts) / len(counts)


# real model: this checks learning (the word's rate rises), which a random model's samples cannot show
def test_keyword_reward_raises_the_word_frequency(tmp_path):
    import ray

    from cluster.driver import Trainer
    from doubles import KeywordReward
    from core.config import RLFHConfig
    from core.data import load_items
    from core.prompts import render_prompt
    from core.ray_bootstrap import start_ray
    # no reference (KL_COEF=0) and a critic-free estimator: two actors (policy + engine) keep it quick
    cfg = RLFHConfig.load(
        environ={}, save_path=str(tmp_path), prompt_data="halueval:train", max_samples=200, rollout_batch_size=4,
        n_samples_per_prompt=4, generate_max_len=GEN_TOKENS, prompt_max_len=128, train_batch_size=8,
        micro_train_batch_size=8, micro_rollout_batch_size=16, advantage_estimator="grpo", kl_coef=0.0,
        actor_lr=1e-4, max_steps=3, seed=3, use_tensorboard=False, rollout_backend="hf")
    handle = start_ray(cfg, num_cpus=4, include_dashboard=False)
    trainer = Trainer(cfg, reward_fn=KeywordReward(WORD), show_progress=False)
    try:
        trainer.setup()
        assert trainer.groups.critic is None and trainer.groups.reference is None
        engine = trainer.groups.rollout[0]
        # held-out questions (dev split; training uses the train split)
        eval_prompts = [render_prompt(trainer.tokenizer, p.question, mode="closed")
                        for p in load_items("halueval:dev", limit=8)]

        def measure() -> tuple[float, float]:
            samples = ray.get(engine.generate.remote(eval_prompts, EVAL_SAMPLES, GEN_TOKENS, 1.0, 1.0, EVAL_SEED))
            return word_stats(samples)

        before = measure()
        result = trainer.fit()
        after = measure()
    finally:
        trainer.close()
        handle.shutdown()
    rewards = [r["reward_mean"] for r in result.history]
    print(f"'{WORD}' in responses before {before[0]:.2f} after {after[0]:.2f}; occurrences per response "
          f"{before[1]:.2f} -> {after[1]:.2f}; reward per step {rewards}")
    assert result.completed and not any(r["skipped"] for r in result.history)
    versions = [r["weights_version"] for r in result.history]
    assert all(a < b for a, b in zip(versions, versions[1:])), f"the engine missed an update: {versions}"
    assert after[0] >= before[0] + 0.25, f"'{WORD}' rate did not rise clearly: {before[0]:.2f} -> {after[0]:.2f}"
    assert after[1] >= before[1] * 1.5, f"'{WORD}' count did not rise clearly: {before[1]:.2f} -> {after[1]:.2f}"
    assert max(rewards[-2:]) > rewards[0], f"training reward did not rise: {rewards}"
