"""`rlfh bench verifier`: how well does the verifier tell right answers from hallucinated ones?

Data: the HaluEval-QA split (``core.data.load_halueval(split)``; test = 1,504 items).

Columns
  (a) original pairs - every item gives two responses, ``right_answer`` and ``hallucinated_answer``,
      verified against the item's ``knowledge``. A response is *predicted hallucinated* when any of its
      statements is labelled ``Wrong`` or ``Hedged wrong``. Reported: accuracy over all 2N responses, and
      precision / recall of the "hallucinated" class. Caveat: right answers are short (2 words on average)
      and hallucinated ones are sentences (11 words), so length alone scores ~92% here.
  (b) entity-swap pairs - both responses use the same template ``The answer is X.``: X is the right answer,
      or another entity taken from the same knowledge (deterministic choice, see :func:`swap_entity`).
      Pairwise accuracy: is the right response scored higher? Ties count as half.
      Verifier score of a response = mean over its statements of the signed confidence
      (+confidence for Correct / Hedged correct, -confidence for Wrong / Hedged wrong, 0 for Vague;
      0 when there are no statements).

      Also the *reward* view of (b), as ``/get_reward`` sees it: the response's scalar reward from the
      reward service's own :func:`reward_service.token_rewards.compute_token_rewards` with the configured
      reward settings (labels, informativeness, and confidences as far as TRUTH_CONFIDENCE weighs them in),
      pairwise accuracy and ties (two equal rewards).
  (c) long-form answers - multi-sentence responses built from the item's passages (supported, entity /
      number / date swapped, hedged versions of both, filler, an answer sentence), every statement with a
      known label and span (construction and metrics: :mod:`bench.longform`): statement accuracy, precision /
      recall per label, span cover / IoU, per-token reward-sign agreement, ms per response.

Rows: length-only rule, lexical-support rule, question-word proximity rule ((b) baseline), the
``evidence`` backend without and with the gold answer, and the ``llm`` backend without and with the gold
answer when ``MODEL_URL`` is set (on the first ``--llm-limit`` items only: a CPU judge is slow). Any
OpenAI-compatible judge gets its rows with ``--model-url URL --annotate-model NAME --model-api-key KEY``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable, Optional

from bench import longform as LF
from bench import real as R
from bench.longform import LongformScore, swap_entity
from bench.real import DEFAULT_PATH
from core.config import RLFHConfig, positive_int
from core.data import load_halueval
from core.help_text import plain_doc
from core.verify_schema import BAD_LABELS, GOOD_LABELS, VerifyRequest
from verifier_service import text as T
from verifier_service.core import Verifier
from verifier_service.evidence import _TEMPLATE_RE

ROW_LENGTH = "(1) length-only rule"
ROW_LEXICAL = "(2) lexical-support rule"
ROW_PROX = "(b-baseline) q-word proximity"
ROW_EV_NOGOLD = "(3) evidence, no gold"
ROW_EV_GOLD = "(4) evidence, with gold"
ROW_LLM = "(6) llm (MODEL_URL), with gold"
ROW_LLM_NOGOLD = "(5) llm (MODEL_URL), no gold"


# ----------------------------------------------------------------------------- pair construction

def template(x: str) -> str:
    x = x.strip().rstrip(".")
    return f"The answer is {x}."


# ----------------------------------------------------------------------------- scoring rules

def rule_length(question: str, response: str, knowledge: list[str]) -> float:
    """Score = -1 when the response has more than 5 words (predicted hallucinated), else +1."""
    return -1.0 if len(response.split()) > 5 else 1.0


def rule_lexical(question: str, response: str, knowledge: list[str]) -> float:
    """Score = share of the response's content words (not in the question) found in the knowledge, minus 0.8.

    Predicted hallucinated when fewer than 80% of those words are in the knowledge (score < 0).
    """
    kv = set(T.content_words(" ".join(knowledge)))
    qv = set(T.content_words(question))
    ws = [w for w in T.content_words(response) if w not in qv and w not in ("answer",)]
    if not ws:
        return 0.2
    return sum(1 for w in ws if w in kv) / len(ws) - 0.8


def rule_proximity(question: str, response: str, knowledge: list[str]) -> float:
    """(b) baseline: X scores higher the closer it occurs to a question word in the knowledge.

    Score = 1 / (1 + the smallest word distance between an occurrence of X and a question content word).
    """
    m = _TEMPLATE_RE.match(response)
    x = m.group("x") if m else response
    xs = T.normalize(x).split()
    qw = {w for w in T.normalize(question).split() if w not in T.STOPWORDS}
    best = 0.0
    if not xs:
        return 0.0
    for p in knowledge:
        ws = T.normalize(p).split()
        qpos = [i for i, w in enumerate(ws) if w in qw and w not in xs]
        for i in range(len(ws) - len(xs) + 1):
            if ws[i:i + len(xs)] == xs and qpos:
                d = min(abs(j - i) for j in qpos)
                best = max(best, 1.0 / (1.0 + d))
    return best


def verifier_score(res) -> float:
    """Mean signed confidence of the statements (see the module docstring)."""
    sts = res.statements()
    if not sts:
        return 0.0
    tot = 0.0
    for s in sts:
        if s.label in GOOD_LABELS:
            tot += s.confidence
        elif s.label in BAD_LABELS:
            tot -= s.confidence
    return tot / len(sts)


def verifier_flags(res) -> bool:
    return any(s.label in BAD_LABELS for s in res.statements())


# ----------------------------------------------------------------------------- evaluation

class Row:
    def __init__(self, name: str):
        self.name = name
        self.tp = self.fp = self.tn = self.fn = 0
        self.pairs = 0.0
        self.n_pairs = 0
        self.ties = 0
        self.note = ""
        self.seconds = 0.0
        self.n_verified = 0
        self.labels: dict[str, int] = {}
        self.a_done = False
        self.b_done = False
        self.rw_pairs = 0.0
        self.rw_ties = 0
        self.rw_n = 0

    def add_a(self, pred_halluc: bool, is_halluc: bool):
        self.a_done = True
        if pred_halluc and is_halluc:
            self.tp += 1
        elif pred_halluc:
            self.fp += 1
        elif is_halluc:
            self.fn += 1
        else:
            self.tn += 1

    def add_b(self, s_right: float, s_wrong: float):
        self.b_done = True
        self.n_pairs += 1
        if s_right > s_wrong:
            self.pairs += 1
        elif s_right == s_wrong:
            self.pairs += 0.5
            self.ties += 1

    def add_b_reward(self, r_right: float, r_wrong: float):
        self.rw_n += 1
        if r_right > r_wrong + 1e-9:
            self.rw_pairs += 1
        elif abs(r_right - r_wrong) <= 1e-9:
            self.rw_pairs += 0.5
            self.rw_ties += 1

    def metrics(self) -> dict:
        n = self.tp + self.fp + self.tn + self.fn
        out = {"row": self.name, "note": self.note}
        if self.a_done and n:
            out["a_accuracy"] = (self.tp + self.tn) / n
            out["a_precision"] = self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0
            out["a_recall"] = self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0
            out["a_n"] = n
        if self.b_done and self.n_pairs:
            out["b_pairwise"] = self.pairs / self.n_pairs
            out["b_ties"] = self.ties
            out["b_n"] = self.n_pairs
        if self.rw_n:
            out["b_reward_pairwise"] = self.rw_pairs / self.rw_n
            out["b_reward_ties"] = self.rw_ties / self.rw_n
        if self.n_verified:
            out["ms_per_response"] = 1000.0 * self.seconds / self.n_verified
            out["labels"] = self.labels
        return out


def _rule_row(name: str, fn: Callable, items, pairs, do_a: bool = True) -> Row:
    row = Row(name)
    for it in items if do_a else []:
        row.add_a(fn(it.question, it.right_answer, it.knowledge) < 0, False)
        row.add_a(fn(it.question, it.hallucinated_answer, it.knowledge) < 0, True)
    for it, distractor in pairs:
        row.add_b(fn(it.question, template(it.right_answer), it.knowledge),
                  fn(it.question, template(distractor), it.knowledge))
    return row


def reward_of(res, text: str, settings) -> float:
    """The scalar reward ``/get_reward`` gives this verified response (the whole response as one token)."""
    from reward_service.token_rewards import compute_token_rewards   # imports numpy
    n = len(text)
    return compute_token_rewards(res, [[0, n]], n, settings).score


def _verifier_row(name: str, verifier, items, pairs, use_gold: bool, progress, batch: int = 16,
                  settings=None) -> Row:
    row = Row(name)
    reqs, kinds = [], []
    for it in items:
        gold = it.right_answer if use_gold else None
        reqs.append(VerifyRequest(question=it.question, response=it.right_answer, materials=it.knowledge,
                                  gold_answer=gold))
        kinds.append(("a", False))
        reqs.append(VerifyRequest(question=it.question, response=it.hallucinated_answer, materials=it.knowledge,
                                  gold_answer=gold))
        kinds.append(("a", True))
    for it, distractor in pairs:
        gold = it.right_answer if use_gold else None
        for resp in (template(it.right_answer), template(distractor)):
            reqs.append(VerifyRequest(question=it.question, response=resp, materials=it.knowledge,
                                      gold_answer=gold))
            kinds.append(("b", None))
    task = progress.add_task(name, total=len(reqs))
    results = []
    for i in range(0, len(reqs), batch):
        t0 = time.perf_counter()
        results.extend(verifier.verify_many(reqs[i:i + batch]))
        row.seconds += time.perf_counter() - t0
        progress.advance(task, len(reqs[i:i + batch]))
    row.n_verified = len(results)
    b_scores, b_rewards = [], []
    for (kind, halluc), res, rq in zip(kinds, results, reqs):
        for lab, c in res.label_counts().items():
            row.labels[lab] = row.labels.get(lab, 0) + c
        if kind == "a":
            row.add_a(verifier_flags(res), halluc)
        else:
            b_scores.append(verifier_score(res))
            if settings is not None:
                b_rewards.append(reward_of(res, rq.response, settings))
    for j in range(0, len(b_scores), 2):
        row.add_b(b_scores[j], b_scores[j + 1])
    for j in range(0, len(b_rewards), 2):
        row.add_b_reward(b_rewards[j], b_rewards[j + 1])
    return row


def run_bench(split: str = "test", limit: Optional[int] = None, with_llm: bool = True, cfg=None,
              quiet: bool = False, longform: bool = True, llm_limit: int = 20,
              out: Optional[dict] = None, llm_sets: str = "abc", llm_gold: str = "both") -> list[dict]:
    """Rows of the (a)/(b) table (returned); the long-form rows go to ``out["longform"]`` when ``out`` is given.

    The rule baselines, then the evidence backend without and with the gold answer, then the LLM judge (when
    ``with_llm`` and a model URL, on the first ``llm_limit`` items: :func:`_llm_rows`) or its rows with a note
    saying why not."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from reward_service.token_rewards import RewardSettings   # imports numpy

    cfg = cfg or RLFHConfig.load()
    settings = RewardSettings.from_config(cfg)
    items, pairs, long_rs = _bench_items(split, limit, longform)
    console = Console(stderr=True, quiet=quiet)
    console.print(f"[bold]HaluEval-QA {split}[/]: {len(items)} items -> {2 * len(items)} responses for (a); "
                  f"{len(pairs)} entity-swap pairs for (b) ({len(items) - len(pairs)} items had no distractor)"
                  + (f"; {len(long_rs)} long answers, {sum(len(r.statements) for r in long_rs)} statements "
                     "for (c)" if longform else ""))
    rows = [
        _rule_row(ROW_LENGTH, rule_length, items, pairs),
        _rule_row(ROW_LEXICAL, rule_lexical, items, pairs),
        _rule_row(ROW_PROX, rule_proximity, items, pairs, do_a=False),
    ]
    lrows: list[dict] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        ev = Verifier(cfg, backend="evidence")
        rows.append(_verifier_row(ROW_EV_NOGOLD, ev, items, pairs, use_gold=False, progress=progress,
                                  settings=settings))
        rows.append(_verifier_row(ROW_EV_GOLD, ev, items, pairs, use_gold=True, progress=progress,
                                  settings=settings))
        if longform:
            lrows.append(LF.score_verifier(ROW_EV_NOGOLD, ev, long_rs, False, progress).metrics())
            lrows.append(LF.score_verifier(ROW_EV_GOLD, ev, long_rs, True, progress).metrics())
        if with_llm and cfg.model_url:
            llm = Verifier(cfg, backend="llm")
            more, more_long = _llm_rows(llm, items, pairs, progress, settings, longform=longform,
                                        llm_limit=llm_limit, llm_sets=llm_sets, llm_gold=llm_gold)
        else:
            note = "not configured (set MODEL_URL / --model-url)" if not cfg.model_url else "skipped (--no-llm)"
            more, more_long = _noted_rows((ROW_LLM_NOGOLD, ROW_LLM), note, longform)
        rows += more
        lrows += more_long
    if out is not None:
        out["longform"] = lrows
        out["longform_n"] = {"responses": len(long_rs), "statements": sum(len(r.statements) for r in long_rs)}
    return [r.metrics() for r in rows]


