"""The ``llm`` and ``self`` backends: an LLM judge behind a batched :data:`~verifier_service.core.ChatFn`.

``llm`` sends the judge prompts to an OpenAI-compatible endpoint (:func:`http_chat_fn`: httpx, timeout
``LLM_TIMEOUT_S``); ``self`` sends the same prompts through a ChatFn injected by the caller (the
training cluster passes the policy's rollout engines; tests pass SmolLM2 with transformers).

Per batch of requests:

1. sentences come from :func:`verifier_service.text.decompose` (exact spans; abstentions are detected
   there and never sent to the judge);
2. **extract** (one conversation per response): the judge lists atomic statements per sentence; each is
   located in the response by :func:`verifier_service.align.align_statement` (``aligned=False`` and the
   sentence span when it cannot be found). If extraction fails after the retries, the rule-based statement
   split is used instead (exact spans; logged);
3. **verify** (one conversation per response): statements + BM25-retrieved evidence lines + gold answer;
   the reply gives label / informativeness / confidence / evidence per statement;
4. a statement the judge did not label after ``1 + LLM_MAX_RETRIES`` attempts gets
   ``LLM_FALLBACK_LABEL`` with ``fallback=True``, counted in ``num_fallback`` and in the metric
   ``rlfh_judge_fallbacks_total``.

A failed attempt is a transport error, a timeout, an HTTP error status, an exception from the ChatFn or a
reply that :mod:`verifier_service.prompts` cannot parse strictly; each one is counted in
``rlfh_call_failures_total{target="judge_<backend>"}``. Attempts are retried with exponential backoff
(:func:`core.retry.backoff_delay`, capped at 10 s); only the failed conversations of a batch are re-sent.

Hosted judges limit their callers: ``llm`` sends under ``LLM_MAX_RPM``, ``LLM_MAX_TPM`` and
``LLM_MAX_IN_FLIGHT`` (:mod:`verifier_service.rate_limit`, per replica), and a 429 answer's ``Retry-After``
is waited out instead of the back-off (:class:`RetryAfter`), counted in ``rlfh_judge_rate_limited_total``. No
call waits longer than ``LLM_MAX_WAIT_S`` to be sent; the retries stay ``LLM_MAX_RETRIES``.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from core import metrics
from core.retry import backoff_delay, retry_after_s
from core.verify_schema import Sentence, Statement, VerifyRequest, VerifyResult
from verifier_service import text as T
from verifier_service.align import align_statement, tokenize
from verifier_service.prompts import (PROMPT_VERSION, JudgeFormatError, extract_messages, parse_extract,
                                      parse_verify, verify_messages)
from verifier_service.rate_limit import RateLimiter, estimate_tokens
from verifier_service.retrieval import MaterialIndex

log = logging.getLogger(__name__)

MAX_EVIDENCE_LINES = 8
EXTRACT_MAX_TOKENS = 384
VERIFY_MAX_TOKENS = 640


# ----------------------------------------------------------------------------- HTTP ChatFn

def chat_completions_url(base: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000/v1/chat/completions`` (``/v1`` added when missing)."""
    base = base.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


@dataclass(frozen=True)
class RetryAfter:
    """A reply slot of :func:`http_chat_fn`: the call failed with 429 and a ``Retry-After`` of ``seconds``.

    ``too_long``: the server asked for more than ``LLM_MAX_WAIT_S``; the conversation is not retried in this
    call (it gets the fallback label). Otherwise the chat function's limiter holds every call back until the
    time is over, and :class:`LLMBackend` re-sends the conversation without its own back-off.
    """

    seconds: float
    too_long: bool = False


