"""The one back-off schedule of the project's bounded retries (pure Python, no imports at module level).

Every network caller retries a bounded number of times and waits between attempts:
the trainer's reward client (:mod:`reward_service.client`), the LLM judge (:mod:`verifier_service.llm_backend`)
and ``rlfh submit``'s job-API calls (:mod:`ops.submit`). They differ in *what* they retry (a 4xx is not
retried by the reward client; the judge re-sends only the failed conversations of a batch), not in *how long*
they wait, which is :func:`backoff_delay`: exponential from ``base_s``, capped at ``cap_s`` so that a large
retry count cannot turn into minutes of sleeping.
"""
from __future__ import annotations

import time
from email.utils import parsedate_to_datetime


def backoff_delay(attempt: int, base_s: float, cap_s: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (0 = the first): ``min(cap_s, base_s * 2**attempt)``.

    ``attempt < 0`` or ``base_s <= 0`` gives 0 (no wait).
    """
    if attempt < 0 or base_s <= 0:
        return 0.0
    return float(min(cap_s, base_s * (2.0 ** min(attempt, 62))))


def retry_after_s(value, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: delta-seconds (``"2"``) or an HTTP date
    (``"Wed, 21 Oct 2015 07:28:00 GMT"``, counted from ``now``, epoch seconds, default the wall clock).
    None when the header is absent or unreadable; a date in the past is 0."""
    if not value:
        return None
    value = str(value).strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds and seconds != float("inf") else None
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))
