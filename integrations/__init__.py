"""Plug the RLFH reward service into other trainers, with their own code unchanged.

- :mod:`integrations.openrlhf_reward_func`: OpenRLHF's in-process mode (``--remote_rm_url path/to/file.py``);
  OpenRLHF's HTTP mode needs no code here: ``--remote_rm_url http://host:port/get_reward``.
- :mod:`integrations.trl`: a reward function for TRL's ``GRPOTrainer(reward_funcs=...)``.
- :mod:`integrations.verl`: a reward manager returning verl's dense token-level ``reward_tensor``.

All of them call the service through :class:`reward_service.client.RewardClient` (timeouts, bounded retries,
counted failures). No trainer framework is imported here: each is the user's dependency, not ours.
"""