def http_chat_fn(cfg, *, max_tokens: int = VERIFY_MAX_TOKENS, temperature: float = 0.0,
                 limiter: Optional[RateLimiter] = None) -> Callable[[list[list[dict]]], list]:
    """A batched ChatFn over an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    One POST per conversation, each with ``timeout=LLM_TIMEOUT_S``, sent when ``limiter`` admits it (default:
    :meth:`RateLimiter.from_config`, i.e. ``LLM_MAX_RPM``, ``LLM_MAX_TPM``, ``LLM_MAX_IN_FLIGHT``; one
    limiter per chat function, i.e. per verifier replica). A call that the limits would hold longer than
    ``LLM_MAX_WAIT_S`` is not sent. A failed conversation (not sent, timeout, connection error, non-200 status,
    malformed body) yields ``None`` in its slot and a warning in the log; the backend decides about retries.

    A 429 answer is counted in ``rlfh_judge_rate_limited_total{retry_after=...}``: with a ``Retry-After`` of at
    most ``LLM_MAX_WAIT_S`` (``honoured``) the limiter admits nothing until that time is over and the slot is
    a :class:`RetryAfter`; with a longer one (``too_long``) the limiter is paused as long as asked and the slot is
    a :class:`RetryAfter` with ``too_long``; without one (``absent``) the slot is ``None`` (the back-off applies).
    The API key (``MODEL_API_KEY``) is sent as a bearer token and never logged.
    """
    import httpx

    url = chat_completions_url(cfg.model_url)
    headers = {"Authorization": f"Bearer {cfg.model_api_key}"} if cfg.model_api_key else {}
    client = httpx.Client(timeout=httpx.Timeout(cfg.llm_timeout_s), headers=headers)
    limiter = limiter if limiter is not None else RateLimiter.from_config(cfg)
    max_wait_s = float(cfg.llm_max_wait_s)
    # each call in flight holds a thread; the limiter's in-flight limit also binds callers that share it
    pool = ThreadPoolExecutor(max_workers=int(cfg.llm_max_in_flight), thread_name_prefix="judge-http")
    model = cfg.annotate_model or "default"

    def one(messages: list[dict]):
        body = {"model": model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens}
        ticket = limiter.acquire(estimate_tokens(messages, max_tokens), max_wait_s)
        if ticket is None:
            log.warning("judge call to %s not sent: the limits (LLM_MAX_RPM=%d, LLM_MAX_TPM=%d, "
                        "LLM_MAX_IN_FLIGHT=%d, or a server's Retry-After) would hold it longer than "
                        "LLM_MAX_WAIT_S=%g s", url, cfg.llm_max_rpm, cfg.llm_max_tpm, cfg.llm_max_in_flight,
                        max_wait_s)
            return None
        used_tokens = None
        try:
            slot, used_tokens = _post_chat(client, url, body, limiter, max_wait_s)
            return slot
        finally:
            limiter.release(ticket, used_tokens)

    def chat(convs: list[list[dict]]) -> list:
        if len(convs) == 1:
            return [one(convs[0])]
        return list(pool.map(one, convs))

    def close():
        pool.shutdown(wait=False)
        client.close()

    chat.model_name = model  # type: ignore[attr-defined]
    chat.limiter = limiter  # type: ignore[attr-defined]
    chat.close = close  # type: ignore[attr-defined]
    return chat


