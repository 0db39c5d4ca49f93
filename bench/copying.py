"""`rlfh bench copying RUN_DIR`: does an RL run answer, or copy the passage? A table per step of its rollouts.

Reads a run's ``samples.jsonl`` (set ``LOG_SAMPLES`` to the step's reply count to see every reply) and
``dev_eval.jsonl``, and prints per step:

- **first sentence right**: the share of replies whose first sentence the gold grader grades correct
  (``core.grader``, the grounded recipe's ``first-sentence`` scope);
- **no answer**: the share whose first sentence gives no answer (a restated or echoed question, a yes/no question
  answered with neither, an option named without the comparison asked, an abstention:
  ``verifier_service.question_rules.NO_ANSWER_REASONS``);
- **copied off-question**: of the sentences after the first, the share copied from the passage (at least
  ``COPY_SHARE`` of the sentence's words are one run of a passage sentence's) that do not bear on the question
  (informativeness 1-2 by ``verifier_service.question_rules.informativeness_level``);
- **words**: mean reply length; **reward**: mean logged reward (``score``: the verifier's token rewards as logged);
  **dev correct**: the in-loop dev evaluation after that step's update (step 0: before any), where there was one.

Step N's replies were sampled before step N's update: they show the policy after N - 1 updates.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Optional

from core.grader import CORRECT, NOT_ATTEMPTED, grade_answer
from core.help_text import plain_doc
from core.sentences import split_sentences
from verifier_service.question import analyze_question
from verifier_service.question_rules import NO_ANSWER_REASONS, informativeness_level

COPY_SHARE = 0.8
_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def copied(sentence: str, passage_sentences: list[list[str]]) -> bool:
    """At least COPY_SHARE of the sentence's words are one unbroken run of words of one passage sentence."""
    ws = _words(sentence)
    if len(ws) < 4:
        return False
    for ps in passage_sentences:
        best, prev = 0, [0] * (len(ps) + 1)
        for x in ws:
            cur = [0] * (len(ps) + 1)
            for j, y in enumerate(ps):
                if x == y:
                    cur[j + 1] = prev[j] + 1
                    best = max(best, cur[j + 1])
            prev = cur
        if best >= COPY_SHARE * len(ws):
            return True
    return False


def reply_figures(rec: dict) -> dict:
    """The figures of one samples.jsonl record."""
    reply, question, gold = rec["response"], rec["question"], rec.get("gold") or ""
    g = grade_answer(reply, gold, question, scope="first-sentence") if gold else None
    sents = [s.text for s in split_sentences(reply)]
    passage = [_words(s.text) for p in rec.get("materials") or [] for s in split_sentences(p)]
    qi = analyze_question(question)
    later = sents[1:]
    off = 0
    for i, s in enumerate(later):
        if copied(s, passage) and informativeness_level(s, qi, gold or None, sents[:i + 1]) <= 2:
            off += 1
    return {"right": bool(g and g.grade == CORRECT),
            "no_answer": bool(g and (g.grade == NOT_ATTEMPTED or g.reason in NO_ANSWER_REASONS)),
            "later": len(later), "copied_off": off, "words": len(_words(reply)), "score": float(rec["score"])}


def run(run_dir: "str | Path") -> list[dict]:
    """One row per step of the run's samples.jsonl."""
    run_dir = Path(run_dir)
    by_step: dict[int, list[dict]] = {}
    with open(run_dir / "samples.jsonl", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            by_step.setdefault(int(rec["step"]), []).append(reply_figures(rec))
    dev = {}
    if (run_dir / "dev_eval.jsonl").exists():
        for line in (run_dir / "dev_eval.jsonl").read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            key = next((k for k in d if k.endswith("/correct") and k.count("/") == 2), None)
            if key:
                dev[int(d["step"])] = d[key]
    rows = []
    for step in sorted(by_step):
        fs = by_step[step]
        n, later = len(fs), sum(f["later"] for f in fs)
        rows.append({"step": step, "replies": n, "first_right": sum(f["right"] for f in fs) / n,
                     "no_answer": sum(f["no_answer"] for f in fs) / n,
                     "copied_off": (sum(f["copied_off"] for f in fs) / later) if later else 0.0,
                     "words": sum(f["words"] for f in fs) / n, "reward": sum(f["score"] for f in fs) / n,
                     "dev_correct": dev.get(step)})
    if 0 in dev:
        rows.insert(0, {"step": 0, "replies": 0, "first_right": None, "no_answer": None, "copied_off": None,
                        "words": None, "reward": None, "dev_correct": dev[0]})
    return rows


def print_table(rows: list[dict], run_dir, file=None) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"Answering or copying, per step of {run_dir}")
    for c in ("step", "replies", "first sentence right", "no answer", "copied off-question", "words", "reward",
              "dev correct (after the step)"):
        t.add_column(c, justify="right")
    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}%"
    for r in rows:
        if not r["replies"]:   # the dev evaluation before any update
            t.add_row(str(r["step"]), "-", "-", "-", "-", "-", "-", pct(r["dev_correct"]))
            continue
        t.add_row(str(r["step"]), str(r["replies"]), pct(r["first_right"]), pct(r["no_answer"]), pct(r["copied_off"]),
                  f"{r['words']:.1f}", f"{r['reward']:+.2f}", pct(r["dev_correct"]))
    Console(file=file or sys.stdout, width=140).print(t)


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("copying", help="Per step of a run: right first sentences, no answers, passage sentences "
                        "copied off the question.", description=plain_doc(__doc__),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="A run's SAVE_PATH (with samples.jsonl).")
    p.add_argument("--json", default=None, metavar="PATH", help="Also write the rows as JSON to PATH.")
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    if not (Path(args.run_dir) / "samples.jsonl").exists():
        print(f"RUN_DIR {args.run_dir}: no samples.jsonl (set LOG_SAMPLES when training)", file=sys.stderr)
        return 2
    try:
        rows = run(args.run_dir)
    except (json.JSONDecodeError, KeyError, ValueError) as e:
        print(f"RUN_DIR {args.run_dir}: samples.jsonl is not a run's samples log ({e})", file=sys.stderr)
        return 2
    print_table(rows, args.run_dir)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.copying")
    sub = p.add_subparsers()
    add_parser(sub)
    args = p.parse_args(["copying", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
