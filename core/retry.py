"""The one back-off schedule of the project's bounded retries (pure Python, no imports at module level).

Every network caller retries a bounded number of times and waits between attempts:
the trainer's reward client (:mod:`reward_service.client`), the LLM judge (:mod:`verifier_service.llm_backend`)
and ``rlfh submit``'s job-API calls (:mod:`cluster.submit`). They differ in *what* they retry (a 4xx is not
retried by the reward client; the judge re-sends only the failed conversations of a batch), not in *how long*
they wait, which is :func:`backoff_delay`: exponential from ``base_s``, capped at ``cap_s`` so that a large
retry count cannot turn into minutes of sleeping.
"""
from __future__ import annotations


def backoff_delay(attempt: int, base_s: float, cap_s: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (0 = the first): ``min(cap_s, base_s * 2**attempt)``.

    ``attempt < 0`` or ``base_s <= 0`` gives 0 (no wait).
    """
    if attempt < 0 or base_s <= 0:
        return 0.0
    return float(min(cap_s, base_s * (2.0 ** min(attempt, 62))))
