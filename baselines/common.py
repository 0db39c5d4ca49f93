"""What the two baselines share: questions and prompts, self-generated answers, the gold grade, token
encoding of (prompt, response) examples, a plain AdamW training loop on response tokens, saving a HF folder.

Nothing here knows about Ray or DeepSpeed: one process, one model, torch's AdamW (CPU is fine).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from core.data import DataError, load_items, stratify_question_types
from core.grader import grade_answer
from core.model_loader import default_device, load_causal_lm, load_tokenizer, resolve_model_path
from core.prompts import ABSTAIN_TEXT as DEFAULT_ABSTAIN_TEXT  # noqa: F401 (the trainer's ABSTAIN_TEXT default, for dpo / rtuning)
from core.prompts import prompt_mode_for, render_prompt, resolve_system
from core.sampling import eos_id, sample_answers  # noqa: F401 (re-exported: the baselines sample through these)

log = logging.getLogger("baselines")


class BaselineError(ValueError):
    """Bad input to a baseline command; the message names the option and the fix."""


# ----------------------------------------------------------------------------------------------- inputs

def check_positive(name: str, value, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not (isinstance(value, (int, float)) and math.isfinite(value) and ok):
        raise BaselineError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def check_sft_args(args) -> None:
    """The size and rate options every self-labelled SFT / DPO command shares: each must be > 0."""
    for name in ("epochs", "batch_size", "micro_batch_size", "gen_batch_size", "max_new_tokens", "lr"):
        check_positive("--" + name.replace("_", "-"), getattr(args, name))


def load_questions(spec: str, limit: int, type_share: float = 0.0) -> list:
    """Training items from ``--data`` (``halueval:SPLIT`` or a JSONL path); every item needs a gold answer.

    ``type_share > 0``: ``limit`` distinct questions of which yes/no and two-option ones make up at least that
    share each (:func:`core.data.stratify_question_types`), instead of the first ``limit``.
    """
    check_positive("--limit", limit, allow_zero=True)
    if not 0.0 <= type_share < 0.5:
        raise BaselineError(f"--type-share must be in [0, 0.5) (the least share of yes/no and of two-option "
                            f"questions), got {type_share}")
    if spec.startswith("halueval") and spec.partition(":")[2] == "test":
        raise BaselineError("--data halueval:test is the held-out split: baselines train on halueval:train "
                            "(tune on halueval:dev, report on test)")
    try:
        items = load_items(spec, limit=None if type_share else (limit or None))
    except (DataError, FileNotFoundError) as e:
        raise BaselineError(f"--data {spec}: {e}") from None
    if type_share:
        items = stratify_question_types(items, limit or len(items), type_share)
    missing = [i for i, it in enumerate(items) if not (it.right_answer or "").strip()]
    if missing:
        raise BaselineError(f"--data {spec}: {len(missing)} of {len(items)} items have no 'right_answer' (first at "
                            f"item {missing[0]}); self-labelled baselines grade answers against the gold answer")
    if not items:
        raise BaselineError(f"--data {spec}: no items")
    return items


def render_prompts(tokenizer, items: Sequence, mode: str, system: str, evidence_share: float = 0.5) -> list[str]:
    """The trainer's prompt for every item (``mixed``: closed or evidence by the question's stable hash)."""
    sys_text = resolve_system(system)
    return [render_prompt(tokenizer, it.question, it.knowledge_text,
                          prompt_mode_for(it.question, mode, evidence_share), system=sys_text) for it in items]


def set_seed(seed: int) -> None:
    import torch
    random.seed(seed)
    torch.manual_seed(seed)


def set_threads(threads: int) -> int:
    import torch
    from actors.base import machine_cores   # torch: kept lazy, this module is on `rlfh --help`'s import path
    n = threads if threads > 0 else machine_cores()
    torch.set_num_threads(n)
    return n


def load_model(model_spec: str):
    """``(path, model, tokenizer)`` of ``--model`` (the embedded alias or a HF folder), fp32, on this device."""
    try:
        path = resolve_model_path(model_spec)
    except FileNotFoundError as e:
        raise BaselineError(f"--model: {e}") from None
    log.info("loading %s from %s", model_spec, path)
    tok = load_tokenizer(path)
    model = load_causal_lm(path, dtype="fp32", device=default_device())
    return path, model, tok


def grade_all(items: Sequence, answers: Sequence[str], scope: str = "whole") -> list:
    """Gold-grader :class:`core.grader.Grade` of ``answers[i]`` for ``items[i]`` (strict reading; ``scope``:
    what of the answer is read, as GRADE_SCOPE)."""
    return [grade_answer(a, it.right_answer, it.question, scope=scope) for it, a in zip(items, answers)]


# ----------------------------------------------------------------------------------------------- encoding

def encode_example(tokenizer, prompt: str, response: str, eos: int, max_prompt_len: int = 1024):
    """A :class:`actors.types.RolloutSample` for ``prompt`` + ``response`` + EOS (the response tokens, EOS
    included, are what a loss is taken on). Prompts longer than ``max_prompt_len`` keep their last tokens."""
    from actors.types import RolloutSample
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-max_prompt_len:]
    r_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [eos]
    return RolloutSample(prompt_index=0, prompt_token_ids=p_ids, response_token_ids=r_ids, response_text=response,
                         token_offsets=[(0, 0)] * len(r_ids), finish_reason="stop")


def response_logprobs(model, samples: Sequence, pad_id: int):
    """Per-token response log-probs ``[B, R]`` and the action mask ``[B, R]`` of ``samples`` under ``model``
    (the trainer's forward: :func:`actors.base.causal_lm_response_logprobs` on :func:`actors.types.make_batch`)."""
    from actors.base import causal_lm_response_logprobs
    from actors.types import make_batch
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in make_batch(samples, pad_id).items()}
    return causal_lm_response_logprobs(model, batch), batch["action_mask"]


