"""The llm judge under a hosted endpoint's limits: LLM_MAX_RPM / _TPM / _IN_FLIGHT, 429 + Retry-After.

The limiter's rule is checked with a fake clock (no sleeping). The HTTP behaviour is checked against a real local
OpenAI-compatible server (http.server on a free loopback port) that enforces a request limit the way a provider
does: more than ``limit`` requests within ``window_s`` seconds answer 429, with a ``Retry-After`` header or without
one. The server records every arrival, so the tests read what the client really sent: never more than the limit in
any window, never more than the in-flight limit at once, a retry no earlier than the server asked, a bounded number
of attempts. Windows are ~1 s and Retry-After 1 s, so the tests take seconds.
"""
from __future__ import annotations

import json
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import HANG_S, free_port  # not tests.conftest: openrlhf installs a top-level "tests" package
from core import metrics
from core.config import ConfigError, RLFHConfig
from core.retry import retry_after_s
from core.verify_schema import VerifyRequest
from verifier_service.core import Verifier
from verifier_service.llm_backend import judge_time_bound_s, http_chat_fn
from verifier_service.rate_limit import RateLimiter, estimate_tokens

MATERIALS = ["Jonathan Stark (born April 3, 1971) is a former professional tennis player from the United States. "
             "During his career he won two Grand Slam doubles titles."]
QUESTION = "How many Grand Slam doubles titles did Jonathan Stark win?"
RESPONSE = "He won two Grand Slam doubles titles."
EXTRACT_REPLY = json.dumps({"sentences": [{"id": 1,
                                            "statements": ["Jonathan Stark won two Grand Slam doubles titles"]}]})
VERIFY_REPLY = json.dumps({"results": [{"id": "S1", "label": "Correct", "informativeness": 5, "confidence": 0.9,
                                        "evidence": ["E1"]}]})


# ----------------------------------------------------------------------------- a fake clock

class FakeClock:
    """Monotonic seconds that move only when the limiter sleeps (or the test says so)."""

    def __init__(self):
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _limiter(clock: FakeClock, **kw) -> RateLimiter:
    return RateLimiter(clock=clock, sleep=clock.sleep, **kw)


# ----------------------------------------------------------------------------- the rule, without sleeping

def test_request_window_admits_at_most_the_limit_in_any_window():
    clock = FakeClock()
    lim = _limiter(clock, max_requests=3, period_s=1.0)
    for _ in range(3):
        ticket, wait = lim.try_acquire()
        assert ticket is not None and wait == 0
        lim.release(ticket)
    assert lim.try_acquire() == (None, pytest.approx(1.0))    # the 4th waits for the 1st to leave the window
    clock.now += 0.4
    assert lim.wait_s() == pytest.approx(0.6)
    # acquire sleeps exactly that long (on the fake clock), then admits
    admitted = []
    for _ in range(7):
        t = lim.acquire(max_wait_s=10.0)
        admitted.append(t.admitted_at)
        lim.release(t)
    times = [1000.0] * 3 + admitted
    assert all(b - a >= 1.0 - 1e-9 for a, b in zip(times, times[3:])), times   # any 4 span a whole period
    assert admitted[0] == pytest.approx(1001.0) and admitted[3] == pytest.approx(1002.0)


def test_token_window_uses_the_estimate_and_the_reported_usage():
    clock = FakeClock()
    lim = _limiter(clock, max_tokens=100, period_s=60.0)
    first, _ = lim.try_acquire(60)
    assert first is not None
    assert lim.try_acquire(50) == (None, pytest.approx(60.0))   # 60 + 50 > 100 until the first leaves
    lim.release(first, used_tokens=10)                          # the server said it cost 10
    second, _ = lim.try_acquire(50)
    assert second is not None
    lim.release(second, used_tokens=0)                          # 0 / absent usage: the estimate stays
    assert lim.wait_s(41) == pytest.approx(60.0) and lim.wait_s(40) == 0
    # a call estimated above the whole limit goes alone, once the window is empty (else never)
    clock.now += 60.0
    big, wait = lim.try_acquire(500)
    assert big is not None and wait == 0
    assert lim.wait_s(1) == pytest.approx(60.0)
    assert estimate_tokens([{"role": "user", "content": "x" * 401}], max_tokens=64) == 101 + 64


