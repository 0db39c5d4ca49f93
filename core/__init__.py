"""The bottom layer: what every deployable part needs and nothing that needs them.

- settings: :mod:`core.config` (every setting of every part, ``RLFHConfig``) and :mod:`core.reward_settings`
  (the reward service's settings, the one definition the config adopts and requests override);
- contracts: :mod:`core.verify_schema` (the verifier's labels and wire format), :mod:`core.prompts`
  (prompt templates, the abstention text), :mod:`core.questions` (question types from the text);
- plumbing: :mod:`core.metrics` (the metric catalogue), :mod:`core.retry`, :mod:`core.ray_bootstrap`,
  :mod:`core.reaper`;
- offline assets: :mod:`core.assets`, :mod:`core.data`, :mod:`core.model_loader` (torch / transformers are
  imported inside the functions that load a model, so the services can import this package without them);
- the math: :mod:`core.core_algos` (rewards, KL, advantages, losses as pure torch functions) and
  :mod:`core.abstention` (what declining to answer earns each step: the abstention price, the outcome reward).

Layering, bottom to top (tests/test_import_graph.py checks it): core <- verifier_service <- reward_service <-
actors <- evaluation <- cluster (the trainer) <- integrations / baselines / bench. Nothing here imports a package
above it.
"""