def _bench_items(split: str, limit: Optional[int], longform: bool) -> tuple[list, list, list]:
    """``(items, pairs, long answers)``: the split's first ``limit`` HaluEval-QA items with a right and a
    hallucinated answer (a), each with its entity-swap distractor where one exists (b), and the long answers
    built from them (c; none without ``longform``)."""
    items = load_halueval(split)
    if limit:
        items = items[:limit]
    items = [it for it in items if it.right_answer and it.hallucinated_answer]
    pairs = [(it, d) for it in items if (d := swap_entity(it)) is not None]
    long_rs = LF.build_longform(items) if longform else []
    return items, pairs, long_rs


def _noted_rows(names, note: str, longform: bool) -> tuple[list[Row], list[dict]]:
    """Empty rows named ``names`` carrying ``note`` (why they were not measured), and their long-form rows."""
    rows, lrows = [], []
    for name in names:
        r = Row(name)
        r.note = note
        rows.append(r)
        if longform:
            lrows.append({"row": name, "note": note})
    return rows, lrows


def _llm_rows(llm, items, pairs, progress, settings, *, longform: bool, llm_limit: int, llm_sets: str,
              llm_gold: str) -> tuple[list[Row], list[dict]]:
    """The LLM judge's rows without and with the gold answer, on the first ``llm_limit`` items: the sets of
    ``llm_sets`` (a, b: the table; c: long form) for the gold settings ``llm_gold`` picks (both / with /
    without), the others noted as skipped."""
    l_items = items[:llm_limit]
    l_pairs = [(it, d) for it, d in pairs if any(it is x for x in l_items)]
    l_long = LF.build_longform(l_items) if longform else []
    rows: list[Row] = []
    lrows: list[dict] = []
    for name, gold in ((ROW_LLM_NOGOLD, False), (ROW_LLM, True)):
        if llm_gold != "both" and (llm_gold == "with") != gold:
            more, more_long = _noted_rows((name,), f"skipped (--llm-gold {llm_gold})", longform)
            rows += more
            lrows += more_long
            continue
        if "a" in llm_sets or "b" in llm_sets:
            r = _verifier_row(name, llm, l_items if "a" in llm_sets else [],
                              l_pairs if "b" in llm_sets else [], use_gold=gold, progress=progress,
                              batch=4, settings=settings)
            r.note = f"first {len(l_items)} items"
        else:
            r = Row(name)
            r.note = "skipped (--llm-sets)"
        rows.append(r)
        if longform:
            if "c" in llm_sets:
                sc = LF.score_verifier(name, llm, l_long, gold, progress, batch=4)
                sc.note = f"first {len(l_items)} items"
                lrows.append(sc.metrics())
            else:
                lrows.append({"row": name, "note": "skipped (--llm-sets)"})
    return rows, lrows


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def print_table(metrics: list[dict], split: str, file=None) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Verifier on HaluEval-QA {split}: (a) original pairs, (b) entity-swap pairs",
              caption="(a): predicted hallucinated = any Wrong/Hedged wrong statement. (b): pairwise accuracy of "
                      "score(right) > score(distractor), ties = 1/2; score = mean signed statement confidence. "
                      "(b) reward: the same pairs ranked by the /get_reward scalar reward (labels + "
                      "informativeness, confidences weighed in by TRUTH_CONFIDENCE), ties = equal rewards.")
    t.add_column("row")
    for c in ("(a) acc", "(a) prec", "(a) rec", "(b) pairwise", "(b) ties", "(b) reward pairwise",
              "(b) reward ties", "ms/resp"):
        t.add_column(c, justify="right")
    for m in metrics:
        def f(k, pct=True):
            v = m.get(k)
            if v is None:
                return "-"
            return f"{100 * v:.1f}%" if pct else (f"{v:.2f}" if isinstance(v, float) else str(v))
        if m.get("note") and "a_accuracy" not in m and "b_pairwise" not in m:
            t.add_row(m["row"], m["note"], "", "", "", "", "", "", "")
            continue
        name = m["row"] + (f" [{m['note']}]" if m.get("note") else "")
        t.add_row(name, f("a_accuracy"), f("a_precision"), f("a_recall"), f("b_pairwise"),
                  f("b_ties", False), f("b_reward_pairwise"), f("b_reward_ties"), f("ms_per_response", False))
    con = Console(file=file, width=max(150, Console(file=file).width))
    con.print(t)
    con.print("(1) hallucinated if the answer has more than 5 words; (2) hallucinated if under 80% of the answer's "
              "content words (outside the question) occur in the knowledge; (b-baseline) X scores higher the closer "
              "it occurs to a question word in the knowledge; (3)/(4) the evidence backend without/with the gold "
              "answer; (5)/(6) the llm backend on MODEL_URL without/with the gold answer.")


