"""The ``judge`` backend: the verifier's rules cut the response, a trained model labels it.

Per request:

1. :func:`verifier_service.text.decompose` cuts the response into sentences and atomic statements with
   exact spans and flags hedges and abstentions (as the ``evidence`` backend does);
2. the rules decide which statements claim nothing checkable (``Vague``: a restated question, a question
   asked back, a reply cut off mid-claim, filler) and score informativeness;
3. every other statement is read by the claim judge (:mod:`verifier_service.judge_model`) against its
   top evidence sentences, the question and the gold answer when one is given, in one batch across all
   requests of the call: ``P(supported) >= CLAIM_JUDGE_THRESHOLD`` is ``Correct`` (``Hedged correct``
   when hedged), else ``Wrong`` (``Hedged wrong``). The statement's ``confidence`` is the judge's
   probability of the label it got.

A request with neither materials nor a gold answer has nothing to check against: its statements are
``Vague`` without asking the model.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Optional

from core.assets import JUDGE_BASE, fetch_asset
from core.config import ConfigError
from core.verify_schema import Sentence, Statement, VerifyRequest, VerifyResult
from verifier_service import evidence as E
from verifier_service import judge_model as M
from verifier_service import text as T

#: Where `rlfh judge train --ship` writes a judge (adapter + spec, about 1.3 MB) that the backend then uses when
#: CLAIM_JUDGE_WEIGHTS is empty. None ships yet: no judge trained here beats the rules (docs/EVALUATION.md).
SHIPPED_WEIGHTS = Path(__file__).resolve().parent / "judge_weights"
BACKEND_VERSION = "judge-1"     # bump when the way labels are made from probabilities changes


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


class JudgeBackend:
    """Decomposition and Vague by the rules, Correct / Wrong by the trained claim judge. Thread-safe:
    the model is loaded once per process, on first use, and runs one batch at a time."""

    name = "judge"
    _lock = threading.Lock()
    _loaded: dict[tuple[str, str], tuple] = {}

    def __init__(self, cfg=None):
        self.cfg = cfg
        weights = getattr(cfg, "claim_judge_weights", "") or str(SHIPPED_WEIGHTS)
        self.weights_dir = Path(weights).expanduser()
        self.base = getattr(cfg, "claim_judge_base", "") or "all-minilm-l6-v2"
        self.batch_size = int(getattr(cfg, "claim_judge_batch_size", 32))
        w = self.weights_dir / "adapter.safetensors"
        if not w.exists() or not (self.weights_dir / "judge.json").exists():
            raise ConfigError(f"CLAIM_JUDGE_WEIGHTS={self.weights_dir}: no trained judge there (expected "
                              "judge.json and adapter.safetensors). Train one with `rlfh judge train` and set "
                              "CLAIM_JUDGE_WEIGHTS to the folder it prints (no judge ships with the repo yet: "
                              "docs/EVALUATION.md, 'The trained claim judge').")
        self._digest = _file_digest(w)
        threshold = getattr(cfg, "claim_judge_threshold", None)
        if threshold is None:           # the judge's own, calibrated when it was trained
            meta = json.loads((self.weights_dir / "judge.json").read_text())
            threshold = meta.get("metrics", {}).get("threshold", 0.5)
        self.threshold = float(threshold)

    def identity(self) -> dict:
        return {"backend": self.name, "version": BACKEND_VERSION, "rules": E.ALGO_VERSION,
                "weights": self._digest, "base": self.base, "threshold": self.threshold}

    def _model(self):
        key = (str(self.weights_dir), self.base)
        with self._lock:
            hit = self._loaded.get(key)
            if hit is None:
                base_path = self.base
                if base_path in ("all-minilm-l6-v2", "embedded"):
                    base_path = str(fetch_asset(JUDGE_BASE))
                hit = self._loaded[key] = M.load_judge(self.weights_dir, base_path)
            return hit

    def verify(self, req: VerifyRequest) -> VerifyResult:
        return self.verify_many([req])[0]

    def verify_many(self, reqs: list[VerifyRequest]) -> list[VerifyResult]:
        t0 = time.perf_counter()
        plans = []                      # per request: (decomposition, [[(statement span, verdict, hedged)]])
        inputs: list[M.JudgeInput] = []
        slots: list[tuple[int, int, int]] = []
        evidence_of: list[list[str]] = []
        for r, req in enumerate(reqs):
            d = T.decompose(req.response, req.question)
            n_st = sum(len(s) for s in d.statements)
            ctx = E._make_ctx(req, n_st) if n_st else None
            if ctx is not None and d.sentences and not re.search(r"[.!?][\"')\]\u201d\u2019]*\s*$", req.response):
                ctx.cut_off = (d.sentences[-1].start, d.sentences[-1].end)
            checkable = bool(req.materials) or bool((req.gold_answer or "").strip())
            per_sent = []
            first = True
            for si, (sent, sts, hedged) in enumerate(zip(d.sentences, d.statements, d.hedged)):
                rows = []
                for ti, (st, h) in enumerate(zip(sts, hedged)):
                    v = E.judge(st.text, sent.text, first, ctx, st.start, req.response[sent.start:st.start])
                    first = False
                    rows.append((st, v, h))
                    if not v.vague and checkable:
                        inp = M.JudgeInput(T.strip_hedges(st.text), T.strip_hedges(sent.text), req.question,
                                           tuple(req.materials), (req.gold_answer or "").strip() or None)
                        inputs.append(inp)
                        evidence_of.append(M.select_evidence(inp, ctx.idx))
                        slots.append((r, si, ti))
                per_sent.append(rows)
            plans.append((d, per_sent))
        probs: dict[tuple[int, int, int], float] = {}
        if inputs:
            judge, tok = self._model()
            pairs = [M.pair_texts(inp, ev) for inp, ev in zip(inputs, evidence_of)]
            with self._lock:            # one forward at a time per process (the replica's threads share it)
                ps = M.predict(judge, tok, pairs, self.batch_size)
            probs = dict(zip(slots, ps))
        out = []
        for r, (req, (d, per_sent)) in enumerate(zip(reqs, plans)):
            sentences = []
            for si, (sent, rows) in enumerate(zip(d.sentences, per_sent)):
                sts = []
                for ti, (st, v, h) in enumerate(rows):
                    p = probs.get((r, si, ti))
                    label, conf = self._label(p, h, v)
                    sts.append(Statement(text=st.text, start=st.start, end=st.end, label=label,
                                         informativeness=v.informativeness, evidence=v.evidence[:3],
                                         confidence=round(conf, 4)))
                sentences.append(Sentence(text=sent.text, start=sent.start, end=sent.end, statements=sts))
            out.append(VerifyResult(sentences=sentences, abstained=d.abstained, backend=self.name))
        per_item = (time.perf_counter() - t0) * 1000.0 / max(1, len(reqs))
        for res in out:
            res.latency_ms = per_item
        return out

    def _label(self, p: Optional[float], hedged: bool, v: "E.Verdict") -> tuple[str, float]:
        if p is None:                   # claims nothing checkable, or nothing to check against
            return "Vague", v.confidence
        if p >= self.threshold:
            return ("Hedged correct" if hedged else "Correct"), p
        return ("Hedged wrong" if hedged else "Wrong"), 1.0 - p
