"""Plug the RLFH reward service into other trainers, with their own code unchanged.

- :mod:`integrations.openrlhf_reward_func`: OpenRLHF's in-process mode (``--reward.remote_url path/to/file.py``);
  OpenRLHF's HTTP mode needs no code here: ``--reward.remote_url http://host:port/get_reward`` (OpenRLHF 0.11's
  flag names; docs/INTEGRATIONS.md has the whole commands, checked by OpenRLHF's own parser in the tests).
- :mod:`integrations.trl`: a reward function for TRL's ``GRPOTrainer(reward_funcs=...)``.
- :mod:`integrations.verl`: a reward manager returning verl's dense token-level ``reward_tensor``.

All of them call the service through :class:`reward_service.client.RewardClient` (timeouts, bounded retries,
counted failures). No trainer framework is imported here: each is the user's dependency, not ours.
"""
