"""Data contract between rollout engines, actor groups and the driver.

A rollout produces :class:`RolloutSample` objects (token ids, decoded text and
per-token character offsets). :func:`make_batch` packs them into a
:data:`Batch`, a dict of CPU tensors::

    sequences       Long [B, L]   prompt LEFT-padded to P, then response RIGHT-padded to R (L = P + R)
    attention_mask  Long [B, L]   1 on real prompt and response tokens, 0 on padding
    action_mask     Bool [B, R]   True on real response tokens (a generated EOS included)
    (training extras, added by the driver)
    old_logprobs    Float [B, R]  policy:  log-probs at rollout time
    advantages      Float [B, R]  policy:  per-token advantages
    old_values      Float [B, R]  critic:  values at rollout time
    returns         Float [B, R]  critic:  per-token returns

Log-prob / value convention: response column ``j`` is the token
``sequences[:, P + j]``; its log-prob comes from the logits at position
``P + j - 1`` (the state *before* the token was generated), and so does its
value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import torch

Batch = dict[str, torch.Tensor]

# keys whose second dimension is the full sequence (L) vs. the response (R)
SEQ_KEYS = ("sequences", "attention_mask")


@dataclass
class RolloutSample:
    """One generated response.

    ``token_offsets[i]`` is the half-open character span ``[start, end)`` of
    response token ``i`` inside ``response_text``. Special tokens (EOS) get an
    empty span at the current end of the text; tokens that only complete a
    multi-byte character together share that character's span.
    """

    prompt_index: int
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_text: str
    token_offsets: list[tuple[int, int]]
    finish_reason: str  # "stop" | "length"
    extra: dict = field(default_factory=dict)  # optional engine info (e.g. weights_version)

    def __post_init__(self):
        if len(self.token_offsets) != len(self.response_token_ids):
            raise ValueError(
                f"RolloutSample: token_offsets has {len(self.token_offsets)} spans for "
                f"{len(self.response_token_ids)} response tokens")
        if self.finish_reason not in ("stop", "length"):
            raise ValueError(f"RolloutSample.finish_reason must be 'stop' or 'length', got {self.finish_reason!r}")


# ------------------------------------------------------------------------------------------------ offsets

def token_offsets(tokenizer, token_ids: Sequence[int], window: int = 6) -> tuple[str, list[tuple[int, int]]]:
    """Decode ``token_ids`` and give every token its character span in the text. Linear time.

    Returns ``(text, offsets)`` with ``text == tokenizer.decode(token_ids, skip_special_tokens=True)``.

    Incremental detokenization: each new token is decoded together with a
    bounded window of the previous tokens (at most ``window`` + pending ones), and
    its piece is what the window's text gained. A token that ends in the middle
    of a multi-byte character emits nothing yet (its text would end in U+FFFD);
    it and the tokens that complete the character share the character's span.
    Special tokens emit nothing: their span is empty, at the current end of the
    text. If the tokenizer's whole-string decode differs from the sum of the
    pieces (clean-up of spaces before punctuation, say) the spans are mapped onto
    the whole-string text with a linear two-pointer alignment.
    """
    ids = [int(t) for t in token_ids]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    pieces_text: list[str] = []
    length = 0
    spans: list[tuple[int, int]] = [(0, 0)] * len(ids)
    kept: list[int] = []          # non-special ids decoded so far
    prefix_off = read_off = 0     # window over `kept`: context [prefix_off, read_off), new tokens after
    pending: list[int] = []       # response positions waiting for a complete character

    def decode(seq):
        return tokenizer.decode(seq, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def emit(piece: str) -> None:
        """Append ``piece`` to the text; every pending token gets its span."""
        nonlocal length, pending
        start = length
        pieces_text.append(piece)
        length += len(piece)
        for p in pending:
            spans[p] = (start, length)
        pending = []

    for pos, tid in enumerate(ids):
        if tid in special:  # skipped by the decode: an empty span where the text stands now
            spans[pos] = (length, length)
            continue
        kept.append(tid)
        pending.append(pos)
        prefix_text = decode(kept[prefix_off:read_off])
        new_text = decode(kept[prefix_off:])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd") \
                and new_text.startswith(prefix_text):
            emit(new_text[len(prefix_text):])
        elif len(kept) - prefix_off > 4 * window + 8:
            # a long run that never completes a character (invalid bytes): emit what it decodes to
            emit(new_text[len(prefix_text):] if new_text.startswith(prefix_text) else "")
        else:
            continue
        # slide the window: keep a few tokens of context (some tokenizers strip a leading space)
        prefix_off = max(read_off, len(kept) - window)
        read_off = len(kept)
    if pending:  # trailing partial character: whatever the window decodes to
        tail = decode(kept[prefix_off:])
        head = decode(kept[prefix_off:read_off])
        emit(tail[len(head):] if tail.startswith(head) else "")

    inc_text = "".join(pieces_text)
    full = tokenizer.decode(ids, skip_special_tokens=True)
    if full == inc_text:
        return full, spans
    return full, _remap_spans(inc_text, full, spans)


def _remap_spans(src: str, dst: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Map character spans in ``src`` onto ``dst`` (same text up to small edits). Linear two-pointer walk."""
    pos_map = [0] * (len(src) + 1)
    i = j = 0
    while i < len(src):
        pos_map[i] = j
        if j < len(dst) and src[i] == dst[j]:
            i += 1
            j += 1
        elif src[i].isspace() or j >= len(dst):
            i += 1          # a character dropped by the clean-up
        else:
            j += 1          # a character the clean-up inserted
            if j > len(dst):
                i += 1
    pos_map[len(src)] = len(dst)
    out = []
    for s, e in spans:
        ms, me = min(pos_map[s], len(dst)), min(pos_map[e], len(dst))
        out.append((ms, max(ms, me)))
    return out


