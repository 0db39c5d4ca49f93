"""Verifier labels -> per-token rewards (pure numpy: no Ray, no HTTP, no torch).

A :class:`~core.verify_schema.VerifyResult` holds sentences and atomic
statements with character spans ``[start, end)`` in the response. The trainer
holds the response's tokens and each token's character offsets ``(start, end)``
in the same response string. This module places rewards on tokens by those
offsets (never by decoding), shapes them, clips them, and also returns per-token
label signs for FSPO.

Reward formula
--------------
The RLFH paper (Wen et al., arXiv 2406.12221, "On-Policy Self-Alignment with
Fine-grained Knowledge Feedback for Hallucination Mitigation") scores
truthfulness per *statement* and informativeness per *sentence*; its reference
implementation (``source/feedback/reward.py`` of the authors' code) computes, for
a statement ``s`` with label ``l(s)`` and informativeness score ``i(s)`` in a
sentence ``S``::

    r_truth(s) = w_truth * V[l(s)] * |I[i(s)]|
    r_info(S)  = w_info  * log( max(eps, sum_{s in S} I[i(s)]) + mu )

with ``V`` = VERIFICATION_MAP, ``I`` = INFORMATIVE_MAP, and the paper's run
script defaults ``eps = -0.9``, ``mu = 1``, ``w_truth = 1``, ``w_info = 1``,
``V = {Correct: 0.3, Hedged correct: 0.1, Vague: -0.8, Hedged wrong: -0.9,
Wrong: -1.2}``, ``I = {5: 1.3, 4: 1.2, 3: 1.1, 2: 1.0, 1: -0.1}``. ``r_truth``
lands on the last token of the statement, ``r_info`` on the last token of the
sentence.

What this module implements (names are :class:`~core.reward_settings.RewardSettings` fields)::

    r_truth(s) = truth_weight * verification_map[l(s)] * [|informative_map[i(s)]| if reward_formula == paper]
                 * ((1 - truth_confidence) + truth_confidence * conf(s))  (per statement)
    r_info(S)  = info_weight * log( max(reward_epsilon,
                                        sum_{s in S} informative_map[str(i(s))]) + reward_mu )
                                                                       (per sentence with >= 1 statement)

- ``conf(s)`` is the verifier's confidence in the statement's label (0..1; the
  evidence backend raises it with the margin of its best-matching evidence).
  ``truth_confidence`` in [0, 1] (default 0.1; 0 is the paper's reward) weights it in:
  the factor lies in ``[1 - truth_confidence, 1]``, so a label's sign never
  flips, and two statements with the same label are told apart by evidence
  strength instead of tying.
- ``reward_epsilon`` is the paper's ``eps``: a floor on a sentence's summed
  informativeness inside the log, so one uninformative sentence costs at most
  ``info_weight * log(eps + mu)``. ``reward_mu`` is the paper's ``mu``: the
  shift inside the log (``log(mu)`` is the reward of a sentence whose summed
  informativeness is 0). ``reward_epsilon + reward_mu`` must be > 0 (the log's
  domain); a setting that breaks this is rejected (HTTP 422 / ConfigError).
  With the project defaults (``eps = 0``, ``mu = 1``) ``r_info = info_weight *
  log1p(max(0, sum))``: zero for filler, growing sub-linearly with content.
  Set ``REWARD_EPSILON=-0.9`` (and the paper's maps) to penalise filler
  sentences as the paper does.
- Informativeness is per sentence, as in the paper, for two reasons: the log
  of a *sum* gives diminishing returns, so padding one sentence with many
  trivial statements earns less than its statements' linear sum would; and the
  floor ``eps`` bounds the penalty per sentence rather than per statement, so
  a long, mostly informative sentence is not sunk by one vague clause.
- ``reward_formula`` says whether truthfulness is multiplied by ``|I[i(s)]|``
  (the reference code's coupling): ``paper`` multiplies, so a true statement that
  does not bear on the question (informativeness 1-2) earns a fraction of what
  an answer (5) earns; ``additive`` keeps truth and informativeness separate
  terms with their own weights (with a map centred on 0, as the additive
  default INFORMATIVE_MAP is, the coupling would erase the truth signal of every
  score-3 statement, so ``paper`` wants maps like the paper's, all |I| > 0).

Placement and granularity
-------------------------
``granularity``:

- ``token``: ``r_truth(s)`` on statement ``s``'s span; ``r_info(S)`` on sentence ``S``'s span;
- ``sentence``: ``sum_{s in S} r_truth(s) + r_info(S)`` on ``S``'s span;
- ``response``: the sum of all of the above on the whole response.

``placement``: ``end`` puts a span's reward on the LAST token overlapping the
span (the paper); ``spread`` splits it evenly over every token overlapping the
span (a response-level reward spreads over all tokens). A token overlaps
``[a, b)`` when ``tok_start < b and tok_end > a``; zero-width tokens (special
tokens such as EOS, offsets ``(len, len)``) overlap no span.

Then, on the response's LAST token (index ``T - 1``, usually EOS):
``abstain_token_reward`` when the verifier says the response abstains ("I don't
know"); ``empty_reward`` when it does not abstain but makes no checkable statement
(none at all, or only ``Vague`` ones: "Sure!", "The answer is" say nothing a
verifier can check, and without this they would earn the mild Vague penalty
instead, less than an abstention or a wrong answer costs, which RL finds and
exploits within a few steps). Finally
every token reward is clipped to ``[-reward_clip, reward_clip]`` and
``score = sum(token_rewards)`` (after clipping: the return the policy sees).

Alignment
---------
A statement whose span overlaps no token (an LLM-rewritten statement the
verifier could not locate, a span past the text, a span over untokenized
characters) falls back to its sentence's span; if the sentence overlaps no token
either, to the response's last token. Every such statement, and every
statement the verifier already marked ``aligned=False``, is counted in
``num_unaligned``; none is dropped.

The alignment is linear in the response length ``L`` (characters), the number
of tokens ``T`` and the number of spans ``M``: a two-pointer sweep written as
two prefix scans over character positions. ``last_start_le[c]`` (the last token
starting at or before ``c``) is a running maximum (the pointer into the tokens
advancing with ``c``); ``first_end_gt[c]`` (the first token ending after ``c``)
is a reverse running minimum. The tokens overlapping ``[a, b)`` are then exactly
``first_end_gt[a] .. last_start_le[b - 1]`` when that range is non-empty, read
in O(1) per span. Offsets must be monotonic (starts and ends non-decreasing),
which every left-to-right tokenizer produces.

FSPO label signs: +1 on every token of a ``Correct``/``Hedged correct``
statement's (resolved) span, -1 on every token of a ``Wrong``/``Hedged wrong``
one, 0 elsewhere (``Vague`` and non-statement text). A token in both a good and a
bad statement gets -1: a token that helped state something false must not be
reinforced.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

# The settings this module computes with, and its input error, are defined in core.reward_settings.
from core.reward_settings import (GRANULARITIES, PLACEMENTS, RewardInputError,  # noqa: F401 (re-exported)
                                  RewardSettings)
from core.verify_schema import BAD_LABELS, GOOD_LABELS, INFO_SCORES, LABELS, VerifyResult
from reward_service.schemas import ItemReward

_LABEL_INDEX = {label: i for i, label in enumerate(LABELS)}
_SIGN_OF_LABEL = np.array([1 if lb in GOOD_LABELS else (-1 if lb in BAD_LABELS else 0) for lb in LABELS],
                          dtype=np.int8)


# --------------------------------------------------------------------------------------
# offsets
# --------------------------------------------------------------------------------------

def validate_offsets(offsets: Any, text_len: int) -> np.ndarray:
    """Check token offsets against a response of ``text_len`` characters.

    Args:
        offsets: sequence of ``(start, end)`` pairs, or an int array of shape ``(T, 2)``.
        text_len: ``len(response)`` in characters (Python ``str`` indices).

    Returns:
        int64 array of shape ``(T, 2)``.

    Raises:
        RewardInputError: field ``token_offsets`` (empty / wrong shape) or ``token_offsets.<i>``
            (negative, ``start > end``, ``end > text_len``, starts or ends decreasing).
    """
    try:
        arr = np.asarray(offsets, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise RewardInputError("token_offsets", "must be a list of [start, end] integer pairs",
                               "send e.g. [[0, 5], [5, 11]]") from None
    if arr.size == 0:
        raise RewardInputError("token_offsets", "is empty: the response needs at least one token",
                               f"send the offsets of every response token, e.g. the EOS token as "
                               f"[{text_len}, {text_len}]")
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise RewardInputError("token_offsets", f"must have shape (T, 2), got {tuple(arr.shape)}",
                               "send a list of [start, end] pairs, one per response token")
    starts, ends = arr[:, 0], arr[:, 1]
    bad = np.flatnonzero(starts < 0)
    if bad.size:
        i = int(bad[0])
        raise RewardInputError(f"token_offsets.{i}", f"start {starts[i]} is negative",
                               "offsets are character positions in the response, >= 0")
    bad = np.flatnonzero(starts > ends)
    if bad.size:
        i = int(bad[0])
        raise RewardInputError(f"token_offsets.{i}", f"start {starts[i]} > end {ends[i]}",
                               "each token is [start, end) with start <= end")
    bad = np.flatnonzero(ends > text_len)
    if bad.size:
        i = int(bad[0])
        raise RewardInputError(
            f"token_offsets.{i}", f"end {ends[i]} is past the end of the response ({text_len} characters)",
            "offsets must index the response text itself (not prompt+response); "
            "give special tokens such as EOS the offset [len(response), len(response)]")
    if len(arr) > 1:
        bad = np.flatnonzero((starts[1:] < starts[:-1]) | (ends[1:] < ends[:-1]))
        if bad.size:
            i = int(bad[0]) + 1
            raise RewardInputError(
                f"token_offsets.{i}",
                f"offsets are not monotonic: token {i} {arr[i].tolist()} comes after {arr[i - 1].tolist()}",
                "send tokens in order with non-decreasing starts and ends; give special tokens "
                "such as EOS the offset [len(response), len(response)] instead of [0, 0]")
    return arr


def offsets_from_tokenizer(tokenizer: Any, text: str) -> np.ndarray:
    """Token offsets of ``text`` tokenized alone (no special tokens) by a HF fast tokenizer. Shape ``(T, 2)``.

    Prefer offsets sent by the trainer: a response tokenized inside its prompt can split
    differently at the boundary.
    """
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    arr = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    return arr


# --------------------------------------------------------------------------------------
# alignment: spans -> token ranges, linear in characters + tokens + spans
# --------------------------------------------------------------------------------------

def align_spans(offsets: np.ndarray, span_starts: np.ndarray, span_ends: np.ndarray,
                text_len: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Tokens overlapping each character span, by a linear sweep.

    Args:
        offsets: int array ``(T, 2)`` of validated, monotonic token offsets.
        span_starts, span_ends: int arrays ``(M,)``, half-open character spans ``[a, b)``.
        text_len: length of the text (default: the largest token end).

    Returns:
        ``(first, last)``: int64 arrays ``(M,)``; tokens ``first..last`` (inclusive) are exactly the
        non-empty tokens overlapping span m; ``-1`` in both where no token overlaps (empty span, span past
        the text, or only untokenized characters).
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    a = np.asarray(span_starts, dtype=np.int64).ravel()
    b = np.asarray(span_ends, dtype=np.int64).ravel()
    m = a.shape[0]
    first = np.full(m, -1, dtype=np.int64)
    last = np.full(m, -1, dtype=np.int64)
    if m == 0 or offsets.shape[0] == 0:
        return first, last
    t_s, t_e = offsets[:, 0], offsets[:, 1]
    nz = np.flatnonzero(t_e > t_s)                       # (N,) original indices of non-empty tokens
    if nz.size == 0:
        return first, last
    s, e = t_s[nz], t_e[nz]                              # (N,) sorted (non-decreasing)
    n = nz.size
    L = int(max(e[-1], text_len if text_len is not None else 0))
    pos = np.arange(n, dtype=np.int64)

    # last_start_le[c]: largest compressed index j with s[j] <= c (-1 if none). Starts are sorted, so the
    # last token of each run of equal starts is the one to keep; a running max then sweeps positions.
    keep = np.empty(n, dtype=bool)
    keep[:-1] = s[1:] != s[:-1]
    keep[-1] = True
    last_start_le = np.full(L + 1, -1, dtype=np.int64)
    last_start_le[s[keep]] = pos[keep]
    np.maximum.accumulate(last_start_le, out=last_start_le)

    # first_end_gt[c]: smallest j with e[j] > c, i.e. e[j] - 1 >= c (n if none): a reverse running min.
    keep2 = np.empty(n, dtype=bool)
    keep2[0] = True
    keep2[1:] = e[1:] != e[:-1]
    first_end_gt = np.full(L + 1, n, dtype=np.int64)
    first_end_gt[e[keep2] - 1] = pos[keep2]
    first_end_gt = np.minimum.accumulate(first_end_gt[::-1])[::-1]

    a_c = np.clip(a, 0, L)
    b_c = np.clip(b, 0, L)
    valid = b_c > a_c
    lo = first_end_gt[a_c]                                # (M,)
    hi = last_start_le[np.maximum(b_c - 1, 0)]            # (M,)
    ok = valid & (hi >= 0) & (lo < n) & (lo <= hi)
    first[ok] = nz[lo[ok]]
    last[ok] = nz[hi[ok]]
    return first, last


# --------------------------------------------------------------------------------------
# rewards
# --------------------------------------------------------------------------------------

def _place(values: np.ndarray, first: np.ndarray, last: np.ndarray, T: int, placement: str) -> np.ndarray:
    """Sum span rewards onto tokens. values/first/last: ``(E,)``; returns ``(T,)`` float64."""
    if values.size == 0:
        return np.zeros(T, dtype=np.float64)
    if placement == "end":
        return np.bincount(last, weights=values, minlength=T)[:T].astype(np.float64)
    per = values / (last - first + 1)
    diff = np.bincount(first, weights=per, minlength=T + 1) - np.bincount(last + 1, weights=per, minlength=T + 1)
    out = np.cumsum(diff[:T])
    out[~_cover(first, last, T)] = 0.0   # exact zeros outside every span (no cumsum round-off)
    return out


def _cover(first: np.ndarray, last: np.ndarray, T: int) -> np.ndarray:
    """``(T,)`` bool: token covered by any of the ranges ``first..last``."""
    if first.size == 0:
        return np.zeros(T, dtype=bool)
    diff = np.bincount(first, minlength=T + 1) - np.bincount(last + 1, minlength=T + 1)
    return np.cumsum(diff[:T]) > 0


class _Flat(NamedTuple):
    """A response's statements flattened in reading order (K of them) and its sentences' spans (S of them)."""
    start: list[int]           # (K,) statement span starts
    end: list[int]             # (K,) statement span ends
    sent: np.ndarray           # (K,) int64: the sentence each statement is in
    label: np.ndarray          # (K,) int64: index into LABELS
    info: list[int]            # (K,) informativeness scores 1..5
    conf: list[float]          # (K,) the verifier's confidence in the label
    flagged: list[bool]        # (K,) the verifier marked the statement unaligned
    sent_start: np.ndarray     # (S,) int64 sentence span starts
    sent_end: np.ndarray       # (S,) int64 sentence span ends


def _flatten_statements(sentences: list) -> _Flat:
    """The statements of ``sentences`` as (K,) columns, and the sentences' (S,) spans."""
    st_start, st_end, st_sent, st_label, st_info, st_conf, st_flag_unaligned = [], [], [], [], [], [], []
    for si, sent in enumerate(sentences):
        for st in sent.statements:
            st_start.append(st.start)
            st_end.append(st.end)
            st_sent.append(si)
            st_label.append(_LABEL_INDEX[st.label])
            st_info.append(st.informativeness)
            st_conf.append(st.confidence)
            st_flag_unaligned.append(not st.aligned)
    return _Flat(start=st_start, end=st_end, sent=np.asarray(st_sent, dtype=np.int64),
                 label=np.asarray(st_label, dtype=np.int64), info=st_info, conf=st_conf, flagged=st_flag_unaligned,
                 sent_start=np.asarray([s.start for s in sentences], dtype=np.int64),
                 sent_end=np.asarray([s.end for s in sentences], dtype=np.int64))


