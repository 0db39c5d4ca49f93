"""Commands and snippets as docs/*.md write them, for tests that check the documented text itself.

A fenced block of a language (```bash, ```python) is returned as written. Shell blocks become logical command
lines (backslash continuations joined, comments dropped). ``$NAME`` / ``${NAME}`` are expanded from the
variables the doc itself assigns (``NAME=value`` lines, and ``NAME=$(python -c '...')``, whose Python code is run
here as written), with overrides given by the test. A variable the doc never assigns fails the test.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_ASSIGN = re.compile(r"^([A-Z_][A-Z0-9_]*)=(\S.*)$")


def blocks(doc: str, lang: str) -> list[str]:
    """The fenced blocks of ``docs/<doc>`` in language ``lang``, in order."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    return [body for kind, body in _FENCE.findall(text) if kind == lang]


def shell_lines(doc: str) -> list[str]:
    """Every logical line of the doc's bash blocks: continuations joined, comments and blank lines dropped."""
    out = []
    for body in blocks(doc, "bash"):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if line:
                out.append(line)
    return out


def _run_python_c(code: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<doc python -c>", "exec"), {"__name__": "__main__"})
    return buf.getvalue().strip()


def variables(doc: str, **overrides: str) -> dict[str, str]:
    """``NAME -> value`` for the doc's assignment lines (``NAME=$(python -c '...')`` is evaluated), then overrides."""
    env: dict[str, str] = {}
    for line in shell_lines(doc):
        m = _ASSIGN.match(line)
        if not m or " " in m.group(2).split("$(", 1)[0].strip():   # `NAME=v cmd ...`: an env prefix, not a variable
            continue
        name, value = m.groups()
        sub = re.fullmatch(r"\$\(python -c (.+)\)", value)
        env[name] = _run_python_c(shlex.split(sub.group(1))[0]) if sub else value
    env.update(overrides)
    return env


def expand(line: str, env: dict[str, str]) -> str:
    """``$NAME`` / ``${NAME}`` replaced from ``env`` (KeyError names a variable the doc never assigns)."""
    def one(m):
        name = m.group(1) or m.group(2)
        if name not in env:
            raise KeyError(f"${name} is used but never assigned in the doc")
        return shlex.quote(env[name])
    return _VAR.sub(one, line)


def commands(doc: str, marker: str, **overrides: str) -> list[tuple[dict[str, str], list[str]]]:
    """Each documented command line containing ``marker`` (e.g. ``openrlhf.cli.train_ppo_ray``), expanded:
    ``(environment prefix {NAME: value}, the arguments after the marker)``."""
    env = variables(doc, **overrides)
    out = []
    for line in shell_lines(doc):
        if marker not in line:
            continue
        words = shlex.split(expand(line, env))
        at = words.index(marker)
        prefix = dict(w.split("=", 1) for w in words[:at] if "=" in w and not w.startswith("-"))
        out.append((prefix, words[at + 1:]))
    return out