def sequence_logprobs(model, samples: Sequence, pad_id: int):
    """Sum of each sample's response-token log-probs: ``[B]`` float32."""
    from core.core_algos import masked_sum
    lp, mask = response_logprobs(model, samples, pad_id)
    return masked_sum(lp, mask, dim=-1)


# ----------------------------------------------------------------------------------------------- training

@dataclass
class TrainHistory:
    losses: list[float] = field(default_factory=list)     # one per optimizer step
    metrics: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    micro_batches: int = 0   # forwards (and backwards) run
    tokens: int = 0          # rows x longest row, summed over the micro batches: what was computed, padding included

    @property
    def first(self) -> float:
        return self.losses[0] if self.losses else float("nan")

    @property
    def last(self) -> float:
        return self.losses[-1] if self.losses else float("nan")


def train_last_layers(model, train_layers: int) -> int:
    """Train only the last ``train_layers`` transformer layers of a causal LM (and an untied LM head): the input
    embeddings (an LM head tied to them with them) and the layers below are frozen, so the backward stops at the
    lowest trained layer, and a step is cheaper (docs/PERFORMANCE.md, "The warm start's SFT by trained layers";
    `rlfh bench sft --train-layers`). ``0`` trains every parameter. Returns the parameters left trainable."""
    if train_layers:
        from actors.base import frozen_lower_modules
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
        try:
            frozen = frozen_lower_modules(decoder, train_layers, "--train-layers")
        except ValueError as e:
            raise BaselineError(str(e)) from None
        for _, _, module in frozen:
            module.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# The SFT loop's numerics, in warm-start cache keys: 2 since commit fc76e72 (micro batches cut by least padding,
# each weighted by its share of the step's response tokens, fused AdamW; 1 padded almost every step to its longest
# prompt).
SFT_LOOP_VERSION = 2

# What one more micro batch costs, in tokens: the shared system prompt's pass (about 30 tokens for the embedded
# model's chat template), the LM head's dense gradient and the gradient accumulation, priced as response tokens
# (the measurement: docs/PERFORMANCE.md, "The warm start's SFT by micro-batch packing").
MICRO_BATCH_COST_TOKENS = 128


def micro_batches(idx: Sequence[int], lengths: Sequence[int], micro_batch_size: int,
                  token_budget: int = 0) -> list[list[int]]:
    """Split one optimizer step's example indices into micro batches.

    ``token_budget = 0``: consecutive chunks of ``micro_batch_size`` (the input order). ``> 0``: the examples
    sorted by length (longest first), cut into the runs that minimise the tokens computed, padding included
    (``rows x longest row`` per micro batch, plus :data:`MICRO_BATCH_COST_TOKENS` each), with at most
    ``micro_batch_size`` rows and ``rows x longest row <= token_budget`` (a row longer than the budget runs
    alone). A few long prompts (passages) then do not pad a micro batch of short ones to their length: on the
    warm start's mix (14% with the passage) its 96 steps compute about 60% of the tokens of one padded micro
    batch a step.
    Every index appears exactly once.
    """
    if token_budget <= 0:
        return [list(idx[m:m + micro_batch_size]) for m in range(0, len(idx), micro_batch_size)]
    order = sorted(idx, key=lambda j: -lengths[j])
    n = len(order)
    # cost[e]: least tokens for order[:e]; start[e]: where the last micro batch of that split begins. A micro
    # batch order[b:e] pads to its first (longest) row.
    cost, start = [0] + [math.inf] * n, [0] * (n + 1)
    for e in range(1, n + 1):
        for b in range(max(0, e - micro_batch_size), e):
            rows, longest = e - b, lengths[order[b]]
            if rows > 1 and rows * longest > token_budget:
                continue
            c = cost[b] + MICRO_BATCH_COST_TOKENS + rows * longest
            if c < cost[e]:
                cost[e], start[e] = c, b
    out: list[list[int]] = []
    e = n
    while e:
        out.append(order[start[e]:e])
        e = start[e]
    return out[::-1]


