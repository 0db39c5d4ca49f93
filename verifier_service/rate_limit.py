"""Client-side limits of the ``llm`` judge's calls to a hosted endpoint: requests, tokens per minute; calls in flight.

A hosted judge (OpenAI, Together, a shared vLLM) limits each account by requests per minute (RPM), tokens per
minute (TPM) and often concurrent requests, and answers ``429 Too Many Requests`` beyond them, usually with a
``Retry-After`` header. :class:`RateLimiter` keeps one verifier replica's calls under ``LLM_MAX_RPM``,
``LLM_MAX_TPM`` and ``LLM_MAX_IN_FLIGHT``, and holds every call back while a ``Retry-After`` runs
(:meth:`RateLimiter.pause`), so that the server is not asked again before it said it would answer.

The windows are sliding logs, not token buckets: a bucket of N admits N at once and then N per period, i.e. up to
2N in some window of one period; a log of the last period's admissions admits at most N in *any* window of one
period, which is what a provider's per-minute limit checks. A call's tokens are estimated before it is sent
(:func:`estimate_tokens`: prompt characters / 4 plus ``max_tokens``) and corrected by the reply's
``usage.total_tokens`` when the call ends (:meth:`RateLimiter.release`).

Pure Python and thread-safe; the clock and the sleep are injectable, so the waits are unit-tested without sleeping.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

#: Characters per token of the TPM estimate (English text with a BPE tokenizer; corrected by the reply's usage).
CHARS_PER_TOKEN = 4


def estimate_tokens(messages: list[dict], max_tokens: int) -> int:
    """Tokens a chat call may cost before it is sent: its prompt's characters / 4, plus the reply's ``max_tokens``."""
    chars = sum(len(m.get("content") or "") for m in messages)
    return -(-chars // CHARS_PER_TOKEN) + int(max_tokens)


@dataclass
class Ticket:
    """One admitted call: when it was admitted and the tokens it counts for (corrected at release)."""

    admitted_at: float
    tokens: int
    released: bool = False


class RateLimiter:
    """Admission of calls under a requests-per-period, a tokens-per-period and an in-flight limit (0: unlimited).

    Args:
        max_requests: calls admitted in any window of ``period_s`` (``LLM_MAX_RPM``; 0: no limit).
        max_tokens: estimated tokens admitted in any window of ``period_s`` (``LLM_MAX_TPM``; 0: no limit). A
            single call estimated above the limit is admitted alone, once the window is empty (else it never would).
        max_in_flight: calls admitted and not yet released (``LLM_MAX_IN_FLIGHT``; 0: no limit).
        period_s: the window, seconds (60 for per-minute limits; tests use 1).
        clock: monotonic seconds (injectable).
        sleep: how :meth:`acquire` waits for the window (injectable; a fake clock's sleep advances it).
    """

    def __init__(self, max_requests: int = 0, max_tokens: int = 0, max_in_flight: int = 0, *, period_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        for name, value in (("max_requests", max_requests), ("max_tokens", max_tokens),
                            ("max_in_flight", max_in_flight)):
            if int(value) != value or value < 0:
                raise ValueError(f"RateLimiter: {name} must be an integer >= 0 (0: no limit), got {value!r}")
        if not period_s > 0:
            raise ValueError(f"RateLimiter: period_s must be > 0, got {period_s!r}")
        self.max_requests = int(max_requests)
        self.max_tokens = int(max_tokens)
        self.max_in_flight = int(max_in_flight)
        self.period_s = float(period_s)
        self._clock = clock
        self._sleep = sleep
        self._cond = threading.Condition(threading.Lock())
        self._window: deque[Ticket] = deque()   # admissions of the last period, oldest first
        self._in_flight = 0
        self._paused_until = float("-inf")

    @classmethod
    def from_config(cls, cfg, **kw) -> "RateLimiter":
        """The limits of ``LLM_MAX_RPM``, ``LLM_MAX_TPM`` and ``LLM_MAX_IN_FLIGHT``, per minute."""
        return cls(cfg.llm_max_rpm, cfg.llm_max_tpm, cfg.llm_max_in_flight, period_s=60.0, **kw)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    # ---------------------------------------------------------------- the rule (call with the lock held)
    def _expire(self, now: float) -> None:
        while self._window and self._window[0].admitted_at <= now - self.period_s:
            self._window.popleft()

    def _window_wait_s(self, tokens: int, now: float) -> float:
        """Seconds until the windows and a running pause admit a call of ``tokens`` (0: now)."""
        self._expire(now)
        wait = max(0.0, self._paused_until - now)
        if self.max_requests and len(self._window) >= self.max_requests:
            # the call fits once enough of the oldest admissions have left the window
            oldest_to_leave = self._window[len(self._window) - self.max_requests]
            wait = max(wait, oldest_to_leave.admitted_at + self.period_s - now)
        if self.max_tokens:
            need = min(tokens, self.max_tokens)            # an oversized call waits for an empty window
            used = sum(t.tokens for t in self._window)
            for t in self._window:
                if used + need <= self.max_tokens:
                    break
                used -= t.tokens
                wait = max(wait, t.admitted_at + self.period_s - now)
        return wait

    def wait_s(self, tokens: int = 0) -> Optional[float]:
        """Seconds until a call of ``tokens`` would be admitted: 0 now, None while ``max_in_flight`` calls run (it
        depends on when one ends). Admits nothing."""
        with self._cond:
            if self.max_in_flight and self._in_flight >= self.max_in_flight:
                return None
            return self._window_wait_s(tokens, self._clock())

    def try_acquire(self, tokens: int = 0) -> tuple[Optional[Ticket], Optional[float]]:
        """Admit a call of ``tokens`` now if the limits allow: ``(ticket, 0)``; else ``(None, wait_s)`` with
        :meth:`wait_s`'s meaning. The ticket must be given back with :meth:`release` when the call ends."""
        with self._cond:
            return self._try_acquire_locked(tokens)

    def _try_acquire_locked(self, tokens: int) -> tuple[Optional[Ticket], Optional[float]]:
        if self.max_in_flight and self._in_flight >= self.max_in_flight:
            return None, None
        now = self._clock()
        wait = self._window_wait_s(tokens, now)
        if wait > 0:
            return None, wait
        ticket = Ticket(admitted_at=now, tokens=int(tokens))
        self._window.append(ticket)
        self._in_flight += 1
        return ticket, 0.0

    def acquire(self, tokens: int = 0, max_wait_s: float = float("inf")) -> Optional[Ticket]:
        """Wait until a call of ``tokens`` is admitted, at most ``max_wait_s``; None when it would take longer.

        A wait that is known to end after the budget (the window, a ``Retry-After`` pause) is not started: the
        caller learns at once that the call cannot go out in time. A wait for a free in-flight slot has no known
        end and lasts until a slot frees or the budget runs out.
        """
        deadline = self._clock() + max(0.0, float(max_wait_s))
        while True:
            with self._cond:
                ticket, wait = self._try_acquire_locked(tokens)
                if ticket is not None:
                    return ticket
                left = deadline - self._clock()
                if wait is None:                      # in-flight limit: a release notifies
                    if left <= 0:
                        return None
                    self._cond.wait(timeout=left)
                    continue
                if wait > left:
                    return None
            self._sleep(wait)

    def release(self, ticket: Ticket, used_tokens: Optional[int] = None) -> None:
        """The call of ``ticket`` ended: its in-flight slot frees, and its tokens become ``used_tokens`` (the reply's
        ``usage.total_tokens``) when the server reported a positive count. Releasing twice is a no-op."""
        with self._cond:
            if ticket.released:
                return
            ticket.released = True
            if used_tokens is not None and used_tokens > 0:
                ticket.tokens = int(used_tokens)
            self._in_flight -= 1
            self._cond.notify()

    def pause(self, seconds: float) -> None:
        """Admit nothing for ``seconds`` from now (a 429's ``Retry-After``); a longer running pause is kept."""
        with self._cond:
            self._paused_until = max(self._paused_until, self._clock() + max(0.0, float(seconds)))
