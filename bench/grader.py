"""`rlfh bench grader`: the gold grader against the hand labels of the answer statement.

On each hand-labelled set of ``bench/data/`` (``real_answers.jsonl``, ``grounded_answers.jsonl``,
``main_recipe_answers.jsonl``: replies the policy really wrote, cut into facts by hand, the fact that answers the
question marked), the hand outcome of a reply is *right* when its answer fact is labelled ``Correct`` or ``Hedged
correct``, else *not right* (a wrong answer fact, or none: no answer). The grader's outcome is ``correct`` or not
(:func:`core.grader.grade_answer`, strict, the set's grade scope: the first sentence for the two grounded sets,
whose replies are graded on their answer sentence, the whole reply for ``real_answers``). Two readings of the hand
outcome:

- **scoped**: only an answer fact inside the part the grader reads counts (a grounded reply whose first sentence
  does not answer is not right, even when a later sentence does: the recipe grades the answer sentence);
- **any**: the answer fact wherever it is.

Per set and part (``tune``: the grader's rules were written on it; ``heldout``: ``bench.real.split_of``, a third
of the questions, only reported) it prints the agreement and the number of replies.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from bench.real import PARTS, RealAnswer, load_real
from core.grader import CORRECT, grade_answer, graded_span
from core.help_text import plain_doc

DATA_DIR = Path(__file__).resolve().parent / "data"
#: set file -> the grade scope its replies are graded with
SETS = {"real_answers.jsonl": "whole", "grounded_answers.jsonl": "first-sentence",
        "main_recipe_answers.jsonl": "first-sentence"}
GOOD = ("Correct", "Hedged correct")


def hand_right(ans: RealAnswer, scope: str, scoped: bool) -> bool:
    """The hand outcome: the answer fact is labelled right (and, ``scoped``, lies in the graded part)."""
    end = graded_span(ans.answer, scope)[1]
    facts = [f for f in ans.facts if f.answer and (not scoped or f.start < end)]
    return bool(facts) and facts[0].label in GOOD


def agreement_rows(sets: Optional[dict[str, str]] = None, data_dir: Path = DATA_DIR) -> list[dict]:
    """One row per set, part (and ``all`` parts pooled) and reading: agreeing replies and replies."""
    rows = []
    pooled: dict[tuple[str, bool], list[int]] = {}
    for name, scope in (sets or SETS).items():
        answers = load_real(data_dir / name)
        for part in PARTS:
            sub = [a for a in answers if a.part == part]
            grades = [grade_answer(a.answer, a.gold, a.question, scope=scope).grade == CORRECT for a in sub]
            for scoped in (True, False):
                agree = sum(g == hand_right(a, scope, scoped) for a, g in zip(sub, grades))
                rows.append({"set": name, "part": part, "reading": "scoped" if scoped else "any",
                             "agree": agree, "replies": len(sub)})
                acc = pooled.setdefault((part, scoped), [0, 0])
                acc[0] += agree
                acc[1] += len(sub)
    for (part, scoped), (agree, n) in pooled.items():
        rows.append({"set": "all three", "part": part, "reading": "scoped" if scoped else "any", "agree": agree,
                     "replies": n})
    return rows


def print_table(rows: Sequence[dict], file=None) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title="Gold grader vs the hand label of the answer statement (agreeing replies / replies)")
    for c in ("set", "part", "scoped", "any"):
        t.add_column(c, justify="left" if c in ("set", "part") else "right")
    by = {(r["set"], r["part"], r["reading"]): r for r in rows}
    for s, part in dict.fromkeys((r["set"], r["part"]) for r in rows):
        cells = []
        for reading in ("scoped", "any"):
            r = by[(s, part, reading)]
            cells.append(f"{r['agree']}/{r['replies']} ({100 * r['agree'] / max(1, r['replies']):.1f}%)")
        t.add_row(s, part, *cells)
    Console(file=file or sys.stdout, width=120).print(t)


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("grader", help="The gold grader vs hand labels of the answer statement on the three "
                        "labelled sets (tune and held-out parts).",
                        description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=None, metavar="PATH", help="Also write the rows as JSON to PATH.")
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    rows = agreement_rows()
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0
