"""Every error the reward service answers, as one documented JSON body (:class:`~reward_service.schemas.ErrorBody`).

- :class:`ServiceError`: raised by route code, answered with its status.
- :func:`install_error_handlers`: FastAPI exception handlers so that *nothing* leaves the app in another shape:
  request validation (422, each field named), pydantic errors raised in route code (422), Starlette's own
  HTTP errors (404 unknown path, 405 wrong method), the body-parse failures FastAPI answers with a bare 400
  (invalid UTF-8, JSON nested deeper than Python's recursion limit: 422 here, naming the problem), and any
  unexpected exception (500 with the exception's type only: internals are logged, never sent).
- :func:`error_response`: the JSON response of an error, rendered with ``ensure_ascii`` so that a lone UTF-16
  surrogate echoed in a field name can never make the error itself fail to encode.
- :func:`install_openapi`: the OpenAPI document lists these bodies for the statuses each route can answer
  (401 with a token, 413, 422, 502, 503) instead of FastAPI's ``HTTPValidationError``, so a client or a fuzzer
  reading ``/openapi.json`` finds every answer documented.

Light: FastAPI / Starlette / pydantic only (no Ray).
"""
from __future__ import annotations

import json
import logging
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reward_service.schemas import ErrorBody

log = logging.getLogger(__name__)

__all__ = ["ServiceError", "fix_for", "loc_str", "error_body", "error_response", "SafeJSONResponse",
           "install_error_handlers", "install_openapi"]


class SafeJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped (``\\udXXX`` survives) and NaN / Infinity refused at render time."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class ServiceError(Exception):
    """An error answered as JSON (:class:`ErrorBody`)."""

    def __init__(self, status: int, field: str, message: str, fix: str = "", item_index: Optional[int] = None,
                 headers: Optional[dict[str, str]] = None):
        self.status = status
        self.field = field
        self.message = message
        self.fix = fix
        self.item_index = item_index
        self.headers = headers
        super().__init__(f"{field}: {message}")

    def body(self) -> dict:
        return error_body(self.status, [{"field": self.field, "message": self.message, "fix": self.fix}],
                          self.item_index)

    def response(self) -> JSONResponse:
        return SafeJSONResponse(status_code=self.status, content=self.body(), headers=self.headers)


def error_body(status: int, details: list[dict], item_index: Optional[int] = None) -> dict:
    """The :class:`ErrorBody` dict: ``error`` is the first problem as one line, ``detail`` lists them all."""
    first = details[0] if details else {"field": "body", "message": "invalid request", "fix": ""}
    line = f"{first['field']}: {first['message']}" + (f" (fix: {first['fix']})" if first.get("fix") else "")
    if len(details) > 1:
        line += f" [+{len(details) - 1} more]"
    return ErrorBody(error=line, status=status, item_index=item_index, detail=details).model_dump()