def test_in_flight_limit_blocks_until_a_release():
    lim = RateLimiter(max_in_flight=2)
    a, _ = lim.try_acquire()
    b, _ = lim.try_acquire()
    assert lim.try_acquire() == (None, None) and lim.wait_s() is None and lim.in_flight == 2
    got = []
    waiter = threading.Thread(target=lambda: got.append(lim.acquire(max_wait_s=HANG_S)))
    waiter.start()
    time.sleep(0.1)
    assert not got                                  # still blocked: both slots are taken
    lim.release(a)
    waiter.join(timeout=HANG_S)
    assert got and got[0] is not None and lim.in_flight == 2
    lim.release(a)                                  # a second release of the same ticket is a no-op
    assert lim.in_flight == 2
    t0 = time.monotonic()
    assert lim.acquire(max_wait_s=0.2) is None      # full: gives up after its budget
    assert time.monotonic() - t0 >= 0.2
    lim.release(b)
    lim.release(got[0])
    assert lim.in_flight == 0


def test_a_wait_longer_than_the_budget_is_not_started_and_a_pause_holds_everything():
    clock = FakeClock()
    lim = _limiter(clock, max_requests=1, period_s=60.0)
    lim.release(lim.acquire())
    assert lim.acquire(max_wait_s=5.0) is None and clock.slept == []     # 60 s > 5 s: refused at once, no sleep
    unlimited = _limiter(clock)
    unlimited.pause(2.0)
    unlimited.pause(0.5)                            # a shorter pause does not cut a running one
    assert unlimited.wait_s() == pytest.approx(2.0)
    t = unlimited.acquire(max_wait_s=3.0)
    assert t is not None and clock.slept == [pytest.approx(2.0)]