def print_longform_table(lrows: list[dict], split: str, n: Optional[dict] = None, file=None) -> None:
    from rich.console import Console
    from rich.table import Table

    sub = f" ({n['responses']} answers, {n['statements']} statements)" if n else ""
    t = Table(title=f"(c) Verifier on long-form answers built from HaluEval-QA {split}{sub}",
              caption="acc: exact label of each true statement (its overlapping predicted statements pooled: a bad "
                      "label wins, then a good one, else Vague); sign acc: good/vague/bad agree; P/R per label; "
                      "span cover: share of each true span's characters covered by the predicted statements; "
                      "IoU: against their union; tok sign: per-token FSPO reward sign agrees (tokens inside true "
                      "statements).")
    t.add_column("row")
    for c in ("acc", "sign acc") + tuple(f"{lb} P/R" for lb in LongformScore.LABELS) + (
            "span cover", "span IoU", "tok sign", "ms/resp"):
        t.add_column(c, justify="right")
    for m in lrows:
        if "accuracy" not in m:
            t.add_row(m["row"], m.get("note", ""), *[""] * 10)
            continue
        pl = m["per_label"]
        cells = [f"{_pct(pl[lb]['precision'])}/{_pct(pl[lb]['recall'])}" for lb in LongformScore.LABELS]
        name = m["row"] + (f" [{m['note']}]" if m.get("note") else "")
        t.add_row(name, _pct(m["accuracy"]), _pct(m["sign_accuracy"]), *cells, _pct(m["span_cover"]),
                  _pct(m["span_iou"]), _pct(m["token_sign_agreement"]), f"{m.get('ms_per_response', 0):.2f}")
    con = Console(file=file, width=max(200, Console(file=file).width))
    con.print(t)
    kinds = [m for m in lrows if "by_kind" in m]
    if kinds:
        con.print("accuracy by statement kind: " + "; ".join(
            m["row"] + ": " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(m["by_kind"].items()))
            for m in kinds))