def train_loop(model, examples: Sequence, step_loss: Callable, *, epochs: int, lr: float, batch_size: int,
               micro_batch_size: int, seed: int, max_norm: float = 1.0, progress: bool = True,
               desc: str = "train", token_budget: int = 0, autocast: bool = False,
               weight_of: Optional[Callable] = None) -> TrainHistory:
    """AdamW over ``examples`` (shuffled each epoch with ``seed``), ``batch_size`` examples per optimizer step.

    ``step_loss(model, micro_examples, weight) -> (loss, metrics)`` returns the micro batch's share of the
    step's loss (``weight``: the micro batch's share of the step's examples, or with ``weight_of`` of the sum
    of ``weight_of(example)``); its gradient is accumulated, the norm clipped to ``max_norm``, then one AdamW
    step. SFT weighs by response tokens, so that a step's loss is the mean over all its tokens however the step
    is split. ``token_budget``: length-aware micro batches (:func:`micro_batches`).
    ``autocast``: bf16 autocast of the forward on a CPU with native bf16 (the trainer's TRAIN_AUTOCAST=auto
    rule; weights, gradients and AdamW state stay fp32).
    """
    import torch
    from tqdm import tqdm
    check_positive("--epochs", epochs)
    check_positive("--lr", lr)
    check_positive("--batch-size", batch_size)
    check_positive("--micro-batch-size", micro_batch_size)
    if not examples:
        raise BaselineError("nothing to train on (no examples were built)")
    params = [p for p in model.parameters() if p.requires_grad]
    # torch's fused kernel where it runs (CPU, CUDA): one pass over the weights instead of a loop over the tensors,
    # several times faster (docs/PERFORMANCE.md, "The warm start's SFT by micro-batch packing")
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=fused or None)
    lengths = [len(getattr(e, "prompt_token_ids", ())) + len(getattr(e, "response_token_ids", ())) for e in examples]
    weights = [float(weight_of(e)) if weight_of else 1.0 for e in examples]
    use_bf16 = False
    if autocast and next(model.parameters()).device.type == "cpu":
        from actors.base import cpu_has_fast_bf16
        use_bf16 = cpu_has_fast_bf16()

    def cast():
        return torch.autocast("cpu", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()
    rng = random.Random(seed)
    hist = TrainHistory()
    steps_per_epoch = math.ceil(len(examples) / batch_size)
    t0 = time.perf_counter()
    model.train()
    with tqdm(total=steps_per_epoch * epochs, desc=desc, unit="step", disable=not progress, dynamic_ncols=True) as bar:
        for epoch in range(epochs):
            order = list(range(len(examples)))
            rng.shuffle(order)
            for s in range(steps_per_epoch):
                idx = order[s * batch_size:(s + 1) * batch_size]
                opt.zero_grad(set_to_none=True)
                total, merged = 0.0, {}
                step_weight = sum(weights[i] for i in idx)
                for part in micro_batches(idx, lengths, micro_batch_size, token_budget):
                    micro = [examples[i] for i in part]
                    hist.micro_batches += 1
                    hist.tokens += len(part) * max(lengths[i] for i in part)
                    share = sum(weights[i] for i in part) / step_weight
                    with cast():
                        loss, metrics = step_loss(model, micro, share)
                    loss.backward()
                    total += float(loss.detach())
                    for k, v in metrics.items():
                        merged[k] = merged.get(k, 0.0) + v * share
                if not math.isfinite(total):
                    raise FloatingPointError(f"{desc}: loss is {total} at epoch {epoch + 1} step {s + 1}; "
                                             "lower --lr")
                torch.nn.utils.clip_grad_norm_(params, max_norm)
                opt.step()
                hist.losses.append(total)
                hist.metrics.append(merged)
                bar.update(1)
                bar.set_postfix_str(f"epoch {epoch + 1} loss {total:.4f}")
                log.debug("%s epoch %d step %d loss %.4f %s", desc, epoch + 1, s + 1, total, merged)
            log.info("%s: epoch %d/%d done, last loss %.4f", desc, epoch + 1, epochs, hist.last)
    model.eval()
    hist.seconds = time.perf_counter() - t0
    return hist


# ----------------------------------------------------------------------------------------------- output

def prepare_out(out: str, overwrite: bool) -> Path:
    p = Path(out)
    if p.exists() and any(p.iterdir()) and not overwrite:
        raise BaselineError(f"--out {out} exists and is not empty; pick a new folder or pass --overwrite")
    p.mkdir(parents=True, exist_ok=True)
    return p


def save_model(model, tokenizer, out: Path, meta: dict) -> None:
    """A plain HF folder (``rlfh eval --model OUT`` loads it) plus ``baseline.json`` with how it was made."""
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "baseline.json").write_text(json.dumps(meta, indent=2, default=str))


def write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def print_summary(title: str, rows: Sequence[tuple[str, str]]) -> None:
    """A two-column rich table on stdout."""
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title, show_header=True, header_style="bold")
    t.add_column("what")
    t.add_column("value", justify="right")
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def fmt_loss(x: Optional[float]) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.4f}"
