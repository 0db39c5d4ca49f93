"""A lean sampling loop for Hugging Face decoder LMs: the model's own forward, a preallocated KV buffer.

Why not ``model.generate``: on a CPU, generating a batch of sequences of the embedded 135M model spends most of
its time outside the matmuls (the profile: docs/PERFORMANCE.md, "The rollout loop"):

* sdpa's CPU flash kernel is slow for ONE query token, the shape of every decode step;
* ``DynamicCache`` re-concatenates every layer's keys and values at every step (O(length) copies);
* ``torch.multinomial`` draws one exponential per vocabulary entry (32 x 49,152 per step);
* rows that already ended keep being computed until the longest one ends.

This loop keeps the model's own forward (its embeddings, rotary positions, MLPs, norms and LM head, so any
Llama-like checkpoint works unchanged) and replaces only the attention call, through transformers' public
attention interface (``AttentionInterface.register``):

* keys and values go into one buffer per layer, ``[rows, kv_heads, capacity, head_dim]``, written in place;
* one-token decode attention groups the query heads of each key/value head (GQA without ``repeat_kv``) and is
  two small matmuls over the filled prefix; prefill runs sdpa with our own causal + left-padding mask;
* each prompt is prefilled ONCE for its ``n`` samples (the buffer rows are its ``n`` copies), and the tokens all
  prompts of a micro batch start with (the chat template's system prompt) once for all of them;
* the next token is drawn by inverse CDF (one uniform per row);
* rows that emitted an end token are dropped from the batch (and from the buffer) as they finish.

Models this cannot serve exactly (sliding-window attention, attention-logit soft-capping, no per-layer index,
encoder-decoders) are refused by :func:`kv_buffer_supported`; the engine then uses ``model.generate``.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from actors.types import MIN_SHARED_PREFIX, columns_after_shared_prefix, shared_prefix_length, uses_sliding_window

ATTENTION_NAME = "rlfh_kv_buffer"
#: Drop finished rows once this share of the batch has finished (each drop copies the live part of the buffer).
COMPACT_SHARE = 0.1   # 0.25 before; 0.1 was faster on a 64-row eval (docs/PERFORMANCE.md, "Evaluation decode batch")
#: Prompt tokens (padding included) per prefill forward. Decoding wants many rows per step (the weights are read
#: once per step for all of them); a prefill wants few, similar-length prompts per forward (less padding, smaller
#: activations), so a wide batch is prefilled in chunks into the one buffer.
PREFILL_TOKENS = 2048

_active = threading.local()   # the KVBuffer of the loop running in this thread (None outside it)


class KVBuffer:
    """Keys and values of every layer for ``rows`` sequences, ``capacity`` positions each, filled left to right.

    ``key_mask`` [rows, capacity] bool: which positions a query may attend to (False on left padding).
    ``repeat``: buffer rows per row of the next forward (each prompt prefilled once for its ``repeat`` samples).
    ``length``: the column the next forward writes from (the same for every row: prompts are left padded to one
    length). ``rows``: the buffer rows the next forward writes (a prefill chunk; every row by default).
    Buffers start zeroed: a chunk whose prompts are shorter than the batch's longest leaves padding columns
    unwritten, and a masked key must still be a finite number (0 x NaN is NaN in the attention's weighted sum).
    """

    def __init__(self, key_mask: torch.Tensor, repeat: int = 1):
        self.key_mask = key_mask
        self.repeat = int(repeat)
        self.length = 0
        self.rows = slice(None)
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        # fixed-shape decoding (:func:`_decode_static`): the column to write, a device tensor [1], and the keys a
        # query may see at this step, [rows, capacity]; None in the length-varying loop
        self.column: Optional[torch.Tensor] = None
        self.step_mask: Optional[torch.Tensor] = None

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``key``/``value`` [b, kv_heads, q, head_dim] at columns ``length .. length+q`` of ``rows``;
        returns those rows' filled prefix of the layer's buffers, [rows, kv_heads, length+q, head_dim] (views)."""
        if self.repeat > 1:
            key, value = key.repeat_interleave(self.repeat, 0), value.repeat_interleave(self.repeat, 0)
        if layer not in self.keys:
            rows, cap = self.key_mask.shape
            shape = (rows, key.shape[1], cap, key.shape[3])
            self.keys[layer] = key.new_zeros(shape)
            self.values[layer] = value.new_zeros(shape[:3] + (value.shape[3],))
        if self.column is not None:   # fixed shapes: write at a column held on the device, return the whole buffer
            self.keys[layer].index_copy_(2, self.column, key)
            self.values[layer].index_copy_(2, self.column, value)
            return self.keys[layer], self.values[layer]
        end = self.length + key.shape[2]
        keys, values = self.keys[layer][self.rows], self.values[layer][self.rows]
        keys[:, :, self.length:end] = key
        values[:, :, self.length:end] = value
        return keys[:, :, :end], values[:, :, :end]

    def advance(self, q: int, repeat: int = 1) -> None:
        """After a forward over ``q`` new positions; the next forward writes ``repeat`` buffer rows per row."""
        self.length += q
        self.repeat = int(repeat)

    def keep_rows(self, idx: torch.Tensor) -> None:
        """Keep only the rows ``idx`` (the still-running sequences): copies their filled prefix."""
        n = self.length
        self.key_mask = self.key_mask.index_select(0, idx)
        for store in (self.keys, self.values):
            for layer, t in store.items():
                kept = t.new_empty((len(idx),) + t.shape[1:])
                kept[:, :, :n] = t[:, :, :n].index_select(0, idx)
                store[layer] = kept


def kv_buffer_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                        scaling: Optional[float] = None, **kwargs):
    """The attention function registered as :data:`ATTENTION_NAME` (transformers' attention interface).

    query [b, heads, q, head_dim]; key/value [b, kv_heads, q, head_dim] (this call's new positions only: the model
    runs with ``use_cache=False``). Returns ([b, q, heads, head_dim], None). Outside :func:`sample` (no active
    buffer in this thread) it is plain sdpa with the model's own mask.
    """
    buf: Optional[KVBuffer] = getattr(_active, "buffer", None)
    if buf is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    b, heads, q, d = query.shape
    scale = scaling if scaling is not None else d ** -0.5
    keys, values = buf.write(module.layer_idx, key, value)
    # a prefill (also of one token a prompt, as when prompts differ only in their last token: its rows are a chunk
    # of the buffer's, or each is repeated for its samples): over what the buffer holds and, causally, itself (a
    # pad query sees itself: no NaN rows)
    if q > 1 or buf.repeat > 1 or buf.rows != slice(None):
        start, end = buf.length, keys.shape[2]
        if start:   # after a shared prefix: this call's rows are every buffer row's ``repeat``-th one
            key, value = keys[::buf.repeat], values[::buf.repeat]
        mask = buf.key_mask[buf.rows][::buf.repeat, :end]
        causal = torch.arange(end, device=query.device)[None] <= start + torch.arange(q, device=query.device)[:, None]
        allowed = causal[None] & mask[:, None, :]
        allowed[:, :, start:] |= torch.eye(q, dtype=torch.bool, device=query.device)[None]
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed[:, None], scale=scale,
                                             enable_gqa=key.shape[1] != heads)
        return out.transpose(1, 2).contiguous(), None
    kv = keys.shape[1]
    # in the buffer's dtype, autocast off: under autocast the two matmuls re-cast the whole prefix at every step
    with torch.autocast(query.device.type, enabled=False):
        grouped = query.reshape(b, kv, heads // kv, d).to(keys.dtype)    # the query heads of each kv head
        scores = torch.matmul(grouped, keys.transpose(-1, -2)) * scale   # [b, kv, heads/kv, length]
        visible = buf.step_mask if buf.column is not None else buf.key_mask[:, :keys.shape[2]]
        scores = scores.float().masked_fill(~visible[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(values.dtype)
        out = torch.matmul(probs, values)                                # [b, kv, heads/kv, head_dim]
    return out.reshape(b, 1, heads, d).to(query.dtype), None


def _register() -> None:
    from transformers import AttentionInterface
    AttentionInterface.register(ATTENTION_NAME, kv_buffer_attention)
    try:   # newer transformers also look the mask builder up by name; ours ignores the mask, sdpa's is cheap
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
        AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    except ImportError:
        pass


_register()


def _base_model(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def kv_buffer_supported(model) -> tuple[bool, str]:
    """Whether :func:`sample` computes exactly what the model's own attention would; else why not."""
    base = _base_model(model)
    cfg = getattr(base, "config", None)
    if cfg is None or not hasattr(base, "set_attn_implementation"):
        return False, "not a transformers PreTrainedModel"
    if getattr(cfg, "is_encoder_decoder", False):
        return False, "encoder-decoder model"
    if uses_sliding_window(cfg):
        return False, "sliding-window attention"
    if getattr(cfg, "attn_logit_softcapping", None):
        return False, "attention-logit soft-capping"
    attn = [m for n, m in base.named_modules() if n.endswith("self_attn")]
    if not attn or not all(isinstance(getattr(m, "layer_idx", None), int) for m in attn):
        return False, "attention modules without a layer_idx"
    return True, ""


def weight_major_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(weight @ x.T).T``: x [..., in], weight [out, in] -> [..., out].

    Why: for the LM head of a decode step (a few rows against a [vocab, hidden] weight) MKL's sgemm runs the
    weight-major product faster (docs/PERFORMANCE.md, "The rollout loop"; the per-layer projections gain little,
    so only the head is swapped). Same sums, another order: equal up to float rounding. The result is a
    transposed (non-contiguous) view.
    """
    flat = x.reshape(-1, x.shape[-1])
    out = torch.matmul(weight, flat.t()).t()
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _weight_major_head(model):
    """The model's output embedding if it is a plain ``nn.Linear`` (its forward is then swapped for
    :func:`weight_major_linear` while :func:`sample` runs), else None."""
    get = getattr(_base_model(model), "get_output_embeddings", None)
    head = get() if get is not None else None
    return head if type(head) is torch.nn.Linear else None


@contextmanager
def _kv_buffer_attention(model, buffer: KVBuffer):
    base = _base_model(model)
    before = base.config._attn_implementation
    base.set_attn_implementation(ATTENTION_NAME)
    # the weight-major LM head is an MKL (CPU) gain; on a GPU the plain product is the fast one
    head = _weight_major_head(model) if next(model.parameters()).device.type == "cpu" else None
    if head is not None:   # an instance attribute shadows nn.Linear.forward; removed again below
        head.forward = lambda x: weight_major_linear(x, head.weight, head.bias)
    _active.buffer = buffer
    try:
        yield
    finally:
        _active.buffer = None
        if head is not None:
            del head.forward
        base.set_attn_implementation(before)


def sample_next_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                       generator: Optional[torch.Generator] = None,
                       uniform: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One token per row from ``logits`` [rows, vocab] (any float dtype): argmax when ``temperature == 0``, else
    a draw from softmax(logits / temperature) restricted to the smallest top-probability set whose mass reaches
    ``top_p`` (nucleus). Returns [rows] int64.

    Inverse CDF with one uniform per row (``torch.multinomial`` draws one exponential per vocabulary entry, a
    large share of a CPU decode step: docs/PERFORMANCE.md, "The rollout loop"), in two levels so that no
    cumulative sum runs over the whole vocabulary: pick the block of :data:`SAMPLE_BLOCK` tokens by the blocks'
    masses, then the token inside it.
    ``uniform`` [rows, 1] in [0, 1): the draws to use (drawn here from ``generator`` when None). No host sync:
    the function can run inside a captured CUDA graph.
    """
    if temperature == 0:
        return logits.argmax(-1)
    x = logits.float()
    if temperature != 1:
        x = x / temperature
    weights = (x - x.amax(-1, keepdim=True)).exp_()           # unnormalised probabilities
    order = None
    if top_p < 1.0:
        weights, order = weights.sort(dim=-1, descending=True)
        before = weights.cumsum(-1) - weights                 # mass ranked above each token
        weights.masked_fill_(before >= top_p * weights.sum(-1, keepdim=True), 0.0)   # the top token stays
    rows, vocab = weights.shape
    pad = (-vocab) % SAMPLE_BLOCK
    if pad:
        weights = F.pad(weights, (0, pad))
    blocks = weights.view(rows, -1, SAMPLE_BLOCK)
    block_cdf = blocks.sum(-1).cumsum(-1)                      # [rows, vocab / block]
    if uniform is None:
        uniform = torch.rand((rows, 1), generator=generator, device=weights.device, dtype=block_cdf.dtype)
    u = uniform.to(block_cdf.dtype) * block_cdf[:, -1:]
    block = torch.searchsorted(block_cdf, u, right=True).clamp_(max=block_cdf.shape[1] - 1)   # [rows, 1]
    below = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)), torch.zeros_like(u))
    inner_cdf = blocks.gather(1, block[:, :, None].expand(-1, 1, SAMPLE_BLOCK)).squeeze(1).cumsum(-1)
    inner = torch.searchsorted(inner_cdf, u - below, right=True).clamp_(max=SAMPLE_BLOCK - 1)
    pick = (block * SAMPLE_BLOCK + inner).clamp_(max=vocab - 1)
    return (order.gather(-1, pick) if order is not None else pick).squeeze(-1)


