"""`rlfh bench informativeness`: the verifier's informativeness against hand labels on the paper's five levels.

Data: ``bench/data/informativeness.jsonl``, one record per atomic fact of 150 grounded replies (the hand-cut facts
of ``grounded_answers.jsonl`` and of ``main_recipe_answers.jsonl``'s trained answers), each scored 1-5 by hand
against the question (rubric: ``bench/data/INFORMATIVENESS_GUIDE.md``). It is built from
``bench/data/informativeness_annotations.txt`` by :func:`build_records` (``python -m bench.informativeness``).

The bench verifies every reply with its passage and gold answer (the ``evidence`` backend, as the grounded recipe
trains) and gives each hand fact the informativeness of the verifier's statement that overlaps it most (1 when
none does: no statement, no reward). Per part (``tune``: the rules were written on it; ``heldout``: a third of
the questions by ``bench.real.split_of``, only reported) it prints:

- exact: the share of facts whose level the verifier gives exactly;
- within one: the share off by at most one level;
- low kept low: of the facts scored 1-2 by hand, the share the verifier scores at most 2 (what stops a copied
  passage sentence that does not bear on the question from being paid like an answer);
- answer found: of the facts scored 5 by hand, the share scored 5.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from bench.real import GROUNDED_PATH, PARTS, RealDataError, jsonl_objects, load_real, split_of
from core.help_text import plain_doc
from core.verify_schema import VerifyRequest
from verifier_service.core import Verifier

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_PATH = DATA_DIR / "informativeness.jsonl"
ANNOTATIONS = DATA_DIR / "informativeness_annotations.txt"
MAIN_RECIPE_PATH = DATA_DIR / "main_recipe_answers.jsonl"
LEVELS = (1, 2, 3, 4, 5)


def source_answers() -> dict:
    """``{answer id: RealAnswer}`` of the replies the annotation file scores: the grounded set's 100 and
    ``main_recipe_answers.jsonl``'s 50 trained ones."""
    out = {a.id: a for a in load_real(GROUNDED_PATH)}
    for a in load_real(MAIN_RECIPE_PATH):
        if a.model == "trained":
            out.setdefault(a.id, a)
    return out


def parse_annotations(text: str) -> dict[str, list[tuple[int, str]]]:
    """``{answer id: [(level, fact text), ...]}``: blocks of ``@<id>`` then ``<1-5> <fact text>`` lines (``#``
    starts a comment line)."""
    out: dict[str, list[tuple[int, str]]] = {}
    cur: Optional[str] = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("@"):
            cur = line[1:].strip()
            if cur in out:
                raise RealDataError(f"informativeness annotations line {n}: answer {cur!r} scored twice")
            out[cur] = []
            continue
        if cur is None or len(line) < 3 or line[0] not in "12345" or line[1] != " ":
            raise RealDataError(f"informativeness annotations line {n}: expected '@<id>' or '<1-5> <fact text>', "
                                f"got {line!r}")
        out[cur].append((int(line[0]), line[2:]))
    return out


def build_records(answers: dict, annotations: dict[str, list[tuple[int, str]]]) -> list[dict]:
    """One record per scored fact, in annotation order. Each answer's scored facts must be its hand-cut facts,
    in order and word for word (:class:`RealDataError` names the answer and the fact otherwise)."""
    out = []
    for aid, scored in annotations.items():
        ans = answers.get(aid)
        if ans is None:
            raise RealDataError(f"informativeness annotations: answer {aid!r} is in neither labelled set")
        if [t for _, t in scored] != [f.text for f in ans.facts]:
            raise RealDataError(f"informativeness annotations: answer {aid!r}: the scored facts are not its "
                                f"hand-cut facts {[f.text for f in ans.facts]}")
        for k, ((level, _), f) in enumerate(zip(scored, ans.facts)):
            out.append({"id": f"{aid}:{k}", "answer_id": aid, "model": ans.model, "question": ans.question,
                        "gold": ans.gold, "start": f.start, "end": f.end, "text": f.text, "label": f.label,
                        "answer": f.answer, "level": level, "part": split_of(ans.question)})
    return out


