"""Trainer-side client of the reward service (httpx; no Ray).

::

    client = RewardClient("http://127.0.0.1:8000", token=cfg.reward_api_token or None,
                          timeout_s=cfg.reward_timeout_s, max_retries=cfg.reward_max_retries)
    rewards = client.rewards([{"question": q, "response": r, "materials": knowledge,
                               "gold_answer": gold, "token_offsets": offsets}, ...])
    rewards[0].token_rewards      # list[float], one per response token
    rewards[0].token_label_signs  # list[int] in {-1, 0, 1} (FSPO)

Every call has a timeout. Connection errors, timeouts, 5xx and 429 answers are
retried ``max_retries`` times with exponential back-off (0.5 s, 1 s, 2 s, ...
capped at 10 s), or as long as a 503 / 429's ``Retry-After`` asks (the service's
backpressure answer), at most ``max_retry_after_s`` (30 s). Each failed attempt
is counted (``failures``, and the metric
``rlfh_call_failures_total{target="reward_service"}``) and logged.
After the last retry :class:`RewardServiceUnavailable` is raised (the driver
skips the batch and counts it). Any other 4xx answer (bad input, auth) is not
retried: :class:`RewardRequestError` carries the server's message, the field
and the item index.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Iterable, Mapping, Optional, Sequence

import httpx

from core import metrics
from core.config import RLFHConfig
from core.retry import backoff_delay, retry_after_s
from reward_service.schemas import ItemReward

log = logging.getLogger(__name__)

__all__ = ["RewardClient", "ItemReward", "RewardRequestError", "RewardServiceUnavailable", "client_from_env"]

#: The environment variables :func:`client_from_env` reads (meaning and defaults as in ``rlfh config``).
CLIENT_ENV = ("REWARD_URL", "REWARD_API_TOKEN", "REWARD_TIMEOUT_S", "REWARD_MAX_RETRIES", "MAX_BATCH_ITEMS")


class RewardRequestError(Exception):
    """The service rejected the request (4xx). ``message`` is the server's explanation."""

    def __init__(self, status: int, message: str, field: Optional[str] = None, item_index: Optional[int] = None,
                 body: Any = None):
        self.status = status
        self.message = message
        self.field = field
        self.item_index = item_index
        self.body = body
        super().__init__(f"HTTP {status}: {message}")


class RewardServiceUnavailable(Exception):
    """The service could not be reached or kept failing (5xx) after all retries."""


def _item_dict(item: Any) -> dict:
    if hasattr(item, "model_dump"):
        d = item.model_dump(exclude_none=True)
    elif isinstance(item, Mapping):
        d = {k: v for k, v in item.items() if v is not None}
    else:
        raise TypeError(f"reward items must be dicts or pydantic models, got {type(item).__name__}")
    off = d.get("token_offsets")
    if off is not None and hasattr(off, "tolist"):
        d["token_offsets"] = off.tolist()
    return d