def test_limiter_rejects_bad_limits():
    for kw in ({"max_requests": -1}, {"max_tokens": 1.5}, {"max_in_flight": -2}, {"period_s": 0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            RateLimiter(**kw)


def test_retry_after_header_forms():
    assert retry_after_s("2") == 2.0 and retry_after_s(" 0.5 ") == 0.5 and retry_after_s("-3") == 0.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0    # in the past: go now
    for junk in (None, "", "soon", "nan", "inf"):
        assert retry_after_s(junk) is None


# ----------------------------------------------------------------------------- settings

def test_settings_defaults_map_to_the_limiter_and_bad_values_name_the_variable():
    cfg = RLFHConfig.load(environ={})
    assert (cfg.llm_max_rpm, cfg.llm_max_tpm, cfg.llm_max_in_flight, cfg.llm_max_wait_s) == (0, 0, 8, 30.0)
    lim = RateLimiter.from_config(RLFHConfig.load(environ={"LLM_MAX_RPM": "500", "LLM_MAX_TPM": "90000",
                                                           "LLM_MAX_IN_FLIGHT": "4"}))
    assert (lim.max_requests, lim.max_tokens, lim.max_in_flight, lim.period_s) == (500, 90000, 4, 60.0)
    for env, value in (("LLM_MAX_RPM", "-1"), ("LLM_MAX_RPM", "fast"), ("LLM_MAX_TPM", "1.5"),
                       ("LLM_MAX_IN_FLIGHT", "0"), ("LLM_MAX_IN_FLIGHT", "1000"), ("LLM_MAX_WAIT_S", "-1"),
                       ("LLM_MAX_WAIT_S", "inf")):
        with pytest.raises(ConfigError, match=f"{env} .*{value}"):
            RLFHConfig.load(environ={env: value})
    # the time a caller waits for a verifier chunk covers the waits to be sent, per attempt
    bound = judge_time_bound_s(RLFHConfig.load(environ={}, llm_timeout_s=10, llm_max_retries=1,
                                               llm_max_wait_s=5))
    assert bound == pytest.approx(2 * (2 * (10 + 5) + 0.5))


# ----------------------------------------------------------------------------- a provider-like server

class LimitedServer:
    """An OpenAI-compatible chat server that allows ``limit`` requests per ``window_s`` (0: no limit).

    Over the limit it answers 429 with ``Retry-After`` (``retry_after``: a number of seconds, ``"date"`` for an
    HTTP date ``retry_after_date_s`` ahead, or None for no header). ``fail_first`` answers the first N requests 429
    regardless. Every request is recorded: arrival (monotonic), status, when the answer left, how many were being
    handled at once. Replies: the judge's extract / verify answers by prompt, else ``"ok"``; ``usage`` reports
    ``usage_tokens`` when given.
    """

    def __init__(self, *, limit: int = 0, window_s: float = 1.0, retry_after="1", retry_after_date_s: float = 2.0,
                 fail_first: int = 0, delay_s: float = 0.0, usage_tokens: int | None = None):
        self.limit, self.window_s, self.retry_after = limit, window_s, retry_after
        self.retry_after_date_s, self.fail_first, self.delay_s = retry_after_date_s, fail_first, delay_s
        self.usage_tokens = usage_tokens
        self.log: list[dict] = []         # one per request: t (arrival), status, sent (answer left), wall_sent
        self.accepted: list[float] = []   # arrivals of the requests answered 200 (what the limit counts)
        self.active = self.max_active = 0
        self.lock = threading.Lock()
        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def statuses(self) -> list[int]:
        return [r["status"] for r in self.log]

    def _decide(self, now: float) -> tuple[int, dict]:
        with self.lock:
            n = len(self.log) + 1
            recent = [t for t in self.accepted if t > now - self.window_s]
            if n <= self.fail_first or (self.limit and len(recent) >= self.limit):
                if self.retry_after is None:
                    return 429, {}
                if self.retry_after == "date":
                    return 429, {"Retry-After": formatdate(time.time() + self.retry_after_date_s, usegmt=True)}
                return 429, {"Retry-After": str(self.retry_after)}
            self.accepted.append(now)
            return 200, {}

    def _reply(self, body: dict) -> dict:
        last = body["messages"][-1]["content"]
        text = EXTRACT_REPLY if "atomic statements" in last else VERIFY_REPLY if "For every statement give" in last \
            else "ok"
        out = {"id": "x", "object": "chat.completion", "model": body.get("model", "m"),
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        if self.usage_tokens is not None:
            out["usage"] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": self.usage_tokens}
        return out

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):   # quiet
                pass

            def do_POST(self):
                now = time.monotonic()
                with server.lock:
                    server.active += 1
                    server.max_active = max(server.max_active, server.active)
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    status, headers = server._decide(now)
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    payload = json.dumps(server._reply(body) if status == 200 else
                                         {"error": {"message": "rate limit", "type": "rate_limit"}}).encode()
                    with server.lock:
                        server.active -= 1
                        server.log.append({"t": now, "status": status, "sent": time.monotonic(),
                                           "wall_sent": time.time(), "headers": headers})
                    self.send_response(status)
                    for k, v in {**headers, "Content-Type": "application/json",
                                 "Content-Length": str(len(payload))}.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except Exception:
                    with server.lock:
                        server.active = max(0, server.active - 1)
                    raise

        return Handler


def _cfg(url: str, **kw) -> RLFHConfig:
    base = dict(model_url=url, annotate_model="judge", llm_timeout_s=10.0, llm_max_retries=2,
                llm_max_wait_s=5.0)
    base.update(kw)
    return RLFHConfig.load(environ={}, **base)


def _convs(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"question {i}"}] for i in range(n)]


@pytest.fixture
def metric_spy(monkeypatch):
    """Record metric increments (metrics are no-ops outside Ray; the call itself is what we check)."""
    seen = []
    monkeypatch.setattr(metrics, "inc", lambda name, value=1.0, tags=None: seen.append((name, value, dict(tags or {}))))
    return seen


def _rate_limited(seen) -> dict:
    out: dict = {}
    for name, value, tags in seen:
        if name == "rlfh_judge_rate_limited_total":
            out[tags["retry_after"]] = out.get(tags["retry_after"], 0) + value
    return out


