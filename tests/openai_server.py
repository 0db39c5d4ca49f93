"""A small OpenAI-compatible chat server for exercising the ``llm`` verifier backend over real HTTP (tests only).

Modes:

- ``model`` - answers ``POST /v1/chat/completions`` with a real transformers model (default: the embedded
  SmolLM2-135M-Instruct, greedy). ``--record FILE`` appends every completion to a JSONL file.
- ``replay`` - answers with recorded completions from a JSONL file, one object per line:
  ``{"key": "<sha256 of the messages>", "reply": "..."}`` (as written by ``--record``) or
  ``{"match": ["substring", ...], "reply": "..."}`` (every substring must occur in the last user message).
  No match: HTTP 404.

Fault injection for retry tests: ``--delay S`` sleeps before every answer (timeouts), ``--fail-first N``
answers the first N calls with ``--fail-status`` (default 500). ``GET /stats`` reports the call counts.

Usage::

    .venv/bin/python tests/openai_server.py --mode model --port 8011
    MODEL_URL=http://127.0.0.1:8011/v1 rlfh verify --backend llm --question ... --response ...
"""
from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str


class ChatRequest(BaseModel):
    """The subset of the OpenAI chat-completions request this server reads (other fields are ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str = "default"
    messages: list[Message] = Field(..., min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0)


def messages_key(messages: list[dict]) -> str:
    """Stable key of a conversation (role + content of every message)."""
    canon = json.dumps([{"role": m.get("role"), "content": m.get("content")} for m in messages],
                       ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def load_replay(path: str | Path) -> list[dict]:
    entries = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("reply"), str) or not (
                    "key" in obj or "match" in obj):
                raise ValueError(f"{path}:{n}: each line needs \"reply\" (string) and \"key\" or \"match\"")
            if isinstance(obj.get("match"), str):
                obj["match"] = [obj["match"]]
            entries.append(obj)
    return entries


def create_app(mode: str = "model", *, model_path: str = "smollm2-135m-instruct", replay: Optional[list[dict]] = None,
               record_path: Optional[str] = None, delay_s: float = 0.0, fail_first: int = 0, fail_status: int = 500,
               max_new_tokens_cap: int = 512, chat=None):
    """The FastAPI app. ``chat`` (a ChatFn-like object with ``max_new_tokens``) overrides model loading."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    if mode not in ("model", "replay"):
        raise ValueError(f"mode must be 'model' or 'replay', got {mode!r}")
    if mode == "replay" and replay is None:
        raise ValueError("replay mode needs recorded completions (--replay FILE)")

    app = FastAPI(title="rlfh test OpenAI server", version="1")
    state = {"calls": 0, "failed": 0, "served": 0}
    lock = threading.Lock()
    engine = {"chat": chat}
    model_name = Path(model_path).name if mode == "model" else "replay"

    def get_chat():
        if engine["chat"] is None:
            from hf_chat import HFChat
            engine["chat"] = HFChat(model_path, max_new_tokens=max_new_tokens_cap)
        return engine["chat"]

    if mode == "model" and chat is None:
        get_chat()  # load at start-up, not on the first request

    @app.get("/health")
    def health():
        return {"ok": True, "mode": mode}

    @app.get("/stats")
    def stats():
        with lock:
            return dict(state)

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "rlfh"}]}

    @app.post("/v1/chat/completions")
    def chat_completions(req: ChatRequest):
        with lock:
            state["calls"] += 1
            n = state["calls"]
        if delay_s > 0:
            time.sleep(delay_s)
        if n <= fail_first:
            with lock:
                state["failed"] += 1
            return JSONResponse({"error": {"message": f"injected failure {n}/{fail_first}", "type": "server_error"}},
                                status_code=fail_status)
        msgs = [m.model_dump() for m in req.messages]
        if mode == "replay":
            reply = _lookup(replay or [], msgs)
            if reply is None:
                return JSONResponse({"error": {"message": "no recorded completion for these messages",
                                               "type": "not_found"}}, status_code=404)
        else:
            cap = min(req.max_tokens or max_new_tokens_cap, max_new_tokens_cap)
            reply = get_chat()([[{"role": m["role"], "content": m["content"]} for m in msgs]],
                               max_new_tokens=cap)[0]
            if record_path:
                with lock, open(record_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"key": messages_key(msgs), "reply": reply}, ensure_ascii=False) + "\n")
        with lock:
            state["served"] += 1
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": req.model or model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    return app


def _lookup(entries: list[dict], msgs: list[dict]) -> Optional[str]:
    key = messages_key(msgs)
    last_user = next((m["content"] for m in reversed(msgs) if m.get("role") == "user"), "")
    for e in entries:
        if e.get("key") == key:
            return e["reply"]
    for e in entries:
        if "match" in e and all(s in last_user for s in e["match"]):
            return e["reply"]
    return None


class BackgroundServer:
    """Run an ASGI app with uvicorn on 127.0.0.1:``port`` in a daemon thread (real HTTP; for tests/tools)."""

    def __init__(self, app, port: int, host: str = "127.0.0.1"):
        import uvicorn
        self.host, self.port = host, port
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, name=f"openai-server-{port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> "BackgroundServer":
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.time() > deadline:
                raise RuntimeError(f"test OpenAI server did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tests/openai_server.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["model", "replay"], default="model",
                   help="model: generate with a transformers model; replay: answer from a JSONL of recordings.")
    p.add_argument("--host", default="127.0.0.1", help="Bind address (default 127.0.0.1).")
    p.add_argument("--port", type=int, default=8011, help="Port (default 8011).")
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="HF model folder, or smollm2-135m-instruct for the embedded SmolLM2 (model mode).")
    p.add_argument("--max-new-tokens", type=int, default=512, help="Cap on generated tokens per reply.")
    p.add_argument("--replay", default=None, metavar="FILE", help="JSONL of recorded completions (replay mode).")
    p.add_argument("--record", default=None, metavar="FILE",
                   help="Append every generated completion to this JSONL (model mode), for later --replay.")
    p.add_argument("--delay", type=float, default=0.0, metavar="S", help="Sleep S seconds before every answer.")
    p.add_argument("--fail-first", type=int, default=0, metavar="N", help="Fail the first N calls.")
    p.add_argument("--fail-status", type=int, default=500, help="HTTP status of injected failures (default 500).")
    args = p.parse_args(argv)
    import uvicorn
    app = create_app(args.mode, model_path=args.model, replay=load_replay(args.replay) if args.replay else None,
                     record_path=args.record, delay_s=args.delay, fail_first=args.fail_first,
                     fail_status=args.fail_status, max_new_tokens_cap=args.max_new_tokens)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
