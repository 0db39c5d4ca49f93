"""The error a bad setting raises, below everything that checks settings: :mod:`core.config` and
:mod:`core.reward_settings` (which ``core.config`` imports) both raise it. Import it from either; it is
defined here once so that neither of the two has to import the other from inside a function.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A setting has a bad value. The message names the variable and the fix."""