def _resolve_spans(off: np.ndarray, flat: _Flat, text_len: int):
    """Token ranges of the statements and sentences, aligned in one sweep (:func:`align_spans`) with the
    fallbacks: a sentence overlapping no token lands on the last token (``T - 1``), a statement overlapping no
    token on its sentence's range.

    Returns ``(s_first, s_last, sent_first, sent_last, unaligned)``: ``(K,)``, ``(K,)``, ``(S,)``, ``(S,)`` int64
    token indices and ``(K,)`` bool (fell back, or flagged by the verifier)."""
    K = len(flat.start)
    first, last = align_spans(off, np.concatenate([np.asarray(flat.start, dtype=np.int64), flat.sent_start]),
                              np.concatenate([np.asarray(flat.end, dtype=np.int64), flat.sent_end]), text_len)
    s_first, s_last = first[:K], last[:K]
    sent_first, sent_last = first[K:], last[K:]
    # a sentence overlapping no token lands on the response's last token
    end_tok = int(off.shape[0]) - 1
    sent_none = sent_first < 0
    sent_first = np.where(sent_none, end_tok, sent_first)
    sent_last = np.where(sent_none, end_tok, sent_last)
    # a statement overlapping no token falls back to its sentence (counted)
    st_none = s_first < 0
    if K:
        s_first = np.where(st_none, sent_first[flat.sent], s_first)
        s_last = np.where(st_none, sent_last[flat.sent], s_last)
    unaligned = st_none | np.asarray(flat.flagged, dtype=bool) if K else np.zeros(0, dtype=bool)
    return s_first, s_last, sent_first, sent_last, unaligned


