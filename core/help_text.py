"""A module docstring as command-line help: what every ``rlfh`` subcommand module passes as its parser's
``description``. Here, at the bottom, so a subcommand in any package can use it without importing the command
package (:mod:`rlfh.cli`, the top layer).
"""
from __future__ import annotations

import re


def plain_doc(doc: str) -> str:
    """A module docstring as ``--help`` text: ````code```` becomes 'code', ``:func:`name``` becomes name."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc)
    return text.replace("``", "'")
