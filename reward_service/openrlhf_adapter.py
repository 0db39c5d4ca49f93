"""OpenRLHF's remote reward protocol (``POST /get_reward``): what its clients really send -> VerifyRequests.

OpenRLHF's ``SingleTurnAgentExecutor`` (``openrlhf/utils/agent.py``, 0.11) sends one rollout per request::

    {"query":   [tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)],
     "prompts": [the prompt text, chat template applied],
     "labels":  [the dataset's label string]}

so the query carries the chat template **and the EOS token** (``<|im_end|>``, ``<|eot_id|>``, ``</s>``...), and a
sentencepiece tokenizer's decode may change whitespace around special tokens. Left in the response, those markers
become words of its last statement and change verdicts (issue 11: ``"... Delhi.<|im_end|>"`` was judged Wrong,
``"... Delhi."`` Correct). This module turns such a request into exactly what ``/v1/rewards`` would verify for
the plain question and response:

- the response is the query after the prompt (an exact prefix, else a prefix up to whitespace, else leading
  special tokens such as BOS skipped); a prompt that is not a prefix of its query is a
  :class:`GetRewardInputError` naming ``prompts.<i>``, never a guessed split;
- the response is cut at the first end-of-turn marker (what follows is not the assistant's answer), then
  special tokens and whitespace are stripped from both ends (with a role header a template may leave at its
  start, e.g. ``<|im_start|>assistant``);
- the question is the label's ``question`` when it has one, else the last user turn of the templated prompt
  (ChatML, Llama-3 headers, Mistral ``[INST]``, Gemma turns), else the prompt without special tokens: the same
  question whichever of the two a client sends, so sending it in both does not change the verdict.

Pure functions, no Ray, no FastAPI: the route in :mod:`reward_service.app` only maps errors to 422.

OpenRLHF's in-process mode (``--reward.remote_url`` given a Python file) is the other half of the glue, beside
this one: :mod:`reward_service.openrlhf_reward_func`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from pydantic import ValidationError

from core.verify_schema import MAX_QUESTION_CHARS, MAX_RESPONSE_CHARS, VerifyRequest
from reward_service.schemas import LabelError, parse_label

__all__ = ["GetRewardInputError", "ParsedSample", "parse_get_reward", "response_after_prompt", "clean_response",
           "question_from_prompt", "END_OF_TURN_MARKERS"]

#: Markers that end an assistant turn (EOS / end-of-turn tokens of the common chat templates).
END_OF_TURN_MARKERS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>", "<|end|>",
                       "<end_of_turn>", "<eos>", "<|eos|>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                       "<|return|>", "<|im_sep|>")

# One special token: <|...|> (ChatML, Llama-3, Phi, Qwen), <｜...｜> (DeepSeek), or a known bare <...> token.
_SPECIAL = (r"(?:<\|[^<>|\s]{1,64}\|>|<\uff5c[^<>\uff5c]{1,64}\uff5c>"
            r"|</?s>|<unk>|<pad>|<eos>|<bos>|<start_of_turn>|<end_of_turn>)")
_END_RE = re.compile("|".join(re.escape(m) for m in END_OF_TURN_MARKERS))
_TRAILING_RE = re.compile(rf"(?:\s|{_SPECIAL})+\Z")
# leading special tokens, optionally followed by a role header ("assistant\n") they introduce
_LEADING_RE = re.compile(rf"\A\s*(?:{_SPECIAL}\s*)+(?:(?:assistant|model)\s*(?:{_SPECIAL}\s*)*(?=\S|\Z))?")
_LEADING_SPECIAL_RE = re.compile(rf"\A(?:\s|{_SPECIAL})+")
_ANY_SPECIAL_RE = re.compile(_SPECIAL)

# the last user turn of a templated prompt, per template family (content in group 1)
_USER_TURNS = (
    re.compile(r"<\|im_start\|>user\s*\n(.*?)(?:<\|im_end\|>|\Z)", re.S),                            # ChatML
    re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\s*(.*?)(?:<\|eot_id\|>|\Z)", re.S),    # Llama-3
    re.compile(r"<start_of_turn>user\s*\n(.*?)(?:<end_of_turn>|\Z)", re.S),                         # Gemma
    re.compile(r"\[INST\](.*?)(?:\[/INST\]|\Z)", re.S),                                             # Mistral/Llama-2
    re.compile(r"<\|user\|>\s*(.*?)(?:<\|end\|>|<\|assistant\|>|\Z)", re.S),                        # Phi-3
)
# a system block folded into Llama-2's first [INST]
_LLAMA2_SYS_RE = re.compile(r"<<SYS>>.*?<</SYS>>", re.S)


class GetRewardInputError(ValueError):
    """A request the protocol cannot answer; ``field`` names the entry (``prompts.3``), ``fix`` says what to do."""

    def __init__(self, field: str, message: str, fix: str = "", item_index: Optional[int] = None):
        self.field = field
        self.message = message
        self.fix = fix
        self.item_index = item_index
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class ParsedSample:
    """One ``/get_reward`` sample as the verifier sees it."""

    request: VerifyRequest
    raw_response: str      # the query after the prompt, as sent (special tokens and all)

    @property
    def response(self) -> str:
        return self.request.response


def _prefix_end_ignoring_space(query: str, prompt: str, start: int = 0) -> Optional[int]:
    """End (in ``query``) of ``prompt`` matched from ``query[start:]`` with whitespace ignored on both sides.

    ``None`` when the prompt's non-space characters are not the query's first non-space characters. Linear.
    """
    qi, n = start, len(query)
    for ch in prompt:
        if ch.isspace():
            continue
        while qi < n and query[qi].isspace():
            qi += 1
        if qi >= n or query[qi] != ch:
            return None
        qi += 1
    return qi


def response_after_prompt(query: str, prompt: Optional[str]) -> Optional[str]:
    """The text of ``query`` after ``prompt`` (None when the prompt is not a prefix of the query).

    Tried in order: an exact prefix; a prefix up to whitespace (sentencepiece decoders add or drop spaces
    around special tokens); the same after special tokens the decode put in front (a BOS the prompt lacks).
    An empty or missing prompt: the whole query is the response.
    """
    if not prompt:
        return query
    if query.startswith(prompt):
        return query[len(prompt):]
    end = _prefix_end_ignoring_space(query, prompt)
    if end is None:
        lead = _LEADING_SPECIAL_RE.match(query)
        p_lead = _LEADING_SPECIAL_RE.match(prompt)
        if lead and not p_lead:
            end = _prefix_end_ignoring_space(query, prompt, lead.end())
    return None if end is None else query[end:]


def clean_response(text: str) -> str:
    """The assistant's answer in ``text``: cut at the first end-of-turn marker, special tokens and whitespace
    stripped from both ends (with a leading role header such as ``<|im_start|>assistant``)."""
    m = _END_RE.search(text)
    if m:
        text = text[:m.start()]
    text = _TRAILING_RE.sub("", text)
    text = _LEADING_RE.sub("", text, count=1)
    return text.strip()


def question_from_prompt(prompt: str) -> str:
    """The question in a (possibly chat-templated) prompt: its last user turn, else the text without special
    tokens. Plain prompts come back stripped of surrounding whitespace only."""
    for pat in _USER_TURNS:
        turns = pat.findall(prompt)
        if turns:
            q = _LLAMA2_SYS_RE.sub("", turns[-1])
            q = _ANY_SPECIAL_RE.sub(" ", q).strip()
            if q:
                return q
    return _ANY_SPECIAL_RE.sub(" ", prompt).strip()


def parse_get_reward(query: Sequence[str], prompts: Optional[Sequence[str]],
                     labels: Optional[Sequence[Optional[str]]], max_items: int) -> list[ParsedSample]:
    """A ``/get_reward`` body -> one :class:`ParsedSample` per query, or :class:`GetRewardInputError`."""
    n = len(query)
    if n > max_items:
        raise GetRewardInputError("query", f"{n} samples, over the limit of {max_items}",
                                  "send smaller batches (MAX_BATCH_ITEMS)")
    for name, v in (("prompts", prompts), ("labels", labels)):
        if v is not None and len(v) != n:
            raise GetRewardInputError(name, f"has {len(v)} entries but query has {n}",
                                      f"send one {name[:-1]} per query")
    out = []
    for i, q in enumerate(query):
        prompt = prompts[i] if prompts else ""
        prompt = prompt or ""
        raw = response_after_prompt(q, prompt)
        if raw is None:
            raise GetRewardInputError(
                f"prompts.{i}", f"is not a prefix of query[{i}] (even ignoring whitespace and leading special tokens)",
                "send query = prompt + response, with the prompt exactly as it was given to the model "
                "(OpenRLHF: the untruncated prompt fits --prompt_max_len)", item_index=i)
        response = clean_response(raw)
        try:
            lab = parse_label(labels[i] if labels else None)
        except LabelError as e:     # e.g. a lone surrogate in the label's JSON (issue 12)
            raise GetRewardInputError(f"labels.{i}.{e.field}", e.message, e.fix, item_index=i) from None
        question = (lab["question"] or "").strip() or question_from_prompt(prompt)
        if not question:
            raise GetRewardInputError(f"labels.{i}", "no question: the prompt is empty and the label has none",
                                      "send the prompt, or a JSON label with a \"question\" key", item_index=i)
        if len(response) > MAX_RESPONSE_CHARS:
            raise GetRewardInputError(f"query.{i}", f"response is {len(response)} characters, over the limit "
                                      f"of {MAX_RESPONSE_CHARS}", "send shorter responses", item_index=i)
        if len(question) > MAX_QUESTION_CHARS:
            raise GetRewardInputError(f"prompts.{i}", f"question is {len(question)} characters, over the limit "
                                      f"of {MAX_QUESTION_CHARS}", "put the question alone in the label's "
                                      "\"question\" key", item_index=i)
        try:
            req = VerifyRequest(question=question, response=response, materials=lab["materials"],
                                gold_answer=lab["gold_answer"])
        except ValueError as e:   # materials too large in all, too many passages
            errs = e.errors(include_url=False) if isinstance(e, ValidationError) else []
            msg = (" ".join(str(p) for p in errs[0]["loc"]) + ": " + errs[0]["msg"]).strip(": ") if errs else str(e)
            raise GetRewardInputError(f"labels.{i}", msg.removeprefix("Value error, "),
                                      "send the relevant passages only", item_index=i) from None
        out.append(ParsedSample(request=req, raw_response=raw))
    return out