def load_records(path: "str | Path" = DEFAULT_PATH) -> list[dict]:
    """The shipped records, checked: a bad line raises :class:`RealDataError` naming it and the field."""
    out = []
    for where, rec in jsonl_objects(path):
        for key, typ in (("answer_id", str), ("start", int), ("end", int), ("level", int), ("part", str)):
            if not isinstance(rec.get(key), typ):
                raise RealDataError(f"{where}: field {key!r} must be {typ.__name__}")
        if rec["level"] not in LEVELS or rec["part"] not in PARTS:
            raise RealDataError(f"{where}: 'level' must be 1-5 and 'part' one of {PARTS}")
        out.append(rec)
    return out


def predicted_level(start: int, end: int, statements: Sequence) -> int:
    """The informativeness of the statement overlapping ``[start, end)`` most (1 when none overlaps)."""
    best, level = 0, 1
    for st in statements:
        ov = min(st.end, end) - max(st.start, start)
        if ov > best:
            best, level = ov, st.informativeness
    return level


def agreement(pairs: Sequence[tuple[int, int]]) -> dict:
    """``pairs``: (hand level, verifier level). Exact, within-one, low kept low and answer found shares."""
    def share(hits, n):
        return hits / n if n else float("nan")
    low = [(h, p) for h, p in pairs if h <= 2]
    fives = [(h, p) for h, p in pairs if h == 5]
    return {"facts": len(pairs), "exact": share(sum(h == p for h, p in pairs), len(pairs)),
            "within_one": share(sum(abs(h - p) <= 1 for h, p in pairs), len(pairs)),
            "low_kept_low": share(sum(p <= 2 for _, p in low), len(low)), "low": len(low),
            "answer_found": share(sum(p == 5 for _, p in fives), len(fives)), "fives": len(fives)}


def run(path: "str | Path" = DEFAULT_PATH, cfg=None) -> list[dict]:
    """One row per part (and ``all``) of the verifier's agreement with the hand levels."""
    records = load_records(path)
    answers = source_answers()
    verifier = Verifier(cfg, backend="evidence")
    pred: dict[str, list] = {}
    for aid in dict.fromkeys(r["answer_id"] for r in records):
        a = answers[aid]
        res = verifier.verify(VerifyRequest(question=a.question, response=a.answer, materials=list(a.knowledge),
                                            gold_answer=a.gold))
        pred[aid] = res.statements()
    rows = []
    for part in PARTS + ("all",):
        pairs = [(r["level"], predicted_level(r["start"], r["end"], pred[r["answer_id"]]))
                 for r in records if part == "all" or r["part"] == part]
        rows.append({"part": part, **agreement(pairs)})
    return rows


def print_table(rows: list[dict], file=None) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title="Informativeness against the question: verifier (evidence, with gold) vs hand levels")
    for c in ("part", "facts", "exact", "within one", "hand 1-2 scored <= 2", "hand 5 scored 5"):
        t.add_column(c, justify="left" if c == "part" else "right")

    def pct(v):
        return "-" if v != v else f"{100 * v:.1f}%"
    for r in rows:
        t.add_row(r["part"], str(r["facts"]), pct(r["exact"]), pct(r["within_one"]),
                  f"{pct(r['low_kept_low'])} of {r['low']}", f"{pct(r['answer_found'])} of {r['fives']}")
    Console(file=file or sys.stdout, width=140).print(t)


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("informativeness", help="The verifier's informativeness vs hand levels (1-5, against the "
                        "question), on the tune and held-out parts.",
                        description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_PATH), metavar="PATH",
                   help=f"The hand-scored facts (default {DEFAULT_PATH.relative_to(DATA_DIR.parent.parent)}).")
    p.add_argument("--json", default=None, metavar="PATH", help="Also write the rows as JSON to PATH.")
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    try:
        rows = run(args.data)
    except (OSError, RealDataError) as e:
        print(f"--data {args.data}: {e}", file=sys.stderr)
        return 2
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _build_main(argv: Optional[list[str]] = None) -> int:
    """``python -m bench.informativeness [ANNOTATIONS OUT]``: rebuild the JSONL from the annotation file."""
    argv = sys.argv[1:] if argv is None else argv
    src = Path(argv[0]) if argv else ANNOTATIONS
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_PATH
    records = build_records(source_answers(), parse_annotations(src.read_text(encoding="utf-8")))
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    print(f"{len(records)} facts -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(_build_main())
