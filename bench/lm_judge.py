"""Can a small causal LM tell a passage-supported fact from an invented one? (issue 27: a learned judge)

For every hand-labelled fact of ``bench/data/real_answers.jsonl`` (tune part by default: the held-out third is
for reporting verifier versions, not for choosing one), the mean log-probability the model gives the fact's
tokens, continuing the answer's own text before it, under three contexts in the chat template's user turn:

- ``passage``: the passage and the question;
- ``passage+gold``: the same plus the gold answer;
- ``question``: the question alone.

The *likelihood gain* ``passage - question`` (and ``passage+gold - question``) should be high where the passage
states the fact and low where the model made it up. The bench prints, per prompt mode, how well each score
separates the facts labelled Correct from those labelled Wrong (AUROC: 0.5 is chance) and, among the facts the
evidence verifier mislabels (with / without gold), the same AUROC: a score worth adding to the rules must
separate the facts the rules get wrong. Then the log-prob is tried as a correction of the rules' labels, fit on
one tune half and scored on the other.

    python -m bench.lm_judge                        # the embedded SmolLM2-135M, the tune part (~9 min, 2 cores)
    python -m bench.lm_judge --model /models/judge --part heldout --limit 20
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from typing import Optional, Sequence

from bench.real import fact_label, load_real
from core.config import RLFHConfig
from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
from core.verify_schema import VerifyRequest
from evaluation.selectivity import auroc as mann_whitney
from verifier_service.core import Verifier


def auroc(pos: Sequence[float], neg: Sequence[float]) -> Optional[float]:
    """P(a random positive scores above a random negative), ties half (:func:`evaluation.selectivity.auroc`):
    ``None`` when either side is empty."""
    if not pos or not neg:
        return None
    return mann_whitney([*pos, *neg], [True] * len(pos) + [False] * len(neg))


def fact_logprob(model, tok, context: str, prefix: str, fact: str) -> float:
    """Mean log p(fact tokens | chat-templated ``context`` as the user turn, then ``prefix`` as the reply so far)."""
    import torch
    prompt = tok.apply_chat_template([{"role": "user", "content": context}], tokenize=False,
                                     add_generation_prompt=True) + prefix
    p_ids = tok(prompt, add_special_tokens=False).input_ids
    f_ids = tok(fact, add_special_tokens=False).input_ids
    ids = torch.tensor([p_ids + f_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    picked = logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]][len(p_ids) - 1:]
    return float(picked.mean())


def score_facts(model, tok, answers, verifier) -> list[dict]:
    """One row per fact: its label, prompt mode, the verifier's labels and the three log-probabilities."""
    from tqdm import tqdm
    rows = []
    for a in tqdm(answers, desc="facts", unit="answer", file=sys.stderr):
        rule = {gold: verifier.verify(VerifyRequest(question=a.question, response=a.answer,
                                                    materials=list(a.knowledge),
                                                    gold_answer=a.gold if gold else None)).statements()
                for gold in (False, True)}
        passage = " ".join(a.knowledge)
        contexts = {"passage": f"Passage: {passage}\nQuestion: {a.question}",
                    "passage+gold": f"Passage: {passage}\nQuestion: {a.question}\nCorrect answer: {a.gold}",
                    "question": f"Question: {a.question}"}
        for f in a.facts:
            lp = {k: fact_logprob(model, tok, c, a.answer[:f.start], a.answer[f.start:f.end])
                  for k, c in contexts.items()}
            rows.append({"id": a.id, "half": tune_half(a.question), "mode": a.mode, "label": f.label,
                         "rule": fact_label(f, rule[False]),
                         "rule_gold": fact_label(f, rule[True]), **lp})
    return rows


SCORES = {
    "gain (passage - question)": lambda r: r["passage"] - r["question"],
    "gain with gold (passage+gold - question)": lambda r: r["passage+gold"] - r["question"],
    "passage log-prob": lambda r: r["passage"],
}


def table(rows: list[dict]) -> list[dict]:
    """AUROC of each score for Correct vs Wrong facts: per mode, and among the facts the verifier mislabels."""
    out = []
    for name, fn in SCORES.items():
        line = {"score": name}
        for mode in ("closed", "evidence"):
            sel = [r for r in rows if r["mode"] == mode]
            line[mode] = auroc([fn(r) for r in sel if r["label"] == "Correct"],
                               [fn(r) for r in sel if r["label"] == "Wrong"])
        for key in ("rule", "rule_gold"):
            missed = [r for r in rows if r[key] != r["label"]]
            line[f"missed by {key}"] = auroc([fn(r) for r in missed if r["label"] == "Correct"],
                                             [fn(r) for r in missed if r["label"] == "Wrong"])
        out.append(line)
    return out


