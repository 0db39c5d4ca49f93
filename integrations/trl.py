"""A factuality reward for TRL's ``GRPOTrainer`` (and every TRL trainer taking ``reward_funcs``), from the RLFH
reward service.

::

    from integrations.trl import RLFHReward
    trainer = GRPOTrainer(model=..., train_dataset=ds,              # columns: prompt, question, knowledge, answer
                          reward_funcs=RLFHReward("http://127.0.0.1:8000"), args=GRPOConfig(...))

TRL calls the function once per generation batch with ``prompts``, ``completions`` (strings, or message lists
for conversational datasets) and every other dataset column as a keyword list. Each completion becomes one
``/v1/rewards`` item: the question is the ``question`` column (else the prompt's last user turn), the evidence the
``knowledge`` column (a string or a list of passages), the gold answer the ``answer`` column (also
``right_answer`` / ``gold_answer``). Column names are arguments. TRL takes one scalar per completion: this returns
the response-level return (the sum of its token rewards, one token over the whole completion, exactly what
``/get_reward`` returns for OpenRLHF). Token-level rewards are what :mod:`integrations.verl` is for.

The calls go through :class:`reward_service.client.RewardClient`: batches of ``batch_size`` items, a timeout
per request, ``max_retries`` retries with capped back-off on connection errors / 5xx, counted failures. After the
last retry :class:`RewardServiceUnavailable` is raised (``on_unavailable="raise"``, the default: a training step
never runs on made-up rewards), or every reward of the batch is ``None`` (``"none"``: TRL turns them into NaN
and ignores that function for the batch), counted in ``unavailable_batches`` and logged. Bad input (4xx) always
raises with the server's message naming the field.

TRL is the user's dependency, not rlfh's: nothing here imports it.
"""
from __future__ import annotations

import logging
from typing import Any, Literal, Optional, Sequence

from integrations.common import materials_list
from reward_service.client import RewardClient, RewardServiceUnavailable, client_from_env
from reward_service.openrlhf_adapter import clean_response, question_from_prompt

log = logging.getLogger(__name__)

__all__ = ["RLFHReward"]


def _text_of(x: Any) -> str:
    """A prompt / completion in TRL's standard (str) or conversational (list of messages) form -> text."""
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        return str(x.get("content", ""))
    if isinstance(x, (list, tuple)):
        # conversational: the completion is the assistant message(s)
        return "".join(_text_of(m) for m in x if not isinstance(m, dict) or m.get("role", "assistant") == "assistant")
    raise TypeError(f"expected a string or a list of messages, got {type(x).__name__}")


def _question_of(prompt: Any) -> str:
    if isinstance(prompt, (list, tuple)):   # conversational: the last user message
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return str(users[-1].get("content", "")).strip()
        return " ".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict)).strip()
    return question_from_prompt(str(prompt))


class RLFHReward:
    """TRL reward function: one factuality reward per completion from the RLFH reward service.

    Args:
        url: the service's base URL (default: ``REWARD_URL``).
        question_key / knowledge_key / answer_keys: dataset columns read for the question, the evidence
            passages and the gold answer (the first of ``answer_keys`` present). Missing columns: the prompt is
            the question, no evidence, no gold answer.
        timeout_s, max_retries, batch_size, token: the client's settings (default: ``REWARD_TIMEOUT_S``,
            ``REWARD_MAX_RETRIES``, ``MAX_BATCH_ITEMS``, ``REWARD_API_TOKEN``).
        on_unavailable: ``"raise"`` (default) or ``"none"`` when the service stays down after the retries.
        overrides: per-request reward settings (``{"verification_map": ...}``, see ``/docs``).
        client: an existing :class:`RewardClient` (the other client arguments are then ignored).

    ``last_rewards`` holds the last batch's :class:`ItemReward` (labels, statements) for inspection.
    """

    def __init__(self, url: Optional[str] = None, *, question_key: str = "question", knowledge_key: str = "knowledge",
                 answer_keys: Sequence[str] = ("answer", "right_answer", "gold_answer"),
                 timeout_s: Optional[float] = None, max_retries: Optional[int] = None,
                 batch_size: Optional[int] = None, token: Optional[str] = None,
                 on_unavailable: Literal["raise", "none"] = "raise", overrides: Optional[dict] = None,
                 client: Optional[RewardClient] = None, name: str = "rlfh_factuality"):
        if on_unavailable not in ("raise", "none"):
            raise ValueError(f"on_unavailable must be 'raise' or 'none', got {on_unavailable!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.client = client or client_from_env(url, timeout_s=timeout_s, max_retries=max_retries,
                                                batch_size=batch_size, token=token)
        self.question_key = question_key
        self.knowledge_key = knowledge_key
        self.answer_keys = tuple(answer_keys)
        self.on_unavailable = on_unavailable
        self.overrides = overrides
        self.__name__ = name           # TRL names the reward column after it
        self.calls = 0
        self.unavailable_batches = 0
        self.last_rewards: list = []

    def items(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[dict]:
        """The ``/v1/rewards`` items for a TRL batch (one per completion)."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        n = len(completions)

        def column(key):
            v = columns.get(key)
            if v is None:
                return [None] * n
            if len(v) != n:
                raise ValueError(f"dataset column {key!r} has {len(v)} values for {n} completions")
            return list(v)

        questions = column(self.question_key)
        knowledge = column(self.knowledge_key)
        golds = [None] * n
        for key in reversed(self.answer_keys):
            vals = column(key)
            golds = [g if v is None else v for g, v in zip(golds, vals)]
        out = []
        for i in range(n):
            response = clean_response(_text_of(completions[i]))
            question = str(questions[i]).strip() if questions[i] else _question_of(prompts[i])
            item = {"question": question, "response": response, "materials": materials_list(knowledge[i]),
                    "token_offsets": [[0, len(response)]]}
            if golds[i] is not None:
                item["gold_answer"] = str(golds[i])
            out.append(item)
        return out

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **kwargs: Any) -> list[Optional[float]]:
        log_metric = kwargs.pop("log_metric", None)
        for k in ("trainer_state", "log_extra", "environments"):
            kwargs.pop(k, None)
        items = self.items(prompts, completions, **kwargs)
        self.calls += 1
        try:
            rewards = self.client.rewards(items, overrides=self.overrides)
        except RewardServiceUnavailable:
            self.unavailable_batches += 1
            if self.on_unavailable == "raise":
                raise
            log.error("reward service unavailable after retries: %d rewards of this batch are None (%d batches so "
                      "far)", len(items), self.unavailable_batches)
            return [None] * len(items)
        self.last_rewards = rewards
        if callable(log_metric) and rewards:
            n = len(rewards)
            log_metric("rlfh/correct_frac", sum(r.is_correct for r in rewards) / n)
            log_metric("rlfh/abstained_frac", sum(r.abstained for r in rewards) / n)
        return [r.score for r in rewards]