# ------------------------------------------------------------------------------------------------ batches

def make_batch(samples: Sequence[RolloutSample], pad_token_id: int) -> Batch:
    """Pack samples into a :data:`Batch` (see the module docstring for shapes).

    ``P`` is the longest prompt, ``R`` the longest response (at least 1, so that
    an all-empty batch still has a response column, fully masked).
    """
    if len(samples) == 0:
        raise ValueError("make_batch: no samples (a batch needs at least one RolloutSample)")
    B = len(samples)
    P = max(len(s.prompt_token_ids) for s in samples)
    R = max(1, max(len(s.response_token_ids) for s in samples))
    seq = torch.full((B, P + R), int(pad_token_id), dtype=torch.long)
    attn = torch.zeros((B, P + R), dtype=torch.long)
    act = torch.zeros((B, R), dtype=torch.bool)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_token_ids), len(s.response_token_ids)
        if p == 0:
            raise ValueError(f"make_batch: sample {i} has an empty prompt (prompt_token_ids=[])")
        seq[i, P - p:P] = torch.tensor(s.prompt_token_ids, dtype=torch.long)
        attn[i, P - p:P] = 1
        if r:
            seq[i, P:P + r] = torch.tensor(s.response_token_ids, dtype=torch.long)
            attn[i, P:P + r] = 1
            act[i, :r] = True
    return {"sequences": seq, "attention_mask": attn, "action_mask": act}


def batch_size(batch: Batch) -> int:
    return int(batch["sequences"].shape[0])


def response_length(batch: Batch) -> int:
    return int(batch["action_mask"].shape[1])


def prompt_length(batch: Batch) -> int:
    return int(batch["sequences"].shape[1] - batch["action_mask"].shape[1])


def check_batch(batch: Batch, need: Iterable[str] = ()) -> None:
    """Raise a clear ValueError when the batch is malformed or lacks a key."""
    for k in ("sequences", "attention_mask", "action_mask", *need):
        if k not in batch:
            raise ValueError(f"batch is missing {k!r} (has {sorted(batch)}); build it with actors.types.make_batch "
                             "and add the training extras")
    B, L = batch["sequences"].shape
    R = batch["action_mask"].shape[1]
    if batch["attention_mask"].shape != (B, L):
        raise ValueError(f"batch['attention_mask'] has shape {tuple(batch['attention_mask'].shape)}, expected {(B, L)}")
    if batch["action_mask"].shape[0] != B or R > L - 1:
        raise ValueError(f"batch['action_mask'] has shape {tuple(batch['action_mask'].shape)}, expected ({B}, R<{L})")
    for k in need:
        if k not in SEQ_KEYS and batch[k].shape[:2] != (B, R):
            raise ValueError(f"batch[{k!r}] has shape {tuple(batch[k].shape)}, expected {(B, R)}")