def _shape_rewards(flat: _Flat, settings: RewardSettings):
    """The reward formula (module docstring) on the flattened statements.

    Returns ``(truth, sent_info, sent_truth, sent_has)``: ``(K,)`` r_truth per statement, ``(S,)`` r_info per
    sentence (0 where it has no statement), ``(S,)`` summed r_truth per sentence, ``(S,)`` bool sentence has a
    statement."""
    K, n_sent = len(flat.start), len(flat.sent_start)
    st_sent_a = flat.sent
    vmap = np.array([settings.verification_map[lb] for lb in LABELS], dtype=np.float64)
    imap = np.array([settings.informative_map[str(sc)] for sc in INFO_SCORES], dtype=np.float64)
    truth = settings.truth_weight * vmap[flat.label] if K else np.zeros(0)              # (K,)
    info_stmt = imap[np.asarray(flat.info, dtype=np.int64) - 1] if K else np.zeros(0)   # (K,)
    if K and settings.reward_formula == "paper":
        truth = truth * np.abs(info_stmt)   # the paper's coupling: truth paid by what it does for the question
    c = settings.truth_confidence
    if K and c:
        # a weight in [1 - c, 1]: never flips a label's sign; equal labels differ by evidence strength
        conf = np.clip(np.asarray(flat.conf, dtype=np.float64), 0.0, 1.0)
        truth = truth * ((1.0 - c) + c * conf)
    sent_info_sum = np.bincount(st_sent_a, weights=info_stmt, minlength=n_sent) if K else np.zeros(n_sent)
    sent_has = np.bincount(st_sent_a, minlength=n_sent) > 0 if K else np.zeros(n_sent, dtype=bool)
    sent_info = np.where(
        sent_has,
        settings.info_weight * np.log(np.maximum(settings.reward_epsilon, sent_info_sum) + settings.reward_mu),
        0.0)                                                                            # (S,)
    sent_truth = np.bincount(st_sent_a, weights=truth, minlength=n_sent) if K else np.zeros(n_sent)
    return truth, sent_info, sent_truth, sent_has


