"""Hostile input against the real reward service (Ray Serve over real HTTP, real Verifier, real Redis).

Every input of issue 12's findings 1-3 (and their neighbours) answers its documented 4xx with the documented
ErrorBody naming the field; none answers 5xx; auth is checked before the body is read; the body limit holds
while a chunked body streams in; and afterwards ``/healthz`` is still ok and the service still rewards.
Then, on the same service: it is warm when it says ready, a full queue answers 503 with ``Retry-After``,
and ``/healthz`` reports a SIGSTOPped verifier replica as ``stalled`` (503) within its bound, then recovers.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

import httpx
import pytest

from conftest import HANG_S
from core.config import RLFHConfig
from reward_service.schemas import MAX_BODY_BYTES, ErrorBody

pytestmark = pytest.mark.slow

TOKEN = "hostile-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def service(redis_url, serve_ray):
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # ship slow_factory to the replicas
    cfg = RLFHConfig.load(environ={}, redis_url=redis_url, reward_api_token=TOKEN, max_batch_items=8,
                          verifier_num_cpus=0.2, reward_num_cpus=0.2)
    # on the Ray + Serve the service modules share (tests/conftest.py); a tiny queue (2 running + 2 queued at the
    # proxy) so that overload is reachable in the last tests
    with serve_ray.app(cfg, verifier_factory=slow_factory,
                       reward_options={"max_ongoing_requests": 2, "max_queued_requests": 2}) as url:
        yield url


@pytest.fixture(scope="module")
def http(service):
    with httpx.Client(base_url=service, headers=AUTH, timeout=60) as c:
        yield c


def _item(**kw):
    d = {"question": "Where is the head office of the Oberoi Group?", "response": "It is in Delhi.",
         "materials": ["The Oberoi Group is a hotel company with its head office in Delhi."],
         "token_offsets": [[0, 2], [2, 5], [5, 8], [8, 14], [14, 15]]}
    d.update(kw)
    return d


def _label(**kw) -> str:
    return json.dumps(kw)


# (name, route, raw JSON body (str: sent as UTF-8; bytes: as is), status, field the error names)
CORPUS = [
    # finding 1: overflowing settings used to answer 500 (Infinity is not JSON)
    ("huge truth_weight and clip", "/v1/rewards",
     json.dumps({"items": [_item()], "overrides": {"truth_weight": 1e308, "reward_clip": 1e308}}), 422,
     "overrides.truth_weight"),
    ("huge reward_mu", "/v1/rewards", json.dumps({"items": [_item()], "overrides": {"reward_mu": 1e308}}), 422,
     "overrides.reward_mu"),
    ("huge info_weight", "/v1/rewards", json.dumps({"items": [_item()], "overrides": {"info_weight": -1e308}}), 422,
     "overrides.info_weight"),
    ("huge map value", "/v1/rewards",
     json.dumps({"items": [_item()], "overrides": {"verification_map": {"Correct": 1e300}}}), 422,
     "overrides.verification_map.Correct"),
    ("NaN literal", "/v1/rewards", '{"items": [' + json.dumps(_item()) + '], "overrides": {"info_weight": NaN}}',
     422, "overrides.info_weight"),
    ("huge offset integer", "/v1/rewards", json.dumps({"items": [_item(token_offsets=[[0, 10 ** 30]])]}), 422,
     "items.0.token_offsets"),
    # finding 1: /get_reward labels
    ("65 knowledge passages", "/get_reward",
     json.dumps({"query": ["Q? It is in Delhi."], "prompts": ["Q?"],
                 "labels": [_label(knowledge=[f"passage {i}" for i in range(65)], answer="Delhi")]}), 422,
     "labels.0"),
    ("knowledge over 200k characters", "/get_reward",
     json.dumps({"query": ["Q? It is in Delhi."], "prompts": ["Q?"],
                 "labels": [_label(knowledge=["Delhi is a city. " * 12_000], answer="Delhi")]}), 422, "labels.0"),
    ("lone high surrogate in label answer", "/get_reward",
     json.dumps({"query": ["Q? It is in Delhi."], "prompts": ["Q?"], "labels": ['{"answer": "\\ud800"}']}), 422,
     "labels.0.answer"),
    ("lone low surrogate in label question", "/get_reward",
     json.dumps({"query": ["Q? It is in Delhi."], "prompts": ["Q?"], "labels": ['{"question": "\\udfff"}']}),
     422, "labels.0.question"),
    ("lone surrogate in query", "/get_reward", '{"query": ["Q? It is in \\ud800 Delhi."], "prompts": ["Q?"]}',
     422, "query.0"),
    ("lone surrogate in response", "/v1/rewards",
     '{"items": [{"question": "q", "response": "a \\udc00 b", "token_offsets": [[0, 5]]}]}', 422,
     "items.0.response"),
    ("lone surrogate in a map key", "/v1/rewards",
     '{"items": [{"question": "q", "response": "r", "token_offsets": [[0, 1]]}], '
     '"overrides": {"verification_map": {"\\ud800": 1}}}', 422, "overrides.verification_map"),
    ("lone surrogate in verify question", "/v1/verify", '{"question": "\\ud800?", "response": "r"}', 422,
     "question"),
    # finding 3: parse failures used to answer a bare 400 outside the contract
    ("JSON nested 10,000 deep", "/v1/rewards", "[" * 10_000 + "]" * 10_000, 422, "body"),
    ("JSON object nested 10,000 deep", "/v1/verify", '{"a":' * 10_000 + "1" + "}" * 10_000, 422, "body"),
    ("invalid UTF-8", "/v1/verify", b'{"question": "q", "response": "\xff\xfe caf\xe9"}', 422, "body"),
    ("truncated JSON", "/v1/rewards", '{"items": [{"question": ', 422, "body"),
    ("empty body", "/v1/rewards", "", 422, "body"),
    # finding 3: no loose coercion
    ("string as a map number", "/v1/rewards",
     json.dumps({"items": [_item()], "overrides": {"verification_map": {"Correct": "1"}}}), 422,
     "overrides.verification_map.Correct"),
    ("false as an offset", "/v1/rewards", json.dumps({"items": [_item(token_offsets=[[0, False]])]}), 422,
     "items.0.token_offsets.0.1"),
    ("float as an offset", "/v1/rewards", json.dumps({"items": [_item(token_offsets=[[0, 1.0]])]}), 422,
     "items.0.token_offsets.0.1"),
    ("string as a bool", "/v1/rewards", json.dumps({"items": [_item()], "return_verification": "true"}), 422,
     "return_verification"),
    ("bool as a weight", "/v1/rewards", json.dumps({"items": [_item()], "overrides": {"truth_weight": True}}), 422,
     "overrides.truth_weight"),
    ("number as a question", "/v1/verify", json.dumps({"question": 5, "response": "r"}), 422, "question"),
    ("items not a list", "/v1/rewards", json.dumps({"items": "abc"}), 422, "items"),
    ("negative offset", "/v1/rewards", json.dumps({"items": [_item(token_offsets=[[-1, 2]])]}), 422,
     "items.0.token_offsets.0.0"),
]


def _check_error(r: httpx.Response, status: int, field: str) -> dict:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = ErrorBody.model_validate(r.json()).model_dump()     # the documented shape, nothing else
    assert body["status"] == status
    assert any(d["field"].startswith(field) for d in body["detail"]), (field, body)
    assert "Traceback" not in r.text and "pydantic" not in r.text.lower()
    return body


@pytest.mark.parametrize("name,route,body,status,field", CORPUS, ids=[c[0] for c in CORPUS])
def test_hostile_input_answers_documented_4xx(http, name, route, body, status, field):
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    r = http.post(route, content=raw, headers={"Content-Type": "application/json"})
    _check_error(r, status, field)


def test_method_and_path_errors_have_the_error_body(http):
    _check_error(http.get("/v1/rewards"), 405, "method")
    _check_error(http.post("/no/such/route", json={}), 404, "path")


# ------------------------------------------------------------------------------ auth before the body

def _raw(url: str, head: str, chunks=(), read_timeout: float = 30.0) -> tuple[int, dict, bytes, float]:
    """Send ``head`` (request line + headers) and ``chunks`` on a raw socket; read the answer.

    Returns (status, headers, body, seconds from the end of the head to the answer's first byte).
    Sending stops at the first chunk the server refuses (it answered and closed).
    """
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=read_timeout)
    try:
        s.sendall(head.encode("latin-1"))
        t0 = time.monotonic()
        for c in chunks:
            try:
                s.sendall(c)
            except OSError:
                break
        data = b""
        while b"\r\n\r\n" not in data:
            got = s.recv(65536)
            if not got:
                break
            data += got
        first = time.monotonic() - t0
        head_part, _, rest = data.partition(b"\r\n\r\n")
        lines = head_part.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(rest) < n:
            got = s.recv(65536)
            if not got:
                break
            rest += got
        return status, headers, rest, first
    finally:
        s.close()


def test_auth_is_checked_before_the_body_is_read(service):
    # 50 MB announced, none sent: a 401 can only come back if the body is not awaited
    for auth in ("", "Authorization: Bearer wrong\r\n", "Authorization: Basic " + TOKEN + "\r\n"):
        status, headers, body, _ = _raw(service, "POST /v1/rewards HTTP/1.1\r\nHost: x\r\n"
                                        "Content-Type: application/json\r\nContent-Length: 50000000\r\n"
                                        f"{auth}\r\n", read_timeout=20)
        assert status == 401, body[:300]
        assert json.loads(body)["detail"][0]["field"] == "Authorization"
        assert headers.get("www-authenticate") == "Bearer"


def test_docs_and_openapi_need_the_token(service):
    with httpx.Client(base_url=service, timeout=30) as anon:
        for path in ("/docs", "/redoc", "/openapi.json", "/v1/stats"):
            _check_error(anon.get(path), 401, "Authorization")
        assert anon.get("/healthz").status_code == 200          # the probe needs no secret
    with httpx.Client(base_url=service, headers=AUTH, timeout=30) as c:
        assert c.get("/openapi.json").json()["info"]["title"] == "RLFH reward service"
        assert c.get("/docs").status_code == 200


def test_declared_oversized_body_is_413_without_reading_it(service):
    status, _, body, _ = _raw(service, "POST /v1/rewards HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {MAX_BODY_BYTES + 1}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
                              read_timeout=20)
    assert status == 413 and json.loads(body)["detail"][0]["field"] == "body"


def test_chunked_body_over_the_limit_is_413_while_streaming(service):
    """No Content-Length: the limit must hold as the body streams in, and the answer must come before the
    client has finished (the body is never read in full)."""
    chunk = b"[" + b"0," * (512 * 1024) + b"0]"                 # ~1 MiB of valid-looking JSON
    n_chunks = MAX_BODY_BYTES // len(chunk) + 40                # 40 MiB more than the limit would be sent

    def chunks():
        for _ in range(n_chunks):
            yield b"%x\r\n" % len(chunk) + chunk + b"\r\n"
        yield b"0\r\n\r\n"

    status, _, body, _ = _raw(service, "POST /v1/rewards HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              f"Transfer-Encoding: chunked\r\nAuthorization: Bearer {TOKEN}\r\n\r\n", chunks(),
                              read_timeout=120)
    err = json.loads(body)
    assert status == 413, err
    assert "while streaming" in err["detail"][0]["message"]


# ------------------------------------------------------------------------------ after all that

def test_service_is_healthy_and_counted_no_5xx(http):
    h = http.get("/healthz")
    assert h.status_code == 200 and h.json()["status"] == "ok", h.text
    # a good request still gets its reward after the hostile ones
    r = http.post("/v1/rewards", json={"items": [_item()]})
    assert r.status_code == 200, r.text
    assert r.json()["items"][0]["num_tokens"] == 5
    g = http.post("/get_reward", json={"query": ["Q? It is in Delhi."], "prompts": ["Q?"],
                                       "labels": [_label(knowledge=["The head office is in Delhi."],
                                                         question="Where is the head office?", answer="Delhi")]})
    assert g.status_code == 200, g.text
    counters = http.get("/v1/stats").json()["counters"]
    five_xx = {k: v for k, v in counters["requests"].items() if k.split()[-1].startswith("5")}
    assert not five_xx, counters["requests"]
    assert counters.get("auth_failures", 0) >= 3


# ------------------------------------------------------------------------------ health and backpressure
# The same service: its verifier takes SLOW_S on responses holding SLOW_MARKER, its reward deployment has a tiny
# queue. These run last: they overload and stall it on purpose (a /healthz 503 is counted as a 5xx).

SLOW_MARKER = "<<slow-verifier>>"
SLOW_S = 3.0


def slow_factory(cfg):
    from verifier_service.core import Verifier

    class SlowVerifier(Verifier):
        def verify_many(self, reqs):
            if any(SLOW_MARKER in r.response for r in reqs):
                time.sleep(SLOW_S)
            return super().verify_many(reqs)

    return SlowVerifier(cfg)


def _slow_item(i: int, slow: bool = False) -> dict:
    text = f"Answer {i} is Delhi." + (f" {SLOW_MARKER}" if slow else "")
    return {"question": "Where is the head office?", "response": text,
            "materials": ["The head office is in Delhi."], "token_offsets": [[0, len(text)]]}


def test_ready_means_warm(service):
    h = httpx.get(f"{service}/healthz", timeout=30)
    assert h.status_code == 200 and h.json()["status"] == "ok", h.text
    assert h.json()["tokenizer"] is True            # loaded before Serve routed the first request here
    assert h.json()["verifier_probe"]["ok"] is True
    t0 = time.monotonic()
    r = httpx.post(f"{service}/v1/rewards", json={"items": [{"question": "Where?", "response": "In Delhi."}]},
                   timeout=60, headers=AUTH)                       # no offsets: the service tokenizes
    first_s = time.monotonic() - t0
    assert r.status_code == 200, r.text
    print(f"\nfirst request after ready (tokenizing, shared busy machine): {first_s:.2f} s")


def test_full_queue_answers_503_with_retry_after(service):
    from concurrent.futures import ThreadPoolExecutor

    def call(i):
        try:
            r = httpx.post(f"{service}/v1/rewards", json={"items": [_slow_item(i, slow=True)]}, timeout=120,
                           headers=AUTH)
            return r.status_code, r.headers.get("retry-after")
        except httpx.TransportError as e:
            return type(e).__name__, None

    n = 12
    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(call, range(n)))
    codes = [c for c, _ in answers]
    print(f"\n{n} concurrent slow requests, queue 2 + 2 running: {sorted(map(str, codes))}")
    assert all(c in (200, 503) for c in codes), answers              # nothing else: no 5xx, no hang
    assert codes.count(503) >= 1 and codes.count(200) >= 2, answers
    assert all(ra == "2" for c, ra in answers if c == 503), answers  # BACKPRESSURE_RETRY_AFTER_S
    assert httpx.get(f"{service}/healthz", timeout=30).status_code == 200


def test_healthz_reports_a_stalled_verifier_and_recovers(service):
    pid = httpx.get(f"{service}/v1/stats", timeout=30, headers=AUTH).json()["verifier"]["pid"]
    os.kill(pid, signal.SIGSTOP)            # the verifier replica (a process of this test's Ray) stalls
    try:
        t0 = time.monotonic()
        h = httpx.get(f"{service}/healthz", timeout=60)
        took = time.monotonic() - t0
        assert h.status_code == 503, h.text
        assert h.json()["status"] == "stalled" and not h.json()["verifier_probe"]["ok"], h.text
        assert h.headers.get("retry-after")
        # "stalled" above means the probe gave up on the replica; the time is only a hang guard (a loaded runner
        # adds seconds to every hop)
        assert took < HANG_S, took
    finally:
        os.kill(pid, signal.SIGCONT)
    t1 = time.monotonic()
    while True:
        h = httpx.get(f"{service}/healthz", timeout=60)
        if h.status_code == 200 and h.json()["status"] == "ok":
            break
        assert time.monotonic() - t1 < 5 * HANG_S, h.text       # a hang guard: the replica comes back
        time.sleep(0.5)
    r = httpx.post(f"{service}/v1/rewards", json={"items": [_slow_item(99)]}, timeout=60, headers=AUTH)
    assert r.status_code == 200, r.text
    print(f"\nstalled verifier: /healthz 503 'stalled' in {took:.1f} s; ok again {time.monotonic() - t1:.1f} s "
          "after SIGCONT")