class RewardClient:
    """HTTP client of ``/v1/rewards``, ``/v1/verify``, ``/get_reward``, ``/healthz``, ``/v1/stats``.

    Args:
        url: base URL, e.g. ``http://127.0.0.1:8000``.
        token: bearer token (``REWARD_API_TOKEN``) or None.
        timeout_s: timeout of one HTTP attempt (connect, read, write), seconds.
        max_retries: retries after the first attempt on connection errors / timeouts / 5xx.
        backoff_s: first back-off; doubles per retry, capped at ``max_backoff_s``.
        max_retry_after_s: the longest wait a 503 / 429 ``Retry-After`` header may ask for (a longer one is cut to
            this; the back-off applies when it asks for less or is absent).
        batch_size: split ``rewards()`` into requests of at most this many items (None: one request).
    """

    def __init__(self, url: str, token: Optional[str] = None, timeout_s: float = 120.0, max_retries: int = 3,
                 backoff_s: float = 0.5, max_backoff_s: float = 10.0, batch_size: Optional[int] = None,
                 transport: Optional[httpx.BaseTransport] = None, max_retry_after_s: float = 30.0):
        if not url:
            raise ValueError("RewardClient: url is empty (set REWARD_URL or deploy the service)")
        if timeout_s <= 0:
            raise ValueError(f"RewardClient: timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"RewardClient: max_retries must be >= 0, got {max_retries}")
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_retry_after_s = float(max_retry_after_s)
        self.batch_size = batch_size
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(self.timeout_s),
                                  transport=transport)
        self.requests = 0          # HTTP attempts
        self.failures = 0          # failed attempts (connection errors, timeouts, 5xx)
        self.unavailable = 0       # calls that gave up after all retries
        self.last_error: Optional[str] = None

    @classmethod
    def from_config(cls, cfg: Any, url: Optional[str] = None) -> "RewardClient":
        """From an ``RLFHConfig`` (REWARD_URL, REWARD_API_TOKEN, REWARD_TIMEOUT_S, REWARD_MAX_RETRIES)."""
        return cls(url or cfg.reward_url, token=cfg.reward_api_token or None, timeout_s=cfg.reward_timeout_s,
                   max_retries=cfg.reward_max_retries, batch_size=cfg.max_batch_items)

    # ---------------------------------------------------------------- transport
    def _request(self, method: str, path: str, json: Any = None) -> Any:
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            self.requests += 1
            retry_after = None
            try:
                resp = self._http.request(method, path, json=json)
            except httpx.TransportError as e:   # connect errors, timeouts, broken connections
                reason = f"{type(e).__name__}: {e}"
            else:
                try:
                    body, is_json = resp.json(), True
                except ValueError:
                    body, is_json = resp.text, False
                if resp.status_code < 400 and is_json:
                    return body
                if resp.status_code < 400:   # 2xx that is not JSON (a proxy's page, a truncated body): retried
                    body = f"HTTP {resp.status_code} answer is not JSON: {body[:200]!r}"
                elif resp.status_code < 500 and resp.status_code != 429:
                    message = body.get("error") if isinstance(body, dict) else str(body)
                    if isinstance(body, dict) and not message:
                        message = str(body.get("detail"))
                    field = None
                    if isinstance(body, dict) and body.get("detail") and isinstance(body["detail"], list):
                        field = body["detail"][0].get("field") if isinstance(body["detail"][0], dict) else None
                    raise RewardRequestError(resp.status_code, message or resp.reason_phrase, field=field,
                                             item_index=body.get("item_index") if isinstance(body, dict) else None,
                                             body=body)
                if resp.status_code in (429, 503):
                    retry_after = retry_after_s(resp.headers.get("retry-after"))
                reason = (body if resp.status_code < 400 else
                          f"HTTP {resp.status_code}: " + (body.get("error", "") if isinstance(body, dict)
                                                          else str(body)[:300]))
            self.failures += 1
            self.last_error = reason
            metrics.inc("rlfh_call_failures_total", 1, {"target": "reward_service"})
            if attempt + 1 < attempts:
                delay = backoff_delay(attempt, self.backoff_s, self.max_backoff_s)
                if retry_after is not None:   # the service said when to come back: honour it, within a bound
                    delay = max(delay, min(retry_after, self.max_retry_after_s))
                log.warning("reward service %s %s failed (%s); retry %d/%d in %.1fs", method, path, reason,
                            attempt + 1, self.max_retries, delay)
                time.sleep(delay)
        self.unavailable += 1
        log.error("reward service %s %s failed %d time(s), giving up: %s", method, path, attempts, self.last_error)
        raise RewardServiceUnavailable(
            f"{method} {self.url}{path} failed {attempts} time(s); last error: {self.last_error}")

    # ---------------------------------------------------------------- API
    def rewards(self, items: Sequence[Any], overrides: Optional[Mapping[str, Any]] = None,
                return_verification: bool = False) -> list[ItemReward]:
        """Per-token rewards for ``items`` (dicts with question, response, materials, gold_answer, token_offsets).

        Returns one :class:`ItemReward` per item, in order.
        """
        payload_items = [_item_dict(it) for it in items]
        if not payload_items:
            return []
        size = self.batch_size or len(payload_items)
        out: list[ItemReward] = []
        for start in range(0, len(payload_items), size):
            body: dict[str, Any] = {"items": payload_items[start:start + size]}
            if overrides:
                body["overrides"] = dict(overrides)
            if return_verification:
                body["return_verification"] = True
            try:
                data = self._request("POST", "/v1/rewards", body)
            except RewardRequestError as e:
                if e.item_index is not None and start:
                    e.item_index += start
                raise
            got = data.get("items") if isinstance(data, dict) else None
            sent = len(body["items"])
            if not isinstance(got, list) or len(got) != sent:
                # never pair rewards with the wrong responses: a short answer is a failed call, not a result
                self.unavailable += 1
                raise RewardServiceUnavailable(
                    f"POST {self.url}/v1/rewards answered {len(got) if isinstance(got, list) else 'no'} item(s) "
                    f"for {sent} sent; is REWARD_URL a reward service of this version?")
            out.extend(ItemReward.model_validate(d) for d in got)
        return out

    def verify(self, question: str, response: str, materials: Iterable[str] = (),
               gold_answer: Optional[str] = None) -> dict:
        """The verifier's result (statements, labels) as a dict."""
        return self._request("POST", "/v1/verify", {"question": question, "response": response,
                                                    "materials": list(materials), "gold_answer": gold_answer})

    def get_reward(self, query: list[str], prompts: Optional[list[str]] = None,
                   labels: Optional[list[str]] = None) -> dict:
        """OpenRLHF protocol: ``{rewards, scores, extra_logs}``."""
        return self._request("POST", "/get_reward", {"query": query, "prompts": prompts, "labels": labels})

    def healthz(self) -> dict:
        return self._request("GET", "/healthz")

    def stats(self) -> dict:
        return self._request("GET", "/v1/stats")

    def wait_ready(self, timeout_s: float = 60.0) -> dict:
        """Poll ``/healthz`` until it answers (no retry counting), or raise RewardServiceUnavailable."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                r = self._http.get("/healthz", timeout=min(5.0, self.timeout_s))
                if r.status_code == 200:
                    return r.json()
                last = f"HTTP {r.status_code}"
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            time.sleep(0.25)
        raise RewardServiceUnavailable(f"{self.url}/healthz not ready after {timeout_s:.0f}s ({last})")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def client_from_env(url: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
                    **overrides: Any) -> RewardClient:
    """A RewardClient from ``REWARD_URL``, ``REWARD_API_TOKEN``, ``REWARD_TIMEOUT_S``, ``REWARD_MAX_RETRIES`` and
    ``MAX_BATCH_ITEMS`` (batch size), read and validated by :class:`core.config.RLFHConfig`: how the integrations
    (OpenRLHF's reward function, TRL, verl) build their client, configured like the rest of rlfh.

    Only those variables are read, so a trainer's unrelated environment (its own ``MODEL_PATH``...) cannot
    break the reward function. ``url`` and keyword ``overrides`` (``timeout_s``, ``max_retries``,
    ``batch_size``, ``token``) win over the environment. Raises ``ValueError`` when no URL is given.
    """
    env = os.environ if environ is None else environ
    cfg = RLFHConfig.load(environ={k: env[k] for k in CLIENT_ENV if env.get(k)})
    url = url or cfg.reward_url
    if not url:
        raise ValueError("no reward service URL: set REWARD_URL (e.g. http://127.0.0.1:8000) or pass url=")
    kw: dict[str, Any] = {"token": cfg.reward_api_token or None, "timeout_s": cfg.reward_timeout_s,
                          "max_retries": cfg.reward_max_retries, "batch_size": cfg.max_batch_items}
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return RewardClient(url, **kw)
