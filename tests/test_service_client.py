"""RewardClient against real loopback HTTP servers (no Ray): retries, back-off, timeouts, errors; CLI help."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reward_service.client import RewardClient, RewardRequestError, RewardServiceUnavailable
from reward_service.schemas import ItemReward

ITEM = {"question": "q", "response": "Paris.", "token_offsets": [[0, 5], [5, 6], [6, 6]]}
GOOD = {"items": [{"token_rewards": [0.0, 1.0, 0.0], "token_label_signs": [1, 1, 0], "score": 1.0,
                   "is_correct": True, "abstained": False, "label_counts": {"Correct": 1}, "num_statements": 1,
                   "num_unaligned": 0, "num_tokens": 3, "cached": False}],
        "settings": {}, "num_cached": 0, "latency_ms": 1.0}


class Script:
    """What the server answers, call by call: (status, body dict) or ("sleep", seconds)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0
        self.bodies = []


@pytest.fixture
def server():
    servers = []

    def start(script: Script) -> str:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self):
                n = int(self.headers.get("content-length") or 0)
                script.bodies.append((self.path, self.headers.get("authorization"),
                                      json.loads(self.rfile.read(n) or b"null")))
                i = min(script.calls, len(script.answers) - 1)
                script.calls += 1
                status, body = script.answers[i]
                if status == "sleep":
                    time.sleep(body)
                    status, body = 200, GOOD
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):   # the client timed out and left
                    pass

            do_POST = _answer
            do_GET = _answer

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_success_parses_items_and_sends_token(server):
    script = Script([(200, GOOD)])
    url = server(script)
    with RewardClient(url, token="tok", timeout_s=5, max_retries=2) as c:
        out = c.rewards([ITEM], overrides={"granularity": "sentence"})
    assert isinstance(out[0], ItemReward) and out[0].token_rewards == [0.0, 1.0, 0.0] and out[0].is_correct
    path, auth, body = script.bodies[0]
    assert path == "/v1/rewards" and auth == "Bearer tok"
    assert body["overrides"] == {"granularity": "sentence"}
    assert body["items"][0]["token_offsets"] == ITEM["token_offsets"]


def test_5xx_is_retried_with_backoff_then_succeeds(server):
    script = Script([(503, {"error": "busy"}), (502, {"error": "verifier failed"}), (200, GOOD)])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=3, backoff_s=0.05)
    t0 = time.perf_counter()
    out = c.rewards([ITEM])
    assert len(out) == 1 and script.calls == 3
    assert c.failures == 2 and c.requests == 3 and c.unavailable == 0
    assert time.perf_counter() - t0 >= 0.05 + 0.1       # back-off 0.05 s, then 0.1 s
    assert "verifier failed" in c.last_error


def test_gives_up_after_retries(server):
    script = Script([(500, {"error": "boom"})])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=2, backoff_s=0.01)
    with pytest.raises(RewardServiceUnavailable, match="3 time"):
        c.rewards([ITEM])
    assert script.calls == 3 and c.failures == 3 and c.unavailable == 1


def test_422_is_not_retried_and_carries_the_server_message(server):
    err = {"error": "items.0.token_offsets.1: end 9 is past the end (fix: ...)", "status": 422, "item_index": 0,
           "detail": [{"field": "items.0.token_offsets.1", "message": "end 9 is past the end", "fix": "..."}]}
    script = Script([(422, err)])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=5)
    with pytest.raises(RewardRequestError) as ei:
        c.rewards([ITEM])
    assert script.calls == 1 and c.failures == 0
    assert ei.value.status == 422 and ei.value.field == "items.0.token_offsets.1" and ei.value.item_index == 0
    assert "past the end" in str(ei.value)


def test_batches_are_split_and_item_index_is_global(server):
    err = {"error": "items.1.response: missing", "status": 422, "item_index": 1,
           "detail": [{"field": "items.1.response", "message": "missing", "fix": "add it"}]}
    script = Script([(200, {**GOOD, "items": GOOD["items"] * 2}), (422, err)])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=0, batch_size=2)
    with pytest.raises(RewardRequestError) as ei:
        c.rewards([ITEM] * 4)
    assert ei.value.item_index == 3 and [len(b["items"]) for _, _, b in script.bodies] == [2, 2]


def test_read_timeout_is_bounded(server):
    script = Script([("sleep", 2.0)])
    url = server(script)
    c = RewardClient(url, timeout_s=0.3, max_retries=1, backoff_s=0.01)
    t0 = time.perf_counter()
    with pytest.raises(RewardServiceUnavailable, match="Timeout"):
        c.rewards([ITEM])
    assert time.perf_counter() - t0 < 2.0 and c.failures == 2


def test_connection_refused():
    from conftest import free_port
    c = RewardClient(f"http://127.0.0.1:{free_port()}", timeout_s=1, max_retries=2, backoff_s=0.01)
    with pytest.raises(RewardServiceUnavailable):
        c.healthz()
    assert c.failures == 3
    with pytest.raises(RewardServiceUnavailable, match="not ready"):
        c.wait_ready(timeout_s=0.5)


def test_bad_client_arguments():
    with pytest.raises(ValueError, match="url"):
        RewardClient("")
    with pytest.raises(ValueError, match="timeout"):
        RewardClient("http://x", timeout_s=0)


def test_cli_help_explains_every_option(capsys):
    from cluster.cli import build_parser
    parser = build_parser()
    for argv in (["serve", "--help"], ["bench", "rewards", "--help"]):
        with pytest.raises(SystemExit) as e:
            parser.parse_args(argv)
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "--redis-url" in out or "--requests" in out
    serve = next(a for a in parser._subparsers._group_actions[0].choices["serve"]._actions if a.dest == "redis_url")
    assert serve.help and "REDIS_URL" in serve.help
    for action in parser._subparsers._group_actions[0].choices["serve"]._actions:
        assert action.help, f"rlfh serve {action.option_strings} has no help"


def test_app_builder_reads_args_as_settings():
    from cluster.config import ConfigError
    from reward_service.app import app_builder
    app = app_builder({"VERIFIER_NUM_CPUS": "0.5", "REWARD_REPLICAS": "2", "SERVE_MAX_REPLICAS": "3",
                       "GRANULARITY": "sentence"})
    rewards = app._bound_deployment
    verifier = rewards.init_args[1]._bound_deployment
    assert rewards.name == "RLFHRewards" and verifier.name == "RLFHVerifier"
    assert verifier.ray_actor_options["num_cpus"] == 0.5 and rewards.ray_actor_options["num_cpus"] == 0.25
    auto = rewards._deployment_config.autoscaling_config
    assert (auto.min_replicas, auto.max_replicas) == (2, 3)
    assert rewards.init_args[0]["granularity"] == "sentence"
    fixed = app_builder({"verifier_replicas": 2})._bound_deployment.init_args[1]._bound_deployment
    assert fixed.num_replicas == 2 and fixed._deployment_config.autoscaling_config is None
    with pytest.raises(ConfigError, match="REWARD_EPSILON|reward_mu"):
        app_builder({"REWARD_EPSILON": "-2", "REWARD_MU": "1"})       # log(max(eps, s) + mu) undefined
    with pytest.raises(ConfigError, match="GRANULARITY"):
        app_builder({"GRANULARITY": "tokens"})
    with pytest.raises(ConfigError, match="unknown setting"):
        app_builder({"NOT_A_SETTING": "1"})
