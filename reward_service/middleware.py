"""The reward service's front door: a pure ASGI middleware that runs before FastAPI reads a byte of the body.

In order, for every HTTP request:

1. **Auth first.** With a token configured (``REWARD_API_TOKEN``), every path but ``/healthz`` needs
   ``Authorization: Bearer <token>``, ``/docs``, ``/redoc`` and ``/openapi.json`` included; a request without it
   is answered 401 before its body is read, so nobody without the token can make the service read or parse
   anything. Compared in constant time.
2. **Body limit while streaming.** A ``Content-Length`` over the limit is answered 413 at once; a body without
   one (chunked) is counted as it arrives and answered 413 as soon as it passes the limit, never read in full.
3. **Lone UTF-16 surrogates** (``"\\ud800"`` in JSON: valid JSON, but no UTF-8 text can hold them, so they
   cannot be cached, verified or echoed) are answered 422 naming the field. A byte search finds bodies that
   may hold one; only those are parsed here (to name the field): the normal path costs one regex scan.

Everything else (JSON syntax, depth, types, ranges) is FastAPI's and pydantic's job, answered by the handlers of
:mod:`reward_service.errors`. Settings come from :func:`configure` (called by each replica's constructor):
Serve pickles the app, so the middleware reads them from this module at request time.
"""
from __future__ import annotations

import hmac
import json
import re
import threading
from collections import Counter
from typing import Any, Optional

from reward_service.errors import error_response

__all__ = ["GuardMiddleware", "configure", "guard_counters", "OPEN_PATHS", "find_lone_surrogate"]

#: Paths answered without the token even when one is set (a load balancer's probe needs no secret).
OPEN_PATHS = frozenset({"/healthz"})

_state: dict[str, Any] = {"token": "", "max_body_bytes": 64 * 1024 * 1024}
_counts: Counter = Counter()
_lock = threading.Lock()
# \uD800-\uDFFF escapes (a JSON text can only carry a surrogate as an escape); a match is only a maybe: an
# escaped backslash before it, or a valid high+low pair, is fine; the slow path decides.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def configure(token: str = "", max_body_bytes: int = 64 * 1024 * 1024) -> None:
    """Set the token (empty: no auth) and the body limit for this process's middleware."""
    _state["token"] = token or ""
    _state["max_body_bytes"] = int(max_body_bytes)


def guard_counters() -> dict[str, int]:
    """Requests refused here, by reason (auth_failures, body_too_large, lone_surrogate)."""
    with _lock:
        return dict(_counts)


def _count(reason: str) -> None:
    with _lock:
        _counts[reason] += 1


def find_lone_surrogate(obj: Any) -> Optional[tuple[str, int]]:
    """``(field, character index)`` of the first string (or object key) holding a lone surrogate, else None.

    Iterative (no recursion limit); ``field`` is dotted like the 422 details (``items.0.response``).
    """
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                return (path or "body"), e.start
        elif isinstance(v, dict):
            for k, sub in reversed(list(v.items())):
                sub_path = f"{path}.{k}" if path else str(k)
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError as e:
                    return (f"{path}.<key>" if path else "<key>"), e.start
                stack.append((sub_path, sub))
        elif isinstance(v, list):
            for i in range(len(v) - 1, -1, -1):
                stack.append((f"{path}.{i}" if path else str(i), v[i]))
    return None


def _header(scope, name: bytes) -> Optional[bytes]:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v
    return None


class GuardMiddleware:
    """Auth, body limit and surrogate check before the app (see the module docstring)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        token: str = _state["token"]
        limit: int = _state["max_body_bytes"]
        path = scope.get("path", "")
        root = scope.get("root_path", "")      # a Serve route_prefix such as /rlfh: the route is what follows
        if root and root != "/" and path.startswith(root):
            path = path[len(root):] or "/"
        if token and path not in OPEN_PATHS:
            auth = _header(scope, b"authorization") or b""
            scheme, _, given = auth.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("utf-8", "replace"),
                                                                     token.encode("utf-8")):
                _count("auth_failures")
                resp = error_response(401, "Authorization", "missing or wrong bearer token",
                                      "send the header 'Authorization: Bearer <REWARD_API_TOKEN>'",
                                      headers={"WWW-Authenticate": "Bearer"})
                return await resp(scope, receive, send)
        if scope.get("method", "GET") not in _BODY_METHODS:
            return await self.app(scope, receive, send)

        length = _header(scope, b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > limit:
            _count("body_too_large")
            return await self._too_large(scope, receive, send, f"is {int(length)} bytes", limit)
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                _count("body_too_large")
                return await self._too_large(scope, receive, send, f"passed {limit} bytes while streaming", limit)
            if chunk:
                chunks.append(chunk)
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        del chunks

        if _SURROGATE_ESCAPE.search(body):
            where = self._lone_surrogate(body)
            if where is not None:
                _count("lone_surrogate")
                field, pos = where
                resp = error_response(422, field, f"holds a lone UTF-16 surrogate at character {pos} (no UTF-8 text "
                                      "can hold one)", "send valid Unicode text: pair each \\uD800-\\uDBFF escape "
                                      "with a \\uDC00-\\uDFFF one, or drop it")
                return await resp(scope, receive, send)

        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    @staticmethod
    def _lone_surrogate(body: bytes) -> Optional[tuple[str, int]]:
        try:
            obj = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError):
            return None       # not JSON / not UTF-8 / too deep: the app's handlers answer that
        return find_lone_surrogate(obj)

    @staticmethod
    async def _too_large(scope, receive, send, what: str, limit: int):
        resp = error_response(413, "body", f"{what}, over the limit of {limit} bytes",
                              "split the batch into smaller requests", headers={"Connection": "close"})
        return await resp(scope, receive, send)
