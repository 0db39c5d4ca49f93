"""Not the ``rlfh`` command any more: that is :mod:`rlfh.cli` (the top layer, above every package).

Kept for :func:`plain_doc` only, which some bench modules still import from here; it lives in
:mod:`core.help_text`, import it from there.
"""
from core.help_text import plain_doc  # noqa: F401 (re-exported for old imports)