def _post_chat(client, url: str, body: dict, limiter: RateLimiter, max_wait_s: float) -> tuple[object, Optional[int]]:
    """POST one conversation: ``(slot, tokens the server reported)``. The slot is the reply's text, a
    :class:`RetryAfter` for a 429 with a readable ``Retry-After`` (:func:`_rate_limited`), or ``None`` (connection
    error, timeout, another status, a body that is not a chat completion), each failure logged."""
    import httpx

    try:
        r = client.post(url, json=body)
    except httpx.HTTPError as e:
        log.warning("judge call to %s failed: %s: %s", url, type(e).__name__, e)
        return None, None
    if r.status_code == 429:
        return _rate_limited(r, url, limiter, max_wait_s), None
    if r.status_code != 200:
        log.warning("judge call to %s returned HTTP %d: %s", url, r.status_code, r.text[:200])
        return None, None
    try:
        reply = r.json()
        content = reply["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        log.warning("judge reply from %s is not a chat completion (%s): %s", url, e, r.text[:200])
        return None, None
    used_tokens = reported_tokens(reply)
    return (content if isinstance(content, str) else None), used_tokens


def _rate_limited(r, url: str, limiter: RateLimiter, max_wait_s: float) -> Optional[RetryAfter]:
    """A 429 answer ``r``: counted by its ``Retry-After`` (absent / honoured / too_long), the limiter paused as
    long as asked; ``None`` without a readable ``Retry-After`` (the back-off applies), else a :class:`RetryAfter`."""
    seconds = retry_after_s(r.headers.get("retry-after"))
    if seconds is None:
        metrics.inc("rlfh_judge_rate_limited_total", 1, {"retry_after": "absent"})
        log.warning("judge call to %s: HTTP 429 without a readable Retry-After (%r); backing off", url,
                    r.headers.get("retry-after"))
        return None
    limiter.pause(seconds)
    too_long = seconds > max_wait_s
    metrics.inc("rlfh_judge_rate_limited_total", 1, {"retry_after": "too_long" if too_long else "honoured"})
    if too_long:
        log.warning("judge call to %s: HTTP 429, Retry-After %.1f s is more than LLM_MAX_WAIT_S=%g s: "
                    "not retried", url, seconds, max_wait_s)
    else:
        log.info("judge call to %s: HTTP 429, waiting the Retry-After of %.1f s", url, seconds)
    return RetryAfter(seconds, too_long)


def reported_tokens(reply: dict) -> Optional[int]:
    """``usage.total_tokens`` of a chat completion when the server reported a positive count, else None."""
    usage = reply.get("usage") if isinstance(reply, dict) else None
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None


# ----------------------------------------------------------------------------- time bound

#: Back-off of the judge's retries (:class:`LLMBackend` defaults): 0.5 s, doubling, capped at 10 s.
BACKOFF_S, MAX_BACKOFF_S = 0.5, 10.0


def judge_time_bound_s(cfg) -> float:
    """Upper bound of the judge time of one ``verify_many`` call, in seconds (for callers' timeouts).

    Two stages (extract, verify), each at most ``1 + LLM_MAX_RETRIES`` attempts of ``LLM_TIMEOUT_S``,
    each held back at most ``LLM_MAX_WAIT_S`` by the rate limits or a 429's ``Retry-After``, with the capped
    back-off between them. Calls queued behind other requests on the same endpoint can still wait longer.
    """
    retries = int(cfg.llm_max_retries)
    per_stage = (retries + 1) * (float(cfg.llm_timeout_s) + float(cfg.llm_max_wait_s)) + sum(
        backoff_delay(a, BACKOFF_S, MAX_BACKOFF_S) for a in range(retries))
    return 2.0 * per_stage


# ----------------------------------------------------------------------------- backend

@dataclass
class _Item:
    """Working state of one request."""

    req: VerifyRequest
    decomp: T.Decomposition
    sent_spans: list[tuple[int, int]] = field(default_factory=list)
    live: list[int] = field(default_factory=list)          # sentence indices that are not abstentions
    # statements: (sentence index, text, start, end, aligned, hedged)
    statements: list[tuple[int, str, int, int, bool, bool]] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    verdicts: dict[int, dict] = field(default_factory=dict)


class LLMBackend:
    """LLM-judged verification over a batched ChatFn (``llm``: HTTP endpoint; ``self``: injected engine)."""

    def __init__(self, cfg, chat_fn, *, name: str = "llm", model: str = "default", endpoint: str = "",
                 backoff_s: float = BACKOFF_S, max_backoff_s: float = MAX_BACKOFF_S):
        self.cfg = cfg
        self.chat_fn = chat_fn
        self.name = name
        self.model = model
        self.endpoint = endpoint
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s   # LLM_MAX_RETRIES=10 must not mean minutes of sleeping
        self.max_attempts = 1 + int(cfg.llm_max_retries)
        self.fallback_label = cfg.llm_fallback_label

    def identity(self) -> dict:
        ident = {"backend": self.name, "model": self.model, "prompt_version": PROMPT_VERSION,
                 "temperature": 0.0, "fallback_label": self.fallback_label}
        if self.name == "llm":
            ident["endpoint"] = self.endpoint
        return ident

    # -- the retry loop shared by both stages
    def _run(self, convs: dict[int, list[dict]], parse: Callable[[int, str], tuple[object, bool]]
             ) -> dict[int, object]:
        """Send ``convs`` (key -> messages) with retries; ``parse(key, reply) -> (value, complete)``.

        Returns key -> the best parsed value (complete or the last partial one); keys that never parsed are
        absent. At most ``1 + LLM_MAX_RETRIES`` attempts per conversation.
        """
        done: dict[int, object] = {}
        pending = list(convs)
        backoff = False   # the last attempt had a failure that the back-off is for (not only 429 + Retry-After)
        for attempt in range(self.max_attempts):
            if not pending:
                break
            if attempt and backoff:
                time.sleep(backoff_delay(attempt - 1, self.backoff_s, self.max_backoff_s))
            backoff = True
            try:
                replies = list(self.chat_fn([convs[k] for k in pending]))
                if len(replies) != len(pending):
                    raise RuntimeError(f"chat_fn returned {len(replies)} replies for {len(pending)} conversations")
            except Exception as e:  # the engine or transport failed for the whole batch
                log.warning("%s judge: attempt %d/%d failed for %d conversation(s): %s: %s", self.name,
                            attempt + 1, self.max_attempts, len(pending), type(e).__name__, e)
                metrics.inc("rlfh_call_failures_total", len(pending), {"target": f"judge_{self.name}"})
                continue
            still = []
            failed = 0   # no reply or an unparseable one (a partial parse is kept and re-asked, not a failure)
            waits = 0    # 429s whose Retry-After the chat function's limiter waits out: no back-off on top
            for k, reply in zip(pending, replies):
                if isinstance(reply, RetryAfter):
                    failed += 1
                    if not reply.too_long:    # too long: the server will not answer within LLM_MAX_WAIT_S
                        still.append(k)
                        waits += 1
                    continue
                if reply is None:
                    still.append(k)
                    failed += 1
                    continue
                try:
                    value, complete = parse(k, reply)
                except JudgeFormatError as e:
                    log.info("%s judge: malformed reply (attempt %d/%d): %s", self.name, attempt + 1,
                             self.max_attempts, e)
                    still.append(k)
                    failed += 1
                    continue
                done[k] = value
                if not complete:
                    still.append(k)
            metrics.inc("rlfh_call_failures_total", failed, {"target": f"judge_{self.name}"})
            backoff = len(still) > waits
            pending = still
        if pending:
            log.warning("%s judge: %d conversation(s) still failed after %d attempt(s)", self.name, len(pending),
                        self.max_attempts)
        return done

    def verify_many(self, reqs: list[VerifyRequest]) -> list[VerifyResult]:
        t0 = time.perf_counter()
        items = [self._prepare(r) for r in reqs]
        self._extract(items)
        self._verify(items)
        results = [self._assemble(it) for it in items]
        per = (time.perf_counter() - t0) * 1000.0 / max(1, len(items))
        for r in results:
            r.latency_ms = per
        return results

    def _prepare(self, req: VerifyRequest) -> _Item:
        d = T.decompose(req.response)
        it = _Item(req=req, decomp=d, sent_spans=[(s.start, s.end) for s in d.sentences])
        it.live = [i for i, ab in enumerate(d.abstain_sentence) if not ab]
        return it

    # -- stage 1: atomic statements
    def _extract(self, items: list[_Item]) -> None:
        convs = {}
        for k, it in enumerate(items):
            if it.live:
                convs[k] = extract_messages(it.req.question, [it.decomp.sentences[i].text for i in it.live])

        def parse(k: int, reply: str):
            return parse_extract(reply, len(items[k].live)), True

        got = self._run(convs, parse)
        for k, it in enumerate(items):
            if not it.live:
                continue
            parsed = got.get(k)
            if parsed is None:
                log.warning("%s judge: extraction failed; using the rule-based statement split", self.name)
            self._place_statements(it, parsed)

    def _place_statements(self, it: _Item, parsed: Optional[dict[int, list[str]]]) -> None:
        resp = it.req.response
        toks = [tokenize(resp, s, e) for s, e in it.sent_spans]
        for j, si in enumerate(it.live):
            sent = it.decomp.sentences[si]
            texts = parsed.get(j) if parsed is not None else None
            if texts is None:  # no judge output for this sentence: rule-based statements, exact spans
                for st, h in zip(it.decomp.statements[si], it.decomp.hedged[si]):
                    it.statements.append((si, st.text, st.start, st.end, True, h))
                continue
            for text in texts:
                a = align_statement(text, resp, it.sent_spans, hint=si, sent_tokens=toks)
                s_sent = it.decomp.sentences[a.sentence] if a.sentence >= 0 else sent
                hedged = T.is_hedged(text) or T.is_hedged(resp[s_sent.start:a.end])
                it.statements.append((a.sentence if a.sentence >= 0 else si, text, a.start, a.end, a.aligned,
                                      hedged))

    # -- stage 2: labels
    def _verify(self, items: list[_Item]) -> None:
        convs = {}
        for k, it in enumerate(items):
            if not it.statements:
                continue
            idx = MaterialIndex(it.req.materials)
            ev: list[int] = []
            for _, text, *_rest in it.statements:
                for i, _ in idx.search(T.content_words(text), k=2):
                    if i not in ev:
                        ev.append(i)
            it.evidence = [idx.sents[i].text for i in ev[:MAX_EVIDENCE_LINES]]
            convs[k] = verify_messages(it.req.question, [s[1] for s in it.statements], it.evidence,
                                       it.req.gold_answer)

        def parse(k: int, reply: str):
            it = items[k]
            out = parse_verify(reply, len(it.statements), len(it.evidence))
            merged = {**it.verdicts, **out}
            it.verdicts = merged
            return merged, len(merged) == len(it.statements)

        self._run(convs, parse)

    def _assemble(self, it: _Item) -> VerifyResult:
        by_sent: dict[int, list[Statement]] = {}
        n_fb = 0
        for k, (si, text, start, end, aligned, hedged) in enumerate(it.statements):
            v = it.verdicts.get(k)
            if v is None:
                n_fb += 1
                st = Statement(text=text, start=start, end=end, label=self.fallback_label, informativeness=3,
                               confidence=0.0, aligned=aligned, fallback=True)
            else:
                label = v["label"]
                if hedged and label == "Correct":
                    label = "Hedged correct"
                elif hedged and label == "Wrong":
                    label = "Hedged wrong"
                st = Statement(text=text, start=start, end=end, label=label, informativeness=v["informativeness"],
                               confidence=v["confidence"], aligned=aligned,
                               evidence=[it.evidence[i] for i in v["evidence"]][:3])
            by_sent.setdefault(si, []).append(st)
        if n_fb:
            metrics.inc("rlfh_judge_fallbacks_total", n_fb, {"backend": self.name})
        sentences = []
        for si, sp in enumerate(it.decomp.sentences):
            sts = sorted(by_sent.get(si, []), key=lambda s: (s.start, s.end))
            sentences.append(Sentence(text=sp.text, start=sp.start, end=sp.end, statements=sts))
        return VerifyResult(sentences=sentences, abstained=it.decomp.abstained, backend=self.name)
