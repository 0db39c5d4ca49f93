"""Token-level factuality rewards for verl, as its dense ``reward_tensor``.

verl keeps rewards as a ``(batch, response_length)`` float tensor over the right-padded response tokens
(``data.batch["responses"]``); most reward managers put one scalar on the last valid token. RLFH's rewards are
per token (each statement's reward on its own tokens), so this manager fills the whole row::

    from integrations.verl import RLFHRewardManager
    reward_fn = RLFHRewardManager(tokenizer, url="http://127.0.0.1:8000")
    out = reward_fn(batch, return_dict=True)          # batch: verl DataProto after generation
    out["reward_tensor"]                              # (B, R) float32, token rewards, 0 on padding
    out["reward_extra_info"]                          # rlfh_score / rlfh_correct / rlfh_abstained / ...: (B,) lists

It has the call signature of verl's reward managers (``verl.workers.reward_manager``: ``__init__(tokenizer,
num_examine, compute_score, reward_fn_key, **kwargs)``, ``__call__(data, return_dict=False)``);
:func:`register_with_verl` adds it to verl's registry as ``"rlfh"``. Nothing here imports verl: it reads
``data.batch`` (``prompts``, ``responses``, ``attention_mask``) and ``data.non_tensor_batch`` (``reward_model``
with ``ground_truth``; ``extra_info`` with ``question`` and ``knowledge``) like any DataProto.

Alignment is by character offsets, the service's contract: each response's valid token ids are decoded
(special tokens such as EOS become zero-width tokens at the end), the offsets of every token are found, and the
service returns one reward per token, so row ``i`` of the tensor gets exactly its ``valid_length_i`` token
rewards. The calls go through :class:`reward_service.client.RewardClient` (batches, timeouts, bounded retries);
a batch the service cannot answer raises :class:`RewardServiceUnavailable`, never a tensor of zeros.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

from integrations.common import materials_list
from reward_service.client import RewardClient, client_from_env
from reward_service.openrlhf_adapter import clean_response, question_from_prompt

log = logging.getLogger(__name__)

__all__ = ["RLFHRewardManager", "dense_reward_tensor", "response_text_and_offsets", "register_with_verl",
           "compute_score"]


def dense_reward_tensor(token_rewards: Sequence[Sequence[float]], valid_lengths: Sequence[int], width: int):
    """Per-sample token rewards -> verl's dense reward tensor.

    Args:
        token_rewards: ``B`` lists; list ``i`` has one reward per valid response token of sample ``i``.
        valid_lengths: ``(B,)`` valid (non-padding) response tokens per sample; responses are right-padded.
        width: ``R``, the padded response length (``data.batch["responses"].shape[1]``).

    Returns:
        float32 tensor of shape ``(B, R)``: row ``i`` holds ``token_rewards[i]`` in columns ``[0, L_i)``, zeros after.

    Raises:
        ValueError: a list's length differs from its valid length, or a valid length is outside ``[0, R]``.
    """
    import torch

    if len(token_rewards) != len(valid_lengths):
        raise ValueError(f"{len(token_rewards)} reward lists for {len(valid_lengths)} samples")
    out = torch.zeros(len(token_rewards), width, dtype=torch.float32)
    for i, (r, n) in enumerate(zip(token_rewards, valid_lengths)):
        n = int(n)
        if not 0 <= n <= width:
            raise ValueError(f"sample {i}: valid length {n} outside [0, {width}]")
        if len(r) != n:
            raise ValueError(f"sample {i}: {len(r)} token rewards for {n} valid response tokens")
        if n:
            out[i, :n] = torch.as_tensor(list(r), dtype=torch.float32)
    return out


def response_text_and_offsets(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[list[int]]]:
    """The response text of token ``ids`` and each token's ``[start, end)`` character offsets in it.

    Special tokens (EOS, end-of-turn, padding) are left out of the text and get a zero-width offset where they
    stand, so a reward never lands on them. The offsets come from re-tokenizing the text when that gives back
    the same ids (the usual case, one pass); otherwise from decoding growing prefixes (exact for any tokenizer).
    """
    ids = [int(t) for t in ids]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    kept = [t for t in ids if t not in special]
    text = tokenizer.decode(kept, skip_special_tokens=False) if kept else ""
    kept_offsets: Optional[list[list[int]]] = None
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) == kept:
            kept_offsets = [[int(s), int(e)] for s, e in enc["offset_mapping"]]
    except (NotImplementedError, TypeError, ValueError):   # slow tokenizers have no offset mapping
        kept_offsets = None
    if kept_offsets is None:
        kept_offsets, prev = [], 0
        for k in range(len(kept)):
            end = len(tokenizer.decode(kept[:k + 1], skip_special_tokens=False))
            end = max(prev, min(end, len(text)))
            kept_offsets.append([prev, end])
            prev = end
    # make them non-decreasing (byte-level merges can report overlapping spans)
    pos = 0
    for o in kept_offsets:
        o[0] = max(o[0], pos)
        o[1] = max(o[1], o[0])
        pos = o[1]
    out, j, pos = [], 0, 0
    for t in ids:
        if t in special:
            out.append([pos, pos])
        else:
            out.append(kept_offsets[j])
            pos = kept_offsets[j][1]
            j += 1
    return text, out


def _get(mapping: Any, key: str) -> Any:
    if isinstance(mapping, Mapping):
        return mapping.get(key)
    return None


class RLFHRewardManager:
    """verl reward manager: dense token-level factuality rewards from the RLFH reward service.

    Args:
        tokenizer: the policy's tokenizer (decodes the rollout ids).
        num_examine: print this many decoded samples per call (verl's debugging convention).
        compute_score: ignored (accepted for verl's constructor signature; the service scores).
        reward_fn_key: accepted for verl's constructor signature.
        url / client / timeout_s / max_retries / batch_size / token: the service client (default: ``REWARD_URL``,
            ``REWARD_TIMEOUT_S``, ``REWARD_MAX_RETRIES``, ``MAX_BATCH_ITEMS``, ``REWARD_API_TOKEN``).
        question_key / knowledge_key: keys of ``extra_info`` (then of ``reward_model``) for the question and the
            evidence; without a question the prompt's last user turn is used.
        overrides: per-request reward settings (``{"granularity": "sentence"}``...).
    """

    def __init__(self, tokenizer: Any, num_examine: int = 0, compute_score: Any = None,
                 reward_fn_key: str = "data_source", *, url: Optional[str] = None,
                 client: Optional[RewardClient] = None, timeout_s: Optional[float] = None,
                 max_retries: Optional[int] = None, batch_size: Optional[int] = None, token: Optional[str] = None,
                 question_key: str = "question", knowledge_key: str = "knowledge",
                 overrides: Optional[dict] = None, **kwargs: Any):
        self.tokenizer = tokenizer
        self.num_examine = int(num_examine)
        self.reward_fn_key = reward_fn_key
        self.client = client or client_from_env(url, timeout_s=timeout_s, max_retries=max_retries,
                                                batch_size=batch_size, token=token)
        self.question_key = question_key
        self.knowledge_key = knowledge_key
        self.overrides = overrides
        self.calls = 0

    def items(self, data: Any) -> tuple[list[dict], list[int]]:
        """``/v1/rewards`` items (with token offsets) and valid response lengths for a DataProto."""
        prompts = data.batch["prompts"]
        responses = data.batch["responses"]
        mask = data.batch["attention_mask"]
        p_len, r_len = prompts.shape[-1], responses.shape[-1]
        if mask.shape[-1] != p_len + r_len:
            raise ValueError(f"attention_mask has {mask.shape[-1]} columns, expected prompts + responses = "
                             f"{p_len} + {r_len}")
        ntb = getattr(data, "non_tensor_batch", {}) or {}
        n = responses.shape[0]
        items, lengths = [], []
        for i in range(n):
            n_resp = int(mask[i, p_len:].sum())
            n_prompt = int(mask[i, :p_len].sum())
            rm = ntb["reward_model"][i] if "reward_model" in ntb else None
            extra = ntb["extra_info"][i] if "extra_info" in ntb else None
            text, offsets = response_text_and_offsets(self.tokenizer, responses[i, :n_resp].tolist())
            question = _get(extra, self.question_key) or _get(rm, self.question_key)
            if not question:
                prompt_ids = prompts[i, p_len - n_prompt:].tolist() if n_prompt else []   # prompts are left-padded
                question = question_from_prompt(self.tokenizer.decode(prompt_ids, skip_special_tokens=False))
            knowledge = _get(extra, self.knowledge_key)
            if knowledge is None:
                knowledge = _get(rm, self.knowledge_key)
            gold = _get(rm, "ground_truth")
            if isinstance(gold, (list, tuple)):
                gold = gold[0] if gold else None
            item = {"question": str(question), "response": text, "materials": materials_list(knowledge),
                    "token_offsets": offsets if offsets else [[0, 0]]}
            if gold is not None and str(gold).strip():
                item["gold_answer"] = str(gold)
            items.append(item)
            lengths.append(n_resp)
        return items, lengths

    def __call__(self, data: Any, return_dict: bool = False):
        """``data`` (a DataProto after generation) -> the ``(B, R)`` reward tensor, or with ``return_dict``
        ``{"reward_tensor": (B, R), "reward_extra_info": {name: list of B}}``."""
        if "rm_scores" in data.batch.keys():            # rewards already computed (verl's convention)
            t = data.batch["rm_scores"]
            return {"reward_tensor": t, "reward_extra_info": {}} if return_dict else t
        items, lengths = self.items(data)
        self.calls += 1
        rewards = self.client.rewards(items, overrides=self.overrides)
        # an item with no valid token was sent with one zero-width token; it has no reward position in the row
        per_token = [r.token_rewards[:n] if n else [] for r, n in zip(rewards, lengths)]
        tensor = dense_reward_tensor(per_token, lengths, data.batch["responses"].shape[-1])
        for k in range(min(self.num_examine, len(items))):
            print(f"[rlfh] question: {items[k]['question']}\n[rlfh] response: {items[k]['response']}\n"
                  f"[rlfh] labels: {rewards[k].label_counts} score {rewards[k].score:.3f}")
        if not return_dict:
            return tensor
        extra = {
            "rlfh_score": [r.score for r in rewards],
            "rlfh_correct": [float(r.is_correct) for r in rewards],
            "rlfh_abstained": [float(r.abstained) for r in rewards],
            "rlfh_num_statements": [float(r.num_statements) for r in rewards],
        }
        return {"reward_tensor": tensor, "reward_extra_info": extra}


_score_clients: dict = {}
_score_lock = __import__("threading").Lock()


def compute_score(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                  extra_info: Optional[Mapping] = None, url: Optional[str] = None, **kwargs: Any) -> dict:
    """verl's ``custom_reward_function`` (the reward loop of verl >= 0.6): one response -> a scalar reward.

    verl 0.9's trainer computes rewards per sample in its reward loop and puts one scalar on the last token; this
    is RLFH's response-level return there (the sum of the response's rewards, as ``/get_reward``). For the dense
    token-level tensor use :class:`RLFHRewardManager`. ``extra_info`` must carry ``question`` (verl passes no
    prompt) and may carry ``knowledge``; ``ground_truth`` is the gold answer. ``url`` (from
    ``reward.custom_reward_function.reward_kwargs``) or ``REWARD_URL`` picks the service.

    Returns ``{"score", "correct", "abstained", "num_statements"}`` (floats; verl logs the extra keys).
    """
    question = _get(extra_info, "question")
    if not question:
        raise ValueError("extra_info.question is missing: put each sample's question in the dataset's extra_info "
                         "(verl does not pass the prompt to reward functions)")
    with _score_lock:
        client = _score_clients.get(url)
        if client is None:
            client = _score_clients[url] = client_from_env(url)
    response = clean_response(solution_str or "")
    gold = ground_truth[0] if isinstance(ground_truth, (list, tuple)) and ground_truth else ground_truth
    item = {"question": str(question), "response": response, "materials": materials_list(_get(extra_info, "knowledge")),
            "token_offsets": [[0, len(response)]]}
    if gold is not None and str(gold).strip():
        item["gold_answer"] = str(gold)
    r, = client.rewards([item])
    return {"score": r.score, "correct": float(r.is_correct), "abstained": float(r.abstained),
            "num_statements": float(r.num_statements)}


def register_with_verl(name: str = "rlfh") -> type:
    """Register :class:`RLFHRewardManager` in verl's reward-manager registry (``reward_model.reward_manager=rlfh``).

    Raises ImportError when verl is not installed.
    """
    from verl.workers.reward_manager import register   # the user's verl
    return register(name)(RLFHRewardManager)