#: Tokens per block of :func:`sample_next_tokens`' two-level inverse CDF.
SAMPLE_BLOCK = 256


@torch.no_grad()
def prefill_chunks(lengths: Sequence[int], max_tokens: int) -> list[tuple[int, int, int]]:
    """Consecutive chunks ``(lo, hi, width)`` of prompts with ``lengths`` tokens: ``width`` is the chunk's longest
    prompt and ``(hi - lo) * width <= max_tokens`` unless one prompt alone is longer. Covers every prompt in order."""
    if max_tokens < 1:
        raise ValueError(f"prefill_tokens must be >= 1, got {max_tokens}")
    out: list[tuple[int, int, int]] = []
    lo, width = 0, 0
    for i, length in enumerate(lengths):
        wider = max(width, int(length))
        if i > lo and (i + 1 - lo) * wider > max_tokens:
            out.append((lo, i, width))
            lo, wider = i, int(length)
        width = wider
    if lengths:
        out.append((lo, len(lengths), width))
    return out


def sample(model, prompt_ids: Sequence[Sequence[int]], *, n: int, max_new_tokens: int, temperature: float,
           top_p: float, eos_ids: Sequence[int], pad_id: int, generator: Optional[torch.Generator] = None,
           suppress_first_ids: Sequence[int] = (), device: Optional[torch.device] = None,
           share_prefix: bool = True, prefill_tokens: int = PREFILL_TOKENS, fixed_shapes: bool = False,
           cuda_graph: bool = False, sync_every: int = 16, compile_step: bool = False) -> list[list[int]]:
    """``n`` continuations of each prompt (prompt-major: rows ``i*n .. i*n+n-1`` belong to prompt ``i``).

    ``prompt_ids``: token ids of each prompt (at least one each). Each continuation ends with its first token in
    ``eos_ids`` (kept) or after ``max_new_tokens`` tokens. ``suppress_first_ids``: tokens the first generated
    token may not be. ``pad_id`` only fills the padding of the prompt batch. ``share_prefix``: prefill the tokens
    all prompts start with once (at least :data:`MIN_SHARED_PREFIX` of them). ``prefill_tokens``: the rest of the
    prompts is prefilled in chunks of consecutive prompts of at most this many tokens, padding included (one
    prompt at least; callers that sort prompts by length pad least). Returns the generated ids per row.

    ``fixed_shapes``: decode with :func:`_decode_static` (no row dropping, every step the same shapes, the loop's
    state on the device; the host looks at the finished rows every ``sync_every`` steps). ``cuda_graph``: with
    ``fixed_shapes`` on a CUDA device, capture the decode step once per call and replay it (falls back to eager
    steps, with a warning, if the capture fails). Greedy output is the same token for token either way.
    ``compile_step``: with ``fixed_shapes``, the decode step's forward goes through ``torch.compile`` (fused
    elementwise kernels; one compile per batch shape, the capacity rounded up to a multiple of
    :data:`CAPACITY_ROUND` so that micro batches share it).
    """
    if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
        raise ValueError("sample: every prompt needs at least one token")
    if model.training:
        raise ValueError("sample: the model is in training mode (dropout); call model.eval() first")
    device = device or next(model.parameters()).device
    b, plen = len(prompt_ids), max(len(p) for p in prompt_ids)
    rows, cap = b * n, plen + max_new_tokens
    if fixed_shapes:   # fewer distinct shapes to capture / compile; the extra columns stay masked
        cap = -(-cap // CAPACITY_ROUND) * CAPACITY_ROUND
    ids, real, first, shared = _prompt_batch(prompt_ids, pad_id, share_prefix)
    ids, real, first = ids.to(device), real.to(device), first.to(device)
    key_mask = torch.ones((rows, cap), dtype=torch.bool, device=device)
    key_mask[:, shared:plen] = real.repeat_interleave(n, 0)
    next_pos = shared + real.sum(-1).repeat_interleave(n, 0)   # [rows] the position of the next fed token
    eos_set = {int(e) for e in eos_ids}
    eos = torch.as_tensor(sorted(eos_set) or [-1], dtype=torch.long, device=device)
    buffer = KVBuffer(key_mask, repeat=rows if shared else n)
    with _kv_buffer_attention(model, buffer):
        logits = _prefill(model, buffer, ids, real, first, n=n, prefill_tokens=prefill_tokens)
        if suppress_first_ids:
            logits[:, list(suppress_first_ids)] = float("-inf")
        if fixed_shapes:
            return _decode_static(model, buffer, logits, next_pos, max_new_tokens=max_new_tokens,
                                  temperature=temperature, top_p=top_p, eos=eos, pad_id=int(pad_id),
                                  generator=generator, cuda_graph=cuda_graph, sync_every=sync_every,
                                  forward=compiled_forward(model) if compile_step else model)
        return _decode_dropping_rows(model, buffer, logits, next_pos, max_new_tokens=max_new_tokens,
                                     temperature=temperature, top_p=top_p, eos=eos, eos_set=eos_set,
                                     generator=generator)


def _prompt_batch(prompt_ids: Sequence[Sequence[int]], pad_id: int,
                  share_prefix: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The prompts as one left-padded batch, on the host: ``(ids [b, plen - shared], real [b, plen - shared],
    first [shared], shared)``, ``plen`` the longest prompt. ``real`` marks the prompts' own tokens. With
    ``share_prefix``, the ``shared`` tokens every prompt starts with (a chat template's system prompt, at least
    :data:`MIN_SHARED_PREFIX`; each prompt keeps at least its last token) are ``first``, and ``ids`` / ``real``
    keep each prompt's rest, left padded (buffer columns [shared | padding | rest of the prompt | generated])."""
    b, plen = len(prompt_ids), max(len(p) for p in prompt_ids)
    ids = torch.full((b, plen), int(pad_id), dtype=torch.long)
    real = torch.zeros((b, plen), dtype=torch.bool)
    for i, p in enumerate(prompt_ids):
        ids[i, plen - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        real[i, plen - len(p):] = True
    shared = shared_prefix_length(ids[:, :-1], real[:, :-1], at_least=MIN_SHARED_PREFIX) if share_prefix else 0
    first = ids[0, plen - len(prompt_ids[0]):][:shared]
    if shared:
        src = columns_after_shared_prefix(real, shared)
        ids, real = ids.gather(1, src), real.gather(1, src)
    return ids, real, first, shared


def _prefill(model, buffer: KVBuffer, ids: torch.Tensor, real: torch.Tensor, first: torch.Tensor, *, n: int,
             prefill_tokens: int) -> torch.Tensor:
    """Fill ``buffer`` with the prompts' keys and values: the shared prefix ``first`` [shared] once for all rows,
    then each prompt's rest (``ids`` / ``real`` [b, plen - shared], as :func:`_prompt_batch` leaves them) in chunks
    of consecutive prompts of at most ``prefill_tokens`` tokens (:func:`prefill_chunks`). Returns the logits of
    the first generated token, ``[b * n, vocab]`` (each prompt's row repeated ``n`` times), the buffer ready for
    it."""
    shared, rest = first.shape[0], ids.shape[1]
    plen = shared + rest
    positions = shared + (real.long().cumsum(-1) - 1).clamp_(min=0)
    if shared:
        model(input_ids=first[None], position_ids=torch.arange(shared, device=ids.device)[None], use_cache=False,
              logits_to_keep=1)
        buffer.advance(shared, repeat=n)
    chunks = []
    for lo, hi, width in prefill_chunks(real.sum(-1).tolist(), prefill_tokens):
        # the chunk's prompts fill the last ``width`` columns before the reply; the rest is their padding
        buffer.rows, buffer.length, buffer.repeat = slice(lo * n, hi * n), plen - width, n
        chunks.append(model(input_ids=ids[lo:hi, rest - width:], position_ids=positions[lo:hi, rest - width:],
                            use_cache=False, logits_to_keep=1).logits[:, -1])
    buffer.rows, buffer.length, buffer.repeat = slice(None), plen, 1
    return torch.cat(chunks).repeat_interleave(n, 0)


def _decode_dropping_rows(model, buffer: KVBuffer, logits: torch.Tensor, next_pos: torch.Tensor, *,
                          max_new_tokens: int, temperature: float, top_p: float, eos: torch.Tensor,
                          eos_set: set[int], generator: Optional[torch.Generator]) -> list[list[int]]:
    """The eager decode loop: sample a token for each live row from ``logits`` [live, vocab], feed it at
    ``next_pos`` [live], and drop the rows that ended once they are :data:`COMPACT_SHARE` of the live ones.
    Returns the generated ids per row, each through its first token in ``eos_set``."""
    rows = logits.shape[0]
    out: list[list[int]] = [[] for _ in range(rows)]
    ended = [False] * rows                                   # emitted an end token: its later tokens are dropped
    live = torch.arange(rows, device=logits.device)          # original row of each buffer row
    for step in range(max_new_tokens):
        tok = sample_next_tokens(logits, temperature, top_p, generator)
        for r, t in zip(live.tolist(), tok.tolist()):
            if not ended[r]:
                out[r].append(t)
                ended[r] = t in eos_set
        done = torch.isin(tok, eos)
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if int(done.sum()) >= max(1, int(COMPACT_SHARE * len(live))):
            keep = (~done).nonzero().squeeze(-1)
            buffer.keep_rows(keep)
            live, tok, next_pos, done = live[keep], tok[keep], next_pos[keep], done[keep]
        # rows that ended but were not dropped yet keep decoding; their extra tokens are not kept
        logits = model(input_ids=tok[:, None], position_ids=next_pos[:, None], use_cache=False).logits[:, -1]
        buffer.advance(1)
        next_pos = next_pos + 1
    return out


#: Why the last CUDA-graph capture of :func:`_decode_static` failed ("" when it succeeded or was not tried).
LAST_CAPTURE_ERROR = {"error": ""}
#: The fixed-shape loop's buffer capacity is a multiple of this (one capture / compile serves more batches).
CAPACITY_ROUND = 64


def compiled_forward(model):
    """``torch.compile(model)`` with static shapes, made once per model and kept on it."""
    compiled = getattr(model, "_rlfh_compiled_forward", None)
    if compiled is None:
        compiled = torch.compile(model, dynamic=False)
        object.__setattr__(model, "_rlfh_compiled_forward", compiled)
    return compiled


def _decode_static(model, buffer: KVBuffer, logits: torch.Tensor, next_pos: torch.Tensor, *, max_new_tokens: int,
                   temperature: float, top_p: float, eos: torch.Tensor, pad_id: int,
                   generator: Optional[torch.Generator], cuda_graph: bool, sync_every: int,
                   forward=None) -> list[list[int]]:
    """Decode after the prefill with every step the same shapes, so that a CUDA graph can replay it.

    ``buffer``: prefilled, every layer's keys/values allocated at full capacity, ``buffer.length`` the first free
    column. ``logits`` [rows, vocab]: the prefill's last-position logits. ``next_pos`` [rows]: the position of the
    first generated token. ``eos`` [k] int64: end tokens.

    Unlike the length-varying loop, finished rows are not dropped (they keep decoding; their tokens after the
    end token become ``pad_id`` and are cut off), attention runs over the whole buffer with the unwritten
    columns masked, the token index, positions and write column live on the device, and the uniforms of every
    step are drawn up front (no RNG inside the graph: eager and replayed steps draw the same).
    ``forward``: what computes the step's logits (the model, or its compiled form). Returns the generated ids per
    row, each cut after its first end token.
    """
    forward = forward if forward is not None else model
    rows, cap = buffer.key_mask.shape
    dev = logits.device
    uniforms = None
    if temperature > 0:
        uniforms = torch.rand((max_new_tokens, rows, 1), generator=generator, device=dev, dtype=torch.float32)
    tok = sample_next_tokens(logits, temperature, top_p, uniform=None if uniforms is None else uniforms[0])
    out = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=dev)
    out[:, 0] = tok
    done = (tok[:, None] == eos[None]).any(-1)
    pos = next_pos.clone()
    step = torch.ones(1, dtype=torch.long, device=dev)             # the index of the token this step produces
    buffer.column = torch.full((1,), buffer.length, dtype=torch.long, device=dev)
    columns = torch.arange(cap, device=dev)
    pad = torch.full_like(tok, pad_id)

    def one_step() -> None:   # device work only: no .item(), no Python branch on a tensor's value
        buffer.step_mask = buffer.key_mask & (columns <= buffer.column)[None]
        step_logits = forward(input_ids=tok[:, None], position_ids=pos[:, None], use_cache=False).logits[:, -1]
        u = None if uniforms is None else uniforms.index_select(0, step)[0]
        nxt = torch.where(done, pad, sample_next_tokens(step_logits, temperature, top_p, uniform=u))
        out.index_copy_(1, step, nxt[:, None])
        done.logical_or_((nxt[:, None] == eos[None]).any(-1))
        tok.copy_(nxt)
        pos.add_(1)
        buffer.column.add_(1)
        step.add_(1)

    steps, taken, graph = max_new_tokens - 1, 0, None
    try:
        while taken < steps:
            if taken % max(1, sync_every) == 0 and bool(done.all()):
                break
            if graph is not None:
                graph.replay()
            elif cuda_graph and dev.type == "cuda":
                graph = capture_step(one_step)   # runs one real step eagerly (the warm-up), then records one
                cuda_graph = graph is not None
            else:
                one_step()
            taken += 1
    finally:
        buffer.column = buffer.step_mask = None
    eos_set = set(eos.tolist())
    result = []
    for row in out[:, :taken + 1].tolist():
        end = next((i for i, t in enumerate(row) if t in eos_set), len(row) - 1)
        result.append(row[:end + 1])
    return result


def capture_step(one_step) -> Optional["torch.cuda.CUDAGraph"]:
    """Run ``one_step`` once eagerly on a side stream (cuBLAS and allocator warm-up; a real step), then record it
    in a CUDA graph. Returns the graph (recorded, not run), or None if the capture failed (the reason goes to
    :data:`LAST_CAPTURE_ERROR` and the log)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        one_step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            one_step()
    except Exception as e:  # noqa: BLE001 - e.g. a model whose forward syncs with the host cannot be captured
        LAST_CAPTURE_ERROR["error"] = f"{type(e).__name__}: {e}"[:500]
        logging.getLogger(__name__).warning("CUDA graph capture of the decode step failed (%s); decoding eagerly",
                                            LAST_CAPTURE_ERROR["error"])
        torch.cuda.synchronize()
        return None
    LAST_CAPTURE_ERROR["error"] = ""
    return graph
