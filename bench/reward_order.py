"""`rlfh bench reward-order`: does a reward put a group's replies in the order a careful reader does?

Group estimators (GRPO, RLOO) learn exactly the order a reward puts the replies to one prompt in. This bench
scores reward settings by their pairwise agreement with hand preferences on the policy's own groups.

Data: a JSONL file of pairs, one object per line, that a user can write for their own data::

    {"question": "...", "passage": "..." or ["...", ...], "gold": "...",
     "reply_a": "...", "reply_b": "...", "preference": "a" | "b" | "tie", "part": "tune" | "heldout"}

(``part`` is optional: without it a pair's part is ``bench.real.split_of(question)``, a stable third of the
questions held out.) The shipped set, ``bench/data/reward_pairs.jsonl``, holds every pair of the 82 hand-ranked
groups of 4 replies in ``bench/data/reward_groups.jsonl``: the grounded recipe's rollouts (temperature 0.7) of the
base model, the warm start, and RL policies at the recipe's learning rate and at 4x (the copying run). The hand
ranking, blind to every reward, follows ``bench/data/REWARD_ORDER_GUIDE.md``; its source is
``bench/data/reward_pairs_annotations.txt`` (``python -m bench.reward_order`` rebuilds the pairs from it).

A reward variant is a set of settings, read exactly as training reads them (``RLFHConfig``: environment
variable names, e.g. ``REWARD_FORMULA``, ``VERIFICATION_MAP``, ``TOKEN_REWARD_WEIGHT``, ``OUTCOME_REWARD``,
``GRADE_SCOPE``). A reply's reward is what the trainer sums before the KL term: the verifier's label of every
statement (``VERIFIER_BACKEND``, with the passage and the gold answer, as the reward service asks it), the
reward service's token rewards (:func:`reward_service.token_rewards.compute_token_rewards`) times
``TOKEN_REWARD_WEIGHT``, plus the ternary outcome of the graded part (``core_algos.ternary_outcome_rewards``)
when ``OUTCOME_REWARD=ternary``. Agreement = (pairs the reward orders as the reader did + half the pairs it ties)
/ pairs the reader preferred one reply in (the reader's ties are left out). Figures per part; the held-out part
is never read while writing rules.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from bench.real import PARTS, RealDataError, jsonl_objects, split_of
from core.config import ConfigError, RLFHConfig
from core.grader import NOT_ATTEMPTED, grade_answer
from core.help_text import plain_doc
from core.reward_settings import RewardSettings
from core.verify_schema import VerifyRequest
from verifier_service.core import Verifier

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_PATH = DATA_DIR / "reward_pairs.jsonl"
GROUPS_PATH = DATA_DIR / "reward_groups.jsonl"
ANNOTATIONS = DATA_DIR / "reward_pairs_annotations.txt"
PREFERENCES = ("a", "b", "tie")
TIE_EPS = 1e-9

# The grounded recipe's settings that a reward reads (recipes/grounded.toml): every variant starts from them.
RECIPE = {"GRADE_SCOPE": "first-sentence", "TOKEN_REWARD_WEIGHT": "1", "OUTCOME_REWARD": "ternary",
          "OUTCOME_GRADER": "gold", "VERIFIER_BACKEND": "evidence", "GRANULARITY": "token"}
# The RLFH authors' example launch maps, in their launch script's own spelling
AUTHORS = {"VERIFICATION_MAP": "{'Correct':0.45,'Hedged correct':0.35,'Vague':-1,'Hedged wrong':-1.5,'Wrong':-1.7}",
           "INFORMATIVE_MAP": "{'5':1.25,'4':1,'3':0.75,'2':0.1,'1':-0.2}", "INFO_WEIGHT": "1.2",
           "REWARD_EPSILON": "-0.9", "REWARD_MU": "1", "TRUTH_CONFIDENCE": "0"}
#: The variants the bench prints by default: name -> settings over RECIPE.
VARIANTS: dict[str, dict[str, str]] = {
    "default (additive, Wrong -2; token + outcome)": {},
    "the maps before (Wrong -1; token + outcome)": {"VERIFICATION_MAP": '{"Wrong": -1, "Hedged wrong": -0.5}'},
    "paper formula, authors' maps (token only)": {**AUTHORS, "REWARD_FORMULA": "paper", "OUTCOME_REWARD": "none"},
    "paper formula, authors' maps + outcome": {**AUTHORS, "REWARD_FORMULA": "paper"},
    "response-level + outcome": {"GRANULARITY": "response"},
    "outcome only": {"TOKEN_REWARD_WEIGHT": "0"},
    "token only": {"OUTCOME_REWARD": "none"},
}


@dataclass(frozen=True)
class Pair:
    question: str
    passage: tuple
    gold: str
    reply_a: str
    reply_b: str
    preference: str
    part: str
    source: str = ""


def load_pairs(path: "str | Path" = DEFAULT_PATH) -> list[Pair]:
    """The pairs of a JSONL file, checked: a bad line raises :class:`RealDataError` naming the line and field."""
    out = []
    for where, obj in jsonl_objects(path):
        for key in ("question", "gold", "reply_a", "reply_b"):
            if not isinstance(obj.get(key), str) or (key in ("question", "gold") and not obj[key]):
                raise RealDataError(f"{where}: field {key!r} must be a non-empty string")
        passage = obj.get("passage", [])
        passage = [passage] if isinstance(passage, str) else passage
        if not isinstance(passage, list) or not all(isinstance(p, str) for p in passage):
            raise RealDataError(f"{where}: field 'passage' must be a string or a list of strings")
        if obj.get("preference") not in PREFERENCES:
            raise RealDataError(f"{where}: field 'preference' must be one of {PREFERENCES}, "
                                f"got {obj.get('preference')!r}")
        part = obj.get("part") or split_of(obj["question"])
        if part not in PARTS:
            raise RealDataError(f"{where}: field 'part' must be one of {PARTS}, got {part!r}")
        out.append(Pair(obj["question"], tuple(passage), obj["gold"], obj["reply_a"], obj["reply_b"],
                        obj["preference"], part, str(obj.get("source", ""))))
    return out


# ----------------------------------------------------------------------------- rewards of replies

_TOKEN = re.compile(r"\w+|[^\w\s]")


def word_offsets(text: str) -> list[tuple[int, int]]:
    """Word and punctuation tokens of ``text`` with an end-of-sequence token: the reward's sum over a reply does
    not depend on how it is tokenized, only the per-token clip could."""
    return [(m.start(), m.end()) for m in _TOKEN.finditer(text)] + [(len(text), len(text))]


class RewardOfReply:
    """The trainer's reward of one reply under one variant's settings (verifier results are shared across
    variants with the same backend: the settings after the verifier are pure)."""

    def __init__(self, settings: dict[str, str]):
        self.cfg = RLFHConfig.load(environ={**RECIPE, **settings})
        self.reward = RewardSettings.from_config(self.cfg)
        # every pair comes with its passage: the evidence mode's abstention price where one is set
        evidence_price = self.cfg.abstain_outcome_reward_evidence
        self.abstain = self.cfg.abstain_outcome_reward if evidence_price is None else evidence_price

    def __call__(self, reply: str, pair: Pair, result) -> float:
        import torch

        from core import core_algos   # torch and numpy: kept lazy, this module is on `rlfh --help`'s import path
        from reward_service.token_rewards import compute_token_rewards
        cfg = self.cfg
        total = 0.0
        if cfg.token_reward_weight:
            item = compute_token_rewards(result, word_offsets(reply), len(reply), self.reward)
            total += cfg.token_reward_weight * item.score
        if cfg.outcome_reward == "ternary":
            g = grade_answer(reply, pair.gold, pair.question, scope=cfg.grade_scope)
            out = core_algos.ternary_outcome_rewards(
                torch.tensor([g.grade == "correct"]), torch.tensor([g.grade == NOT_ATTEMPTED]),
                correct=cfg.outcome_correct, wrong=cfg.outcome_wrong, abstain=self.abstain)
            total += float(out[0])
        return total


def verify_all(pairs: Sequence[Pair], backend: str = "evidence") -> dict[tuple[str, str], object]:
    """``{(question, reply): VerifyResult}`` for every reply of ``pairs``, verified once with passage and gold."""
    verifier = Verifier(RLFHConfig.load(environ=RECIPE), backend=backend)
    out = {}
    for p in pairs:
        for reply in (p.reply_a, p.reply_b):
            key = (p.question, reply)
            if key not in out:
                out[key] = verifier.verify(VerifyRequest(question=p.question, response=reply,
                                                         materials=list(p.passage), gold_answer=p.gold))
    return out


def agreement(scored: Sequence[tuple[str, float, float]]) -> tuple[float, int, int]:
    """``scored``: (hand preference, reward of a, reward of b). ``(agreement, pairs with a preference, reward ties
    among them)``; a reward tie counts half."""
    pref = [(h, ra, rb) for h, ra, rb in scored if h != "tie"]
    if not pref:
        return float("nan"), 0, 0
    hits = ties = 0
    for h, ra, rb in pref:
        if abs(ra - rb) <= TIE_EPS:
            ties += 1
        elif (ra > rb) == (h == "a"):
            hits += 1
    return (hits + 0.5 * ties) / len(pref), len(pref), ties


def run(path: "str | Path" = DEFAULT_PATH, variants: Optional[dict[str, dict[str, str]]] = None) -> list[dict]:
    """One row per variant and part: agreement, pairs, reward ties."""
    pairs = load_pairs(path)
    variants = VARIANTS if variants is None else variants
    rewards = {name: RewardOfReply(settings) for name, settings in variants.items()}
    results: dict[str, dict] = {}
    rows = []
    for name, fn in rewards.items():
        backend = fn.cfg.verifier_backend
        if backend not in results:
            results[backend] = verify_all(pairs, backend)
        res = results[backend]
        scored = [(p, fn(p.reply_a, p, res[(p.question, p.reply_a)]), fn(p.reply_b, p, res[(p.question, p.reply_b)]))
                  for p in pairs]
        for part in PARTS + ("all",):
            sub = [(p.preference, ra, rb) for p, ra, rb in scored if part == "all" or p.part == part]
            agree, n, ties = agreement(sub)
            rows.append({"variant": name, "part": part, "agreement": agree, "pairs": n, "reward_ties": ties,
                         "settings": variants[name]})
    return rows


def print_table(rows: list[dict], path: "str | Path", file=None) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"Reward order vs hand preferences ({path}): pairwise agreement, a reward tie counts half")
    for c in ("variant", "tune", "held-out", "all", "pairs (tune / held-out)", "reward ties (held-out)"):
        t.add_column(c, justify="left" if c == "variant" else "right")
    by = {(r["variant"], r["part"]): r for r in rows}
    for name in dict.fromkeys(r["variant"] for r in rows):
        tune, held, every = by[(name, "tune")], by[(name, "heldout")], by[(name, "all")]

        def pct(r):
            return "-" if r["agreement"] != r["agreement"] else f"{100 * r['agreement']:.1f}%"
        t.add_row(name, pct(tune), pct(held), pct(every), f"{tune['pairs']} / {held['pairs']}", str(held["reward_ties"]))
    Console(file=file or sys.stdout, width=150).print(t)


def _variant(text: str) -> tuple[str, dict[str, str]]:
    name, sep, body = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected NAME='{{\"SETTING\": \"value\", ...}}'")
    try:
        settings = json.loads(body)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--variant {name}: the settings are not a JSON object ({e.msg})") from None
    if not isinstance(settings, dict):
        raise argparse.ArgumentTypeError(f"--variant {name}: the settings must be a JSON object of environment "
                                         "variable names to values, e.g. {\"REWARD_FORMULA\": \"paper\"}")
    return name.strip(), {str(k): str(v) for k, v in settings.items()}


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser("reward-order", help="Reward settings vs hand preferences on the policy's own groups: "
                        "pairwise agreement (tune and held-out).",
                        description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", default=str(DEFAULT_PATH), metavar="PATH",
                   help="JSONL of hand-ranked pairs (fields above; default the shipped set).")
    p.add_argument("--variant", action="append", type=_variant, default=None, metavar="NAME=JSON",
                   help="A reward to score: a name and its settings as a JSON object of environment variables over "
                        "the grounded recipe's (e.g. paper='{\"REWARD_FORMULA\": \"paper\"}'). Repeatable; "
                        "given, only these are scored (plus the current defaults).")
    p.add_argument("--json", default=None, metavar="PATH", help="Also write the rows as JSON to PATH.")
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    variants = None
    if args.variant:
        variants = {"current defaults": {}, **dict(args.variant)}
    try:
        rows = run(args.pairs, variants)
    except (OSError, RealDataError) as e:
        print(f"--pairs {args.pairs}: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"--variant: {e}", file=sys.stderr)
        return 2
    print_table(rows, args.pairs)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


# ----------------------------------------------------------------------------- building the shipped pairs

def parse_rankings(text: str) -> dict[str, list[list[str]]]:
    """``{group: [[letters tied first], [next], ...]}`` from blocks ``@<group>`` + one line ``A > B = C > D``."""
    out: dict[str, list[list[str]]] = {}
    cur: Optional[str] = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            cur = line[1:].strip()
            if cur in out:
                raise RealDataError(f"rankings line {n}: group {cur!r} ranked twice")
            out[cur] = []
            continue
        if cur is None or out[cur] or not re.fullmatch(r"[A-H](?:\s*[>=]\s*[A-H])*", line):
            raise RealDataError(f"rankings line {n}: expected '@<group>' then one line like 'A > B = C > D', "
                                f"got {line!r}")
        out[cur] = [[x.strip() for x in tier.split("=")] for tier in line.split(">")]
    return out


def build_pairs(groups: Sequence[dict], rankings: dict[str, list[list[str]]]) -> list[dict]:
    """Every pair of each ranked group's replies with the reader's preference (the higher tier; ``tie`` in one)."""
    out = []
    for g in groups:
        tiers = rankings.get(g["group"])
        if tiers is None:
            continue
        letters = [chr(ord("A") + i) for i in range(len(g["replies"]))]
        rank = {x: k for k, tier in enumerate(tiers) for x in tier}
        if sorted(rank) != letters:
            raise RealDataError(f"group {g['group']}: the ranking names {sorted(rank)}, the group has {letters}")
        for i in range(len(letters)):
            for j in range(i + 1, len(letters)):
                ri, rj = rank[letters[i]], rank[letters[j]]
                pref = "tie" if ri == rj else ("a" if ri < rj else "b")
                out.append({"id": f"{g['group']}:{letters[i]}{letters[j]}", "group": g["group"], "source": g["source"],
                            "step": g["step"], "question": g["question"], "passage": g["passage"], "gold": g["gold"],
                            "reply_a": g["replies"][i], "reply_b": g["replies"][j], "preference": pref,
                            "part": split_of(g["question"])})
    return out


def groups_from_samples(path: "str | Path", source: str, steps: Sequence[int], per_step: int,
                        group_size: int = 4) -> list[dict]:
    """Groups of ``group_size`` replies to one prompt from a run's ``samples.jsonl`` (``LOG_SAMPLES`` covering the
    whole step), the first ``per_step`` prompts of each of ``steps`` in file order: the pool the hand rankings read.
    """
    by: dict[tuple[int, str], list[dict]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["step"] in steps:
                by.setdefault((rec["step"], rec["question"]), []).append(rec)
    out = []
    for step in steps:
        keys = [k for k in by if k[0] == step and len(by[k]) >= group_size][:per_step]
        for k in keys:
            recs = by[k][:group_size]
            qid = hashlib.sha1(k[1].encode("utf-8")).hexdigest()[:8]
            out.append({"group": f"{source}-s{step}-{qid}", "source": source, "step": step, "question": k[1],
                        "passage": recs[0].get("materials") or [], "gold": recs[0]["gold"],
                        "replies": [r["response"] for r in recs]})
    return out


def _build_main(argv: Optional[list[str]] = None) -> int:
    """``python -m bench.reward_order [GROUPS ANNOTATIONS OUT]``: rebuild the pairs from the hand rankings."""
    argv = sys.argv[1:] if argv is None else argv
    groups_path = Path(argv[0]) if argv else GROUPS_PATH
    ann = Path(argv[1]) if len(argv) > 1 else ANNOTATIONS
    out = Path(argv[2]) if len(argv) > 2 else DEFAULT_PATH
    groups = [json.loads(line) for line in groups_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    pairs = build_pairs(groups, parse_rankings(ann.read_text(encoding="utf-8")))
    out.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
    print(f"{len(pairs)} pairs -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(_build_main())
