"""The reward service's ASGI guard (reward_service/middleware.py) in-process: fast checks of what
tests/test_service_hostile.py shows over real HTTP (auth before the body, the streaming limit, surrogates)."""
from __future__ import annotations

import asyncio
import json

import pytest

from reward_service import middleware
from reward_service.middleware import GuardMiddleware, configure, find_lone_surrogate


async def _app(scope, receive, send):
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"got %d" % len(body)})


def _call(path="/v1/rewards", method="POST", headers=(), chunks=(b"{}",), root=""):
    """Run the guard over ``_app``; returns (status, body, chunks the guard pulled)."""
    pulled = []
    queue = list(chunks) or [b""]          # a GET: one empty message

    async def receive():
        if not queue:
            raise AssertionError("read past the end of the body")
        c = queue.pop(0)
        pulled.append(c)
        return {"type": "http.request", "body": c, "more_body": bool(queue)}

    out = []

    async def send(m):
        out.append(m)

    scope = {"type": "http", "path": path, "root_path": root, "method": method,
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}
    asyncio.run(GuardMiddleware(_app)(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")
    return out[0]["status"], body, pulled


@pytest.fixture(autouse=True)
def _reset():
    yield
    configure(token="", max_body_bytes=64 * 1024 * 1024)


def test_auth_is_checked_before_any_body_byte_is_read():
    configure(token="s3cret")
    status, body, pulled = _call(chunks=[b"x" * 1000] * 5)
    assert status == 401 and pulled == []          # nothing read
    assert json.loads(body)["detail"][0]["field"] == "Authorization"
    assert _call(headers=[("Authorization", "Bearer wrong")])[0] == 401
    assert _call(headers=[("Authorization", "Bearer s3cret")])[0] == 200
    assert _call(path="/healthz", method="GET", chunks=())[0] == 200                 # the probe needs no token
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert _call(path=path, method="GET", chunks=())[0] == 401
    # under a Serve route prefix the route is what follows it
    assert _call(path="/rlfh/healthz", method="GET", chunks=(), root="/rlfh")[0] == 200
    assert _call(path="/rlfh/docs", method="GET", chunks=(), root="/rlfh")[0] == 401
    assert middleware.guard_counters()["auth_failures"] >= 5


def test_body_limit_holds_while_streaming_and_for_content_length():
    configure(max_body_bytes=10_000)
    status, body, pulled = _call(chunks=[b"x" * 4000] * 10)
    assert status == 413 and "while streaming" in json.loads(body)["detail"][0]["message"]
    assert len(pulled) == 3                            # stopped at the first chunk past the limit
    status, _, pulled = _call(headers=[("Content-Length", "10001")], chunks=[b"x"])
    assert status == 413 and pulled == []
    status, body, _ = _call(chunks=[b"x" * 4000, b"x" * 4000])
    assert status == 200 and body == b"got 8000"       # under the limit: the app gets the whole body


def test_lone_surrogates_answer_422_naming_the_field():
    raw = b'{"items": [{"question": "q", "response": "a \\ud800 b"}]}'
    status, body, _ = _call(chunks=[raw])
    err = json.loads(body)
    assert status == 422 and err["detail"][0]["field"] == "items.0.response"
    # a valid pair and an escaped backslash are fine
    assert _call(chunks=[b'{"a": "\\ud83d\\ude00", "b": "\\\\ud800"}'])[0] == 200
    assert find_lone_surrogate({"k": ["ok", {"\udfff": 1}]}) == ("k.1.<key>", 0)
    assert find_lone_surrogate({"k": ["ok", "x\ud800"]}) == ("k.1", 1)
