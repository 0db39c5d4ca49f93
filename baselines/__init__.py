"""Baselines the RL must beat: R-Tuning (refusal-aware SFT) and DPO on self-sampled factuality pairs."""
