"""The real reward service for the integration tests (tests/test_integrations_*.py).

The Serve app with the real evidence Verifier on the Ray + Serve the service modules share (tests/conftest.py's
``serve_ray``), a private redis-server; no auth token (OpenRLHF's HTTP client sends none). The integration modules
share one (tests/conftest.py's ``shared_reward_service``).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import httpx

from core.config import RLFHConfig

#: The issue 11 example (SmolLM2 tokenizer, OpenRLHF's client).
OBEROI = {
    "question": "Where is the head office of the Oberoi Group?",
    "knowledge": "The Oberoi Group is a hotel company with its head office in Delhi. Founded in 1934, the company "
                 "owns and operates 30 luxury hotels.",
    "right": "The head office is in Delhi.",
    "wrong": "The head office is in Mumbai.",
    "gold": "Delhi",
}


@contextlib.contextmanager
def running_service(shared, **overrides) -> Iterator[dict]:
    """``{"url", "cfg"}`` of the reward service on ``shared`` (tests/conftest.py's SharedServe) with a private
    redis-server; the app deleted and Redis stopped on exit."""
    from conftest import RedisProcess

    redis_proc = RedisProcess().start()
    cfg = RLFHConfig.load(environ={}, redis_url=redis_proc.url, cache_ttl_s=600, **overrides)
    try:
        with shared.app(cfg) as url:
            yield {"url": url, "cfg": cfg}
    finally:
        redis_proc.stop()


def direct_rewards(url: str, items: list[dict]) -> list[dict]:
    """``/v1/rewards`` for plain ``{question, response, materials, gold_answer}`` items, one token per response
    (the layout ``/get_reward``'s scalar is defined on)."""
    body = {"items": [{**it, "token_offsets": [[0, len(it["response"])]]} for it in items]}
    r = httpx.post(f"{url}/v1/rewards", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["items"]