def _span_values(granularity: str, truth: np.ndarray, sent_info: np.ndarray, sent_truth: np.ndarray,
                 sent_has: np.ndarray, s_first: np.ndarray, s_last: np.ndarray, sent_first: np.ndarray,
                 sent_last: np.ndarray, end_tok: int):
    """The rewards to place and their token ranges at ``granularity`` (token / sentence / response).

    Returns ``(values, first, last)``, each ``(E,)``."""
    if granularity == "token":
        values = np.concatenate([truth, sent_info[sent_has]])
        f = np.concatenate([s_first, sent_first[sent_has]])
        l_ = np.concatenate([s_last, sent_last[sent_has]])
    elif granularity == "sentence":
        values = (sent_truth + sent_info)[sent_has]
        f, l_ = sent_first[sent_has], sent_last[sent_has]
    else:  # response
        total = float(truth.sum() + sent_info.sum())
        values = np.array([total]) if truth.size else np.zeros(0)
        f = np.array([0], dtype=np.int64)[: values.size]
        l_ = np.array([end_tok], dtype=np.int64)[: values.size]
    return values, f, l_


def _label_signs(label: np.ndarray, s_first: np.ndarray, s_last: np.ndarray, T: int) -> np.ndarray:
    """FSPO signs over each statement's resolved span, negative winning: ``(T,)`` int8."""
    if not label.size:
        return np.zeros(T, dtype=np.int8)
    sign = _SIGN_OF_LABEL[label]
    pos = _cover(s_first[sign > 0], s_last[sign > 0], T)
    neg = _cover(s_first[sign < 0], s_last[sign < 0], T)
    return np.where(neg, -1, np.where(pos, 1, 0)).astype(np.int8)


