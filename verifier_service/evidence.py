"""The ``evidence`` backend (first cut: lexical support; replaced by the full implementation)."""
from __future__ import annotations

from verifier_service import text as T
from verifier_service.schema import Sentence, Statement, VerifyRequest, VerifyResult

ALGO_VERSION = "evidence-0"


class EvidenceBackend:
    name = "evidence"

    def __init__(self, cfg):
        self.cfg = cfg

    def identity(self) -> dict:
        return {"backend": self.name, "version": ALGO_VERSION}

    def verify_many(self, reqs: list[VerifyRequest]) -> list[VerifyResult]:
        return [self.verify(r) for r in reqs]

    def verify(self, req: VerifyRequest) -> VerifyResult:
        d = T.decompose(req.response)
        vocab = set(T.content_words(" ".join(req.materials) + " " + (req.gold_answer or "")))
        sents = []
        for sent, sts, hedged in zip(d.sentences, d.statements, d.hedged):
            out = []
            for st, h in zip(sts, hedged):
                cw = set(T.content_words(st.text))
                if not cw:
                    label = "Vague"
                else:
                    ok = len(cw & vocab) / len(cw) >= 0.7
                    label = ("Hedged correct" if ok else "Hedged wrong") if h else ("Correct" if ok else "Wrong")
                out.append(Statement(text=st.text, start=st.start, end=st.end, label=label, informativeness=3))
            sents.append(Sentence(text=sent.text, start=sent.start, end=sent.end, statements=out))
        return VerifyResult(sentences=sents, abstained=d.abstained, backend=self.name)