def _run_real(args: argparse.Namespace, cfg) -> int:
    """``--real``: the hand-labelled real answers (:mod:`bench.real`) instead of the HaluEval tables."""
    parts = R.PARTS if args.real_part == "both" else (args.real_part,)
    try:
        rows = R.run_real(args.real, parts=parts, cfg=cfg, with_llm=not args.no_llm, llm_limit=args.llm_limit)
    except (R.RealDataError, FileNotFoundError) as e:
        print(f"--real {args.real}: {e}", file=sys.stderr)
        return 2
    R.print_real_table(rows, args.real)
    if args.by_model:
        by_model = R.run_by_model(args.real, cfg=cfg)
        R.print_by_model_table(by_model, args.real)
        rows = rows + [{"table": "by_model", **r} for r in by_model]
    print("Timings: measured on this machine as it is (on a shared machine they vary with load).")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"real": str(args.real), "parts": list(parts), "rows": rows}, fh, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    cfg = RLFHConfig.from_args(args)
    if args.by_model and not args.real:
        print("--by-model needs --real (the hand-labelled answers whose figures it prints per model): add --real "
              "PATH, e.g. --real bench/data/grounded_answers.jsonl", file=sys.stderr)
        return 2
    if args.real:
        return _run_real(args, cfg)
    extra: dict = {}
    metrics = run_bench(split=args.split, limit=args.limit, with_llm=not args.no_llm, cfg=cfg,
                        longform=not args.no_longform, llm_limit=args.llm_limit, out=extra,
                        llm_sets=args.llm_sets, llm_gold=args.llm_gold)
    print_table(metrics, args.split)
    if not args.no_longform:
        print_longform_table(extra["longform"], args.split, extra.get("longform_n"))
    print("Timings: measured on this machine as it is (on a shared machine they vary with load).")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"split": args.split, "limit": args.limit, "rows": metrics,
                       "longform": extra.get("longform", []), "longform_n": extra.get("longform_n")}, fh, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def _sets(v: str) -> str:
    v = v.strip().lower().replace(",", "")
    if not v or set(v) - set("abc"):
        raise argparse.ArgumentTypeError(f"--llm-sets {v!r}: use letters from a, b, c (e.g. 'c' or 'abc')")
    return v