def error_response(status: int, field: str, message: str, fix: str = "",
                   headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return ServiceError(status, field, message, fix, headers=headers).response()


def fix_for(err: dict) -> str:
    """A one-line fix for a pydantic error dict."""
    t = err.get("type", "")
    ctx = err.get("ctx") or {}
    if t == "missing":
        return "add this field"
    if t == "extra_forbidden":
        return "remove this field (see /docs for the schema)"
    if t == "string_too_long":
        return f"send at most {ctx.get('max_length')} characters"
    if t == "too_long":
        return f"send at most {ctx.get('max_length')} entries (split the batch)"
    if t == "too_short":
        return f"send at least {ctx.get('min_length')} entries"
    if t == "finite_number":
        return "NaN and Infinity are not allowed; send a finite number"
    if t == "json_invalid":
        return "send a valid JSON body (Content-Type: application/json)"
    if t == "literal_error":
        return f"use one of {ctx.get('expected')}"
    if t.endswith("_type") or t.endswith("_parsing"):
        kind = t.removesuffix("_type").removesuffix("_parsing")
        return f"send a JSON {kind} (strings, booleans and numbers are not converted into each other)"
    if t in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return "send a value in range " + ", ".join(f"{k} {v}" for k, v in ctx.items())
    return "see /docs for the request schema"


def loc_str(loc) -> str:
    """A pydantic ``loc`` tuple as a dotted field name without the leading ``body``."""
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[1:]
    return ".".join(parts) or "body"


def _details(errors: list[dict]) -> list[dict]:
    out = []
    for err in errors:
        field, msg = loc_str(err.get("loc", ())), str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":   # loc is ("body", <char position>)
            pos = err.get("loc", ("body", "?"))[-1]
            field, msg = "body", f"{msg} at character {pos}"
        out.append({"field": field, "message": msg, "fix": fix_for(err)})
    return out


def _body_parse_problem(exc: BaseException) -> tuple[str, str]:
    """What made FastAPI's body parsing fail (it answers a bare 400 ``There was an error parsing the body``)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, UnicodeDecodeError):
        return (f"is not valid UTF-8 (byte {cause.start}: {cause.reason})",
                "send the JSON body encoded as UTF-8")
    if isinstance(cause, RecursionError):
        return ("JSON is nested too deeply to parse", "send the documented request shape (see /openapi.json); "
                "no request needs more than a few levels of nesting")
    return (f"could not be parsed ({type(cause).__name__ if cause else 'unknown error'})",
            "send a valid JSON body (Content-Type: application/json)")


def install_error_handlers(api: FastAPI) -> None:
    """Register the handlers above on ``api`` (module level, before Serve wraps the app)."""

    @api.exception_handler(RequestValidationError)
    async def _validation_handler(request: Request, exc: RequestValidationError):
        return SafeJSONResponse(status_code=422, content=error_body(422, _details(list(exc.errors()))))

    @api.exception_handler(ValidationError)
    async def _pydantic_handler(request: Request, exc: ValidationError):
        # a model built inside a route (e.g. a VerifyRequest from an OpenRLHF label): still the caller's input
        return SafeJSONResponse(status_code=422, content=error_body(422, _details(exc.errors(include_input=False))))

    @api.exception_handler(ServiceError)
    async def _service_error_handler(request: Request, exc: ServiceError):
        return exc.response()

    @api.exception_handler(StarletteHTTPException)
    async def _http_handler(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400:        # FastAPI's body-parse failure
            message, fix = _body_parse_problem(exc)
            return error_response(422, "body", message, fix)
        if exc.status_code == 404:
            return error_response(404, "path", f"no route {request.url.path!r}",
                                  "routes: POST /v1/rewards, /v1/verify, /get_reward; GET /healthz, /v1/stats")
        if exc.status_code == 405:
            return error_response(405, "method", f"{request.method} is not allowed on {request.url.path}",
                                  "see /openapi.json for each route's method",
                                  headers=dict(exc.headers or {}) or None)
        return error_response(exc.status_code, "request", str(exc.detail), headers=dict(exc.headers or {}) or None)

    @api.exception_handler(Exception)
    async def _unexpected_handler(request: Request, exc: Exception):
        log.exception("unexpected error on %s", request.url.path)
        return error_response(500, "server", f"internal error ({type(exc).__name__}); it is logged on the replica",
                              "retry; if it persists, report it with the request")


# --------------------------------------------------------------------------------------
# OpenAPI: every error status documented with ErrorBody
# --------------------------------------------------------------------------------------

_ERROR_DESCRIPTIONS = {
    "401": "Missing or wrong bearer token (only when the service has REWARD_API_TOKEN).",
    "404": "Unknown route.",
    "413": "Request body over the size limit (checked while it streams in, before it is parsed).",
    "422": "Invalid input: each problem's field, message and fix.",
    "502": "The verifier failed or timed out on an item (item_index names it).",
    "503": "Not ready, or overloaded: retry after the Retry-After header's seconds.",
}


def install_openapi(api: FastAPI, body_routes: tuple[str, ...], bearer_routes: tuple[str, ...]) -> None:
    """Replace ``api.openapi`` with one that documents the error bodies.

    ``body_routes``: paths whose POST takes a JSON body (413 / 422 / 502 / 503 apply);
    ``bearer_routes``: paths that need the token when one is set (401 applies).
    """
    original = api.openapi

    def openapi() -> dict:
        if api.openapi_schema is not None:
            return api.openapi_schema
        schema = original()
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        err_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in err_schema.pop("$defs", {}).items():
            comps.setdefault(name, sub)
        comps["ErrorBody"] = err_schema
        ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
        retry_after = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                       "schema": {"type": "integer"}}}
        for path, ops in schema.get("paths", {}).items():
            for method, op in ops.items():
                codes = []
                if path in body_routes and method == "post":
                    codes += ["413", "422", "502", "503"]
                if path in bearer_routes:
                    codes.append("401")
                responses = op.setdefault("responses", {})
                for code in codes:
                    entry = {"description": _ERROR_DESCRIPTIONS[code], **ref}
                    if code == "503":
                        entry["headers"] = retry_after
                    responses[code] = entry
        for unused in ("HTTPValidationError", "ValidationError"):
            comps.pop(unused, None)
        api.openapi_schema = schema
        return schema

    api.openapi = openapi  # type: ignore[method-assign]
