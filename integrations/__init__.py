"""Plug the RLFH reward service into other trainers, with their own code unchanged.

- OpenRLHF needs no code here. Its glue sits in the reward service, whose own ``/get_reward`` route needs it:
  :mod:`reward_service.openrlhf_adapter` (HTTP mode, ``--reward.remote_url http://host:port/get_reward``) and
  :mod:`reward_service.openrlhf_reward_func` (in-process mode, ``--reward.remote_url`` given that file).
  OpenRLHF 0.11's flag names; docs/INTEGRATIONS.md has the whole commands, checked by OpenRLHF's own parser in
  the tests.
- :mod:`integrations.trl`: a reward function for TRL's ``GRPOTrainer(reward_funcs=...)``.
- :mod:`integrations.verl`: a reward manager returning verl's dense token-level ``reward_tensor``.

All of them call the service through :class:`reward_service.client.RewardClient`, built by
:func:`reward_service.client.client_from_env` (timeouts, bounded retries, counted failures). No trainer framework is imported here: each is the user's dependency, not ours.
"""