def tune_half(question: str) -> int:
    """The two halves the evidence verifier's rules were written on since evidence-1.17 (docs/EVALUATION.md)."""
    return int(hashlib.sha1(("tune-half/" + question).encode("utf-8")).hexdigest()[:8], 16) % 2


def relabelled_accuracy(rows: Sequence[dict], key: str, score: str, below: float, above: float) -> float:
    """Label accuracy when the verifier's ``key`` labels are corrected by ``score``: Correct -> Wrong where the
    score is below ``below``, Wrong -> Correct where it is above ``above``."""
    right = 0
    for r in rows:
        lab = r[key]
        if lab == "Correct" and r[score] < below:
            lab = "Wrong"
        elif lab == "Wrong" and r[score] > above:
            lab = "Correct"
        right += lab == r["label"]
    return right / len(rows) if rows else float("nan")


def half_split_correction(rows: Sequence[dict]) -> list[dict]:
    """Does a log-prob correction of the rules carry over? Both thresholds are fit (grid, best accuracy) on one
    tune half and applied to the other; the verifier's own accuracy on that half beside it."""
    grid = [x / 4 for x in range(-24, 1)]
    out = []
    for key, score in (("rule_gold", "passage+gold"), ("rule", "passage")):
        for fit in (0, 1):
            a = [r for r in rows if r["half"] == fit]
            b = [r for r in rows if r["half"] != fit]
            if not a or not b:
                continue
            _, lo, hi = max((relabelled_accuracy(a, key, score, lo, hi), lo, hi)
                            for lo in grid + [-1e9] for hi in grid + [1e9])
            out.append({"labels": key, "fit on half": fit, "below": lo, "above": hi,
                        "other half, rules": relabelled_accuracy(b, key, score, -1e9, 1e9),
                        "other half, corrected": relabelled_accuracy(b, key, score, lo, hi)})
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lm_judge", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="The judge: the embedded model's name or a Hugging Face model folder.")
    ap.add_argument("--part", choices=["tune", "heldout", "both"], default="tune",
                    help="Which part of the labelled set (default tune: the held-out third is not tuned on).")
    ap.add_argument("--limit", type=int, default=0, help="Only the first N answers of the part (0: all).")
    ap.add_argument("--json", metavar="OUT", help="Also write the per-fact rows and the table as JSON.")
    args = ap.parse_args(argv)
    if args.limit < 0:
        ap.error(f"--limit must be >= 0 (0: every answer), got {args.limit}")
    answers = [a for a in load_real() if args.part == "both" or a.part == args.part]
    answers = answers[:args.limit] if args.limit else answers
    try:
        path = resolve_model_path(args.model)
    except FileNotFoundError as e:
        ap.error(f"--model: {e}")
    tok, model = load_tokenizer(path), load_causal_lm(path, dtype="fp32", device="cpu").eval()
    t0 = time.perf_counter()
    rows = score_facts(model, tok, answers, Verifier(RLFHConfig.load(), backend="evidence"))
    lines = table(rows)
    n = {lab: sum(r["label"] == lab for r in rows) for lab in ("Correct", "Vague", "Wrong")}
    print(f"{args.model} on the {args.part} part: {len(answers)} answers, {len(rows)} facts {n}, "
          f"{time.perf_counter() - t0:.0f} s")
    print("AUROC, Correct vs Wrong facts (0.5 = chance):")
    cols = ["closed", "evidence", "missed by rule", "missed by rule_gold"]
    print(f"  {'score':44s}" + "".join(f"{c:>22s}" for c in cols))
    for line in lines:
        print(f"  {line['score']:44s}" + "".join(
            f"{'-' if line[c] is None else format(line[c], '.3f'):>22s}" for c in cols))
    halves = half_split_correction(rows)
    if halves:
        print("the rules corrected by the log-prob (thresholds fit on one tune half, label accuracy on the other):")
        for h in halves:
            print(f"  {h['labels']:9s} fit on half {h['fit on half']} (Correct->Wrong below {h['below']:g}, "
                  f"Wrong->Correct above {h['above']:g}): {100 * h['other half, rules']:.1f}% -> "
                  f"{100 * h['other half, corrected']:.1f}%")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "table": lines, "halves": halves}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