def _label_counts(label: np.ndarray) -> dict[str, int]:
    """Statements per label, every label present (0 where none)."""
    counts = {lb: 0 for lb in LABELS}
    if label.size:
        for lb_i, n in zip(*np.unique(label, return_counts=True)):
            counts[LABELS[int(lb_i)]] = int(n)
    return counts


def compute_token_rewards(result: VerifyResult, offsets: Any, text_len: int,
                          settings: RewardSettings, *, validated: bool = False) -> ItemReward:
    """Token rewards for one verified response.

    Top to bottom: flatten the statements (:func:`_flatten_statements`), align their spans and the sentences'
    to tokens (:func:`_resolve_spans`), shape the rewards (:func:`_shape_rewards`), place them at the granularity
    (:func:`_span_values`, :func:`_place`), add the abstention / empty reward on the last token and clip, then
    summarise: FSPO signs (:func:`_label_signs`), label counts (:func:`_label_counts`).

    Args:
        result: the verifier's output for the response.
        offsets: ``(T, 2)`` token character offsets into the response (validated here unless
            ``validated``).
        text_len: ``len(response)``.
        settings: reward shaping.

    Returns:
        the wire record :class:`reward_service.schemas.ItemReward` (the one record of a reward, in process and
        over HTTP) with ``(T,)`` lists; ``cached`` False and no ``verification`` (the service sets those).
    """
    off = offsets if validated else validate_offsets(offsets, text_len)
    T = int(off.shape[0])
    end_tok = T - 1
    flat = _flatten_statements(result.sentences)
    K = len(flat.start)
    s_first, s_last, sent_first, sent_last, unaligned = _resolve_spans(off, flat, text_len)
    truth, sent_info, sent_truth, sent_has = _shape_rewards(flat, settings)
    values, f, l_ = _span_values(settings.granularity, truth, sent_info, sent_truth, sent_has, s_first, s_last,
                                 sent_first, sent_last, end_tok)
    rewards = _place(values.astype(np.float64), f.astype(np.int64), l_.astype(np.int64), T, settings.placement)

    abstained = bool(result.abstained)
    checkable = bool(K) and bool(np.any(flat.label != _LABEL_INDEX["Vague"]))
    if abstained:
        rewards[end_tok] += settings.abstain_token_reward
    elif not checkable:  # says nothing checkable and does not abstain either
        rewards[end_tok] += settings.empty_reward

    clip = settings.reward_clip
    num_clipped = int(np.count_nonzero(np.abs(rewards) > clip))
    np.clip(rewards, -clip, clip, out=rewards)

    signs = _label_signs(flat.label, s_first, s_last, T)
    counts = _label_counts(flat.label)
    is_correct = K > 0 and all(counts[lb] == 0 for lb in LABELS if lb not in GOOD_LABELS)
    # model_construct: every value is built above with the right type; validating T floats again costs ~T us
    return ItemReward.model_construct(
        token_rewards=rewards.tolist(), token_label_signs=signs.astype(int).tolist(), score=float(rewards.sum()),
        is_correct=bool(is_correct), abstained=bool(abstained), label_counts=counts, num_statements=int(K),
        num_unaligned=int(unaligned.sum()), num_tokens=T, truth_reward=float(truth.sum()),
        info_reward=float(sent_info.sum()), num_clipped=int(num_clipped), cached=False, verification=None)