# ----------------------------------------------------------------------------- over HTTP

def test_the_client_stays_under_the_request_limit(metric_spy):
    """9 conversations at once against a server that allows 3 per 0.8 s: without a limit the server refuses most
    (so the server really enforces); with 3 per second the client never crosses it."""
    with LimitedServer(limit=3, window_s=0.8) as srv:
        chat = http_chat_fn(_cfg(srv.url), limiter=RateLimiter())
        assert chat(_convs(9)).count("ok") < 9 and 429 in srv.statuses()
    metric_spy.clear()
    with LimitedServer(limit=3, window_s=0.8) as srv:
        chat = http_chat_fn(_cfg(srv.url), limiter=RateLimiter(max_requests=3, period_s=1.0))
        replies = chat(_convs(9))
        arrivals = sorted(r["t"] for r in srv.log)
    assert replies == ["ok"] * 9 and srv.statuses() == [200] * 9
    # from the server's clock: any 4 consecutive arrivals span more than the server's window
    assert all(b - a > 0.8 for a, b in zip(arrivals, arrivals[3:])), arrivals
    assert _rate_limited(metric_spy) == {}


def test_the_client_stays_under_the_in_flight_limit():
    with LimitedServer(delay_s=0.3) as srv:
        chat = http_chat_fn(_cfg(srv.url, llm_max_in_flight=8))
        assert chat(_convs(8)) == ["ok"] * 8
        assert srv.max_active > 2                     # the control: 8 threads do send at once
    with LimitedServer(delay_s=0.3) as srv:
        chat = http_chat_fn(_cfg(srv.url, llm_max_in_flight=2))
        assert chat(_convs(8)) == ["ok"] * 8
        assert srv.max_active <= 2
    # a limiter shared by callers binds them together, whatever their thread pools
    with LimitedServer(delay_s=0.3) as srv:
        shared = RateLimiter(max_in_flight=2)
        a = http_chat_fn(_cfg(srv.url, llm_max_in_flight=8), limiter=shared)
        b = http_chat_fn(_cfg(srv.url, llm_max_in_flight=8), limiter=shared)
        outs = []
        threads = [threading.Thread(target=lambda f=f: outs.append(f(_convs(4)))) for f in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=HANG_S)
        assert outs == [["ok"] * 4] * 2 and srv.max_active <= 2 and shared.in_flight == 0


def test_the_token_limit_uses_the_reported_usage():
    """A token window of 250 over 30 s, calls estimated at ~105 tokens each (max_tokens 100), one at a time: when
    the server reports 10 tokens per call all five go out; when it reports none, the third would wait ~30 s, more
    than LLM_MAX_WAIT_S, and is not sent."""
    conv = [{"role": "user", "content": "x" * 20}]
    assert estimate_tokens(conv, 100) == 105
    with LimitedServer(usage_tokens=10) as srv:
        chat = http_chat_fn(_cfg(srv.url, llm_max_wait_s=1.0), max_tokens=100,
                            limiter=RateLimiter(max_tokens=250, period_s=30.0))
        assert [chat([conv])[0] for _ in range(5)] == ["ok"] * 5 and len(srv.log) == 5
    with LimitedServer(usage_tokens=None) as srv:
        chat = http_chat_fn(_cfg(srv.url, llm_max_wait_s=1.0), max_tokens=100,
                            limiter=RateLimiter(max_tokens=250, period_s=30.0))
        t0 = time.monotonic()
        assert [chat([conv])[0] for _ in range(3)] == ["ok", "ok", None] and len(srv.log) == 2
        assert time.monotonic() - t0 < HANG_S         # refused at once, not after waiting


def _verifier(url: str, **kw) -> Verifier:
    return Verifier(_cfg(url, **kw), backend="llm")


def _req() -> VerifyRequest:
    return VerifyRequest(question=QUESTION, response=RESPONSE, materials=MATERIALS)


