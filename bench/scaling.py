"""``rlfh bench scaling``: wall-clock time of the text passes that must stay linear in the response length.

The tests check what these passes compute (tests/test_verifier_text.py, tests/test_llm_backend.py,
tests/test_reward_math.py); how long they take is measured here, not asserted there: a shared 2-core
machine makes any fixed time limit flaky. Each row times one pass on a long input (best of ``--repeat``)
and names the budget it was written against:

* ``entities + sentences``: ``verifier_service.text`` on 40k characters (thousands of entities; the
  pairwise de-overlap it replaced took seconds). Budget 2 s.
* ``align_statement``: one statement against 400 sentences (24k characters) with a wrong hint. Budget 2 s.
* ``align_spans``: 300 character spans against ~5,000 token offsets (20k characters). Budget 0.5 s.
"""
from __future__ import annotations

import argparse
import json
import re
import time

from verifier_service import text as T
from verifier_service.align import align_statement


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scaling", help="Time the text passes that must stay linear (verifier text, alignment).",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="Runs per pass; the best is reported (default 3).")
    p.add_argument("--json", action="store_true", help="Print JSON rows instead of a table.")
    p.set_defaults(func=_cmd)


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(repeat: int = 3) -> list[dict]:
    """One row per pass: ``{"pass", "size", "seconds", "budget_s", "within"}``."""
    import numpy as np

    # numpy: kept lazy, this module is on `rlfh --help`'s import path
    from reward_service.token_rewards import align_spans

    rows = []
    base = "Jonathan Stark was born on April 3, 1971 in Medford, Oregon. He won 2 titles with Henri Leconte in 1994. "
    long_text = base * 400
    rows.append(("entities + sentences", f"{len(long_text)} chars",
                 _best(lambda: (T.entities(long_text), T.split_sentences(long_text)), repeat), 2.0))

    sent = "The band played in many cities and towns across the country. "
    resp = sent * 400
    spans = [(i * len(sent), (i + 1) * len(sent) - 1) for i in range(400)]
    rows.append(("align_statement", f"{len(resp)} chars, {len(spans)} sentences",
                 _best(lambda: align_statement("The band played in many towns", resp, spans, hint=399), repeat), 2.0))

    text = (" ".join(f"w{i % 97}" for i in range(5000)) + ".")[:20000]
    offs = np.array([(m.start(), m.end()) for m in re.finditer(r"\S+", text)] + [(len(text), len(text))])
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(text), size=300)
    ends = starts + rng.integers(1, 400, size=300)
    rows.append(("align_spans", f"{len(offs)} tokens, 300 spans",
                 _best(lambda: align_spans(offs, starts, ends, len(text)), repeat), 0.5))
    return [{"pass": name, "size": size, "seconds": round(s, 4), "budget_s": budget, "within": s <= budget}
            for name, size, s, budget in rows]


def _cmd(args: argparse.Namespace) -> int:
    rows = measure(args.repeat)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'pass':24s} {'size':32s} {'seconds':>9s} {'budget':>7s}")
    for r in rows:
        mark = "" if r["within"] else "  OVER"
        print(f"{r['pass']:24s} {r['size']:32s} {r['seconds']:9.4f} {r['budget_s']:7.1f}{mark}")
    return 0