def split_batch(batch: Batch, n: int) -> list[Batch]:
    """Split along the batch dimension into ``n`` contiguous chunks (sizes differ by at most 1; may be empty)."""
    if n < 1:
        raise ValueError(f"split_batch: n must be >= 1, got {n}")
    B = batch_size(batch)
    base, rem = divmod(B, n)
    out, start = [], 0
    for i in range(n):
        size = base + (1 if i < rem else 0)
        out.append({k: v[start:start + size] for k, v in batch.items()})
        start += size
    return out


def concat_batches(batches: Sequence[Batch]) -> Batch:
    """Concatenate along the batch dimension, re-padding prompts (left) and responses (right) to a common P / R.

    Batches built with different ``P`` / ``R`` are aligned: sequence-shaped keys
    get left padding on the prompt part and right padding on the response part;
    response-shaped keys get right padding (zeros / False). The pad id is taken
    from each batch's own padding (0 where a batch has none).
    """
    batches = [b for b in batches if b]
    if not batches:
        raise ValueError("concat_batches: nothing to concatenate")
    keys = list(batches[0])
    for b in batches[1:]:
        if set(b) != set(keys):
            raise ValueError(f"concat_batches: key sets differ: {sorted(keys)} vs {sorted(b)}")
    P = max(prompt_length(b) for b in batches)
    R = max(response_length(b) for b in batches)
    out: Batch = {}
    for k in keys:
        parts = []
        for b in batches:
            t = b[k]
            p, r = prompt_length(b), response_length(b)
            if k in SEQ_KEYS:
                fill = _pad_value(b, k)
                if p < P:
                    t = torch.cat([torch.full((t.shape[0], P - p, *t.shape[2:]), fill, dtype=t.dtype), t], 1)
                if r < R:
                    t = torch.cat([t, torch.full((t.shape[0], R - r, *t.shape[2:]), fill, dtype=t.dtype)], 1)
            elif t.dim() >= 2 and r < R:
                t = torch.cat([t, torch.zeros((t.shape[0], R - r, *t.shape[2:]), dtype=t.dtype)], 1)
            parts.append(t)
        out[k] = torch.cat(parts, 0)
    return out


def _pad_value(b: Batch, key: str) -> int:
    if key == "attention_mask":
        return 0
    seq, mask = b["sequences"], b["attention_mask"]
    pads = seq[mask == 0]
    return int(pads[0]) if pads.numel() else 0


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions as ``generate`` computes them for left-padded prompts: cumsum(mask) - 1, 0 on padding. [B, L]."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 0)