def add_parser(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser(
        "verifier", help="Verifier accuracy on HaluEval-QA (original pairs, entity-swap pairs, long-form answers).",
        description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="test", choices=["train", "dev", "test"],
                   help="HaluEval-QA split to evaluate (default: test, 1,504 items; tune on dev).")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help="Use only the first N items of the split (default: all).")
    p.add_argument("--json", default=None, metavar="OUT",
                   help="Also write the metrics (per row: accuracy, precision, recall, pairwise, ties, label "
                        "counts, ms/response; long-form rows under 'longform') to this JSON file.")
    p.add_argument("--no-llm", action="store_true",
                   help="Skip the llm-backend rows even when MODEL_URL is configured.")
    p.add_argument("--llm-limit", type=positive_int, default=20, metavar="N",
                   help="The llm rows use only the first N items (default 20: a judge on CPU takes seconds per "
                        "call; raise it for a GPU endpoint).")
    p.add_argument("--llm-sets", default="abc", type=_sets, metavar="SETS",
                   help="Which sets the llm rows run: any of a (original pairs), b (entity-swap pairs), c (long "
                        "form), e.g. 'c' (default: abc).")
    p.add_argument("--llm-gold", default="both", choices=["both", "with", "without"],
                   help="llm rows with the gold answer, without it, or both (default).")
    p.add_argument("--no-longform", action="store_true",
                   help="Skip the (c) long-form table.")
    p.add_argument("--real", nargs="?", const=str(DEFAULT_PATH), default=None, metavar="PATH",
                   help="Score the verifier on answers the policy really wrote, labelled fact by fact by hand "
                        f"(default set: {DEFAULT_PATH.relative_to(DEFAULT_PATH.parents[2])}; guide: "
                        "bench/data/REAL_ANSWERS_GUIDE.md): span precision / recall / F1, label accuracy per "
                        "label, the answer fact's label against the gold grader, per-token reward sign agreement, "
                        "ms per answer; each backend without and with the gold answer. Replaces the HaluEval "
                        "tables.")
    p.add_argument("--real-part", default="both", choices=["both", "tune", "heldout"],
                   help="With --real: which part of the labelled set (heldout: the third kept out of all tuning, "
                        "by a hash of the question; default: both, as separate rows).")
    p.add_argument("--by-model", action="store_true",
                   help="With --real: also the statement figures of each model's answers (statements and supported "
                        "statements per answer, fact precision), from the hand labels and from the evidence "
                        "verifier on the same answers: whether a gain the verifier reports is confirmed by hand "
                        "(bench/data/grounded_answers.jsonl: 50 held-out answers of the full-size grounded "
                        "recipe's base and trained model each; main_recipe_answers.jsonl: the same for `make "
                        "train`'s recipe).")
    # the rows are fixed (evidence without / with gold, llm when MODEL_URL is set): no backend choice
    RLFHConfig.add_cli_args(p, groups={"verifier"}, exclude=("verifier_backend",))
    p.set_defaults(func=_run)
