"""The settings, one module per role (model, rollout, policy and critic, reward, verifier, service, placement,
evaluation, trainer, and the environment-only sections), composed into ``RLFHConfig`` in :mod:`.rlfh_config`.

Import them from :mod:`core.config`, the public face; this file imports nothing, so that :mod:`core.recipes` can
use :mod:`core.settings.names` without loading the classes.
"""