def prompt_groups(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows that share their prompt (equal prompt columns: ids and attention mask, left padding included).

    Returns ``first`` [U] (the lowest row index of each distinct prompt) and ``inverse`` [B] (each row's index
    into ``first``), both long tensors on the batch's device.
    """
    P = prompt_length(batch)
    key = torch.cat([batch["sequences"][:, :P], batch["attention_mask"][:, :P].long()], 1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    B = key.shape[0]
    U = int(inverse.max()) + 1 if B else 0
    rows = torch.arange(B, device=key.device)
    first = torch.full((U,), B, dtype=torch.long, device=key.device).scatter_reduce_(0, inverse, rows, "amin")
    return first, inverse


def uses_sliding_window(config) -> bool:
    """Whether a HF model config turns on sliding-window attention (its key/value cache then drops old
    positions, so a cached prompt is not the full prompt)."""
    return bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True) is not False


#: The prompts' common leading tokens run once per micro batch (training forwards and rollout prefill) only when
#: there are at least this many.
MIN_SHARED_PREFIX = 4


def shared_prefix_length(ids: torch.Tensor, mask: torch.Tensor, at_least: int = 1) -> int:
    """How many leading real tokens every row has in common (e.g. the chat template's system prompt).

    ``ids`` / ``mask`` [U, C]: left-padded token rows (each row's real tokens are its last ``mask.sum()``
    columns). Returns S <= the shortest row's length; 0 for fewer than two rows, when a row is not left padded,
    or when S < ``at_least``.
    """
    U, C = ids.shape
    if U < 2 or C == 0:
        return 0
    m = mask.long()
    if bool((m[:, 1:] < m[:, :-1]).any()):   # a real token before a pad: not left padded
        return 0
    lengths = m.sum(1)
    shortest = int(lengths.min())
    if shortest == 0:
        return 0
    cols = (C - lengths)[:, None] + torch.arange(shortest, device=ids.device)[None]   # [U, shortest]
    aligned = ids.gather(1, cols)                                                     # each row from its start
    differs = (aligned != aligned[:1]).any(0)
    S = int(differs.long().argmax()) if bool(differs.any()) else shortest
    return S if S >= at_least else 0


def columns_after_shared_prefix(mask: torch.Tensor, S: int) -> torch.Tensor:
    """Gather index [U, C - S] that drops each left-padded row's first ``S`` real tokens (``mask`` [U, C]) and keeps
    the row left padded: its padding columns, then its remaining tokens."""
    U, C = mask.shape
    pads = C - mask.long().sum(1)                                   # [U] left padding
    col = torch.arange(C - S, device=mask.device)[None]
    return torch.where(col >= pads[:, None], col + S, col)


def group_permutation(batch: Batch, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A random row order [B] that keeps the rows of each prompt together (in their order), so that micro batches
    of a shuffled epoch still hold whole prompt groups (:func:`actors.base.response_hidden_states` runs each
    prompt of a micro batch once)."""
    first, inverse = prompt_groups(batch)
    B = int(inverse.shape[0])
    slot = torch.randperm(len(first), generator=generator)[inverse.cpu()]   # each row's group's new position
    return torch.argsort(slot * B + torch.arange(B))


def length_grouped_order(batch: Batch, chunk: int) -> torch.Tensor:
    """A row order [B] that sorts whole prompt groups by length inside each run of ``chunk`` rows (one optimizer
    step's rows): the longest prompt first, then the longest response of the group. Micro batches cut from it
    pair prompts of similar length, so trimming drops most of the padding (a rollout mixes closed-book prompts
    with passages 3-5x longer). Rows of a group keep their order; no row leaves its chunk, so each optimizer step
    sees the same rows and, with token-weighted micro batches, the same loss.

    Identity when a prompt's rows are not contiguous or a group straddles two chunks.
    """
    B = int(batch["sequences"].shape[0])
    rows = torch.arange(B)
    if B == 0 or chunk <= 0:
        return rows
    first, inverse = prompt_groups(batch)
    first, inverse = first.cpu(), inverse.cpu()
    U = len(first)
    if int((inverse[1:] != inverse[:-1]).sum()) + 1 != U:     # a group split into several runs
        return rows
    size = torch.bincount(inverse, minlength=U)
    if bool(((first // chunk) != ((first + size - 1) // chunk)).any()):
        return rows
    P = prompt_length(batch)
    plen = batch["attention_mask"][:, :P].sum(1).cpu()
    rlen = batch["action_mask"].sum(1).cpu()
    rmax = torch.zeros(U, dtype=torch.long).scatter_reduce(0, inverse, rlen.long(), "amax", include_self=False)
    gkey = plen[first].long() * (int(rlen.max()) + 1) + rmax                       # [U] longer groups: larger
    top = int(gkey.max()) + 1
    key = ((first // chunk)[inverse] * top + (top - 1 - gkey)[inverse]) * (B + 1) + first[inverse]
    return torch.argsort(key, stable=True)


def trim_batch(batch: Batch) -> tuple[Batch, int, int]:
    """Drop prompt columns that are padding in every row and response columns past the longest response.

    Returns ``(trimmed, cut_left, keep_r)``: ``trimmed`` has ``P' = P - cut_left``
    and ``R' = keep_r``; per-token outputs of shape [B, R'] are padded back to R
    with :func:`pad_response`. Saves compute on micro batches whose rows are short.
    """
    P, R = prompt_length(batch), response_length(batch)
    mask = batch["attention_mask"]
    real_cols = mask[:, :P].any(0).nonzero()
    cut_left = int(real_cols[0]) if real_cols.numel() else P - 1
    cut_left = min(cut_left, P - 1)  # keep at least one prompt column (it predicts response token 0)
    act_cols = batch["action_mask"].any(0).nonzero()
    keep_r = int(act_cols[-1]) + 1 if act_cols.numel() else 1
    if cut_left == 0 and keep_r == R:
        return batch, 0, R
    out = {}
    for k, v in batch.items():
        if k in SEQ_KEYS:
            out[k] = v[:, cut_left:P + keep_r]
        elif v.dim() >= 2:
            out[k] = v[:, :keep_r]
        else:
            out[k] = v
    return out, cut_left, keep_r


def pad_response(x: torch.Tensor, R: int, value: float = 0.0) -> torch.Tensor:
    """Right-pad a [B, R'] tensor to [B, R]."""
    if x.shape[1] == R:
        return x
    pad = torch.full((x.shape[0], R - x.shape[1], *x.shape[2:]), value, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], 1)