def test_retry_after_is_waited_out_and_counted_not_backed_off(metric_spy):
    """The first call gets 429 + Retry-After: 1. The retry arrives no earlier than 1 s after that answer left, and
    without the back-off (10 s here: a blind back-off would put it past 10 s)."""
    with LimitedServer(fail_first=1, retry_after="1") as srv:
        v = _verifier(srv.url)
        v.backend.backoff_s = v.backend.max_backoff_s = 10.0
        res = v.verify(_req())
        log = list(srv.log)
    assert [r["status"] for r in log] == [429, 200, 200]           # extract (refused, retried), verify
    gap = log[1]["t"] - log[0]["sent"]
    assert 1.0 <= gap < 9.0, gap
    assert res.num_fallback == 0 and res.statements()[0].label == "Correct"
    assert _rate_limited(metric_spy) == {"honoured": 1}


def test_retry_after_as_an_http_date_is_honoured(metric_spy):
    with LimitedServer(fail_first=1, retry_after="date", retry_after_date_s=2.0) as srv:
        chat = http_chat_fn(_cfg(srv.url))
        first = chat(_convs(1))[0]
        assert type(first).__name__ == "RetryAfter" and not first.too_long
        assert chat(_convs(1)) == ["ok"]                           # the limiter held it back until the date
        log = list(srv.log)
    asked = retry_after_s(log[0]["headers"]["Retry-After"], now=log[0]["wall_sent"])
    assert asked > 0.5                                            # the date is whole seconds: 1-2 s ahead
    assert log[1]["t"] - log[0]["sent"] >= asked - 0.05           # (date and monotonic clocks differ by a hair)
    assert _rate_limited(metric_spy) == {"honoured": 1}


def test_429_without_retry_after_uses_the_back_off(metric_spy):
    with LimitedServer(fail_first=1, retry_after=None) as srv:
        v = _verifier(srv.url)
        v.backend.backoff_s = 0.5
        res = v.verify(_req())
        log = list(srv.log)
    assert [r["status"] for r in log] == [429, 200, 200]
    assert log[1]["t"] - log[0]["sent"] >= 0.5
    assert res.num_fallback == 0 and _rate_limited(metric_spy) == {"absent": 1}


def test_retries_under_429_are_bounded_then_the_counted_fallback(metric_spy):
    """A server that always answers 429 + Retry-After 0.2: each stage tries 1 + LLM_MAX_RETRIES times."""
    with LimitedServer(fail_first=10_000, retry_after="0.2") as srv:
        v = _verifier(srv.url, llm_max_retries=2)
        res = v.verify(_req())
        calls = len(srv.log)
    assert calls == 2 * 3                                          # (extract, verify) x (1 + 2 retries)
    assert res.num_fallback == res.num_statements == 1
    assert _rate_limited(metric_spy) == {"honoured": 6}
    fallbacks = sum(v for n, v, _ in metric_spy if n == "rlfh_judge_fallbacks_total")
    failures = sum(v for n, v, _ in metric_spy if n == "rlfh_call_failures_total")
    assert fallbacks == 1 and failures == 6


def test_a_retry_after_beyond_the_max_wait_is_not_retried_and_holds_later_calls(metric_spy):
    """Retry-After: 120 with LLM_MAX_WAIT_S=2: the conversation gives up at once (fallback label), and while the
    server's time runs nothing else is sent to it (a later call fails fast instead of asking again)."""
    with LimitedServer(fail_first=1, retry_after="120") as srv:
        v = _verifier(srv.url, llm_max_wait_s=2.0)
        v.backend.backoff_s = 0.01
        t0 = time.monotonic()
        res = v.verify(_req())
        failures = sum(v for n, v, _ in metric_spy if n == "rlfh_call_failures_total")
        again = v.verify(_req())
        elapsed = time.monotonic() - t0
        calls = len(srv.log)
    assert calls == 1                                              # neither the retry nor the second call was sent
    assert res.num_fallback == res.num_statements == 1 and again.num_fallback == again.num_statements == 1
    assert _rate_limited(metric_spy) == {"too_long": 1}
    # extraction: the one 429, not retried; verification: 1 + 2 attempts refused before sending
    assert failures == 1 + 3
    assert elapsed < HANG_S
