"""RewardClient against real loopback HTTP servers (no Ray): retries, back-off, timeouts, errors; CLI help."""
from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import HANG_S
from reward_service.client import RewardClient, RewardRequestError, RewardServiceUnavailable
from reward_service.schemas import ItemReward

ITEM = {"question": "q", "response": "Paris.", "token_offsets": [[0, 5], [5, 6], [6, 6]]}
GOOD = {"items": [{"token_rewards": [0.0, 1.0, 0.0], "token_label_signs": [1, 1, 0], "score": 1.0,
                   "is_correct": True, "abstained": False, "label_counts": {"Correct": 1}, "num_statements": 1,
                   "num_unaligned": 0, "num_tokens": 3, "cached": False}],
        "settings": {}, "num_cached": 0, "latency_ms": 1.0}


class Script:
    """What the server answers, call by call: (status, body dict | raw str[, headers]) or ("sleep", seconds)."""

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
                status, body, *extra = script.answers[i]
                headers = extra[0] if extra else {}
                if status == "sleep":
                    time.sleep(body)
                    status, body = 200, GOOD
                raw = isinstance(body, str)                     # a str body is sent as is (not JSON)
                data = body.encode() if raw else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "text/html" if raw else "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
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


def test_retry_after_of_a_503_or_429_is_honoured_within_a_bound(server):
    # the service's backpressure answer asks for 1 s: the client waits that long, not its 0.01 s back-off
    script = Script([(503, "Request dropped due to backpressure", {"Retry-After": "1"}),
                     (429, {"error": "slow down"}, {"Retry-After": "1"}), (200, GOOD)])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=3, backoff_s=0.01, max_backoff_s=0.01)
    t0 = time.perf_counter()
    assert len(c.rewards([ITEM])) == 1 and script.calls == 3 and c.failures == 2
    assert time.perf_counter() - t0 >= 2.0
    # a Retry-After beyond the bound is cut to max_retry_after_s; one that cannot be read leaves the back-off
    script = Script([(503, {"error": "busy"}, {"Retry-After": "3600"}), (503, {"error": "busy"},
                                                                         {"Retry-After": "soon"}), (200, GOOD)])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=3, backoff_s=0.01, max_backoff_s=0.01, max_retry_after_s=0.3)
    t0 = time.perf_counter()
    assert len(c.rewards([ITEM])) == 1 and script.calls == 3
    assert 0.3 <= time.perf_counter() - t0 < HANG_S      # waited the cut 0.3 s, not the asked-for 3600 s
    # other 4xx stay unretried
    script = Script([(403, {"error": "bad token"}, {"Retry-After": "1"})])
    with pytest.raises(RewardRequestError):
        RewardClient(server(script), timeout_s=5, max_retries=3, backoff_s=0.01).rewards([ITEM])
    assert script.calls == 1


def test_gives_up_after_retries(server):
    script = Script([(500, {"error": "boom"})])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=2, backoff_s=0.01)
    with pytest.raises(RewardServiceUnavailable, match="3 time"):
        c.rewards([ITEM])
    assert script.calls == 3 and c.failures == 3 and c.unavailable == 1


def test_short_answer_is_never_paired_with_the_wrong_items(server):
    """A 200 with fewer items than sent (a proxy, another version) must fail loudly, not shift rewards."""
    script = Script([(200, GOOD)])                     # one item back for two sent
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=0)
    with pytest.raises(RewardServiceUnavailable, match="1 item.*for 2 sent"):
        c.rewards([ITEM, ITEM])
    assert c.unavailable == 1


def test_2xx_that_is_not_json_is_a_counted_failure_and_retried(server):
    script = Script([(200, "<html>gateway</html>"), (200, GOOD)])
    url = server(script)
    c = RewardClient(url, timeout_s=5, max_retries=1, backoff_s=0.01)
    assert c.rewards([ITEM])[0].score == 1.0
    assert script.calls == 2 and c.failures == 1 and "not JSON" in c.last_error


def test_backoff_delay_is_exponential_and_capped():
    from core.retry import backoff_delay
    assert [backoff_delay(a, 0.5, 10.0) for a in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_delay(1000, 0.5, 10.0) == 10.0 and backoff_delay(-1, 0.5, 10.0) == 0.0
    assert backoff_delay(3, 0.0, 10.0) == 0.0


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
    with pytest.raises(RewardServiceUnavailable, match="Timeout"):   # the server's answer after 2 s is a good one:
        c.rewards([ITEM])                                            # only a timeout that fired can raise here
    assert c.failures == 2                                           # one try + one retry, each cut
    assert time.perf_counter() - t0 < HANG_S                         # a hang guard, not a benchmark


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


def _subparser(parser, *path):
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


@pytest.mark.parametrize("path", [("serve",), ("verify",), ("submit",), ("config",), ("bench", "rewards"),
                                  ("bench", "verifier")])
def test_cli_help_explains_every_option(path, capsys):
    """Every option of the finished commands has a real help text, and `--help` itself works."""
    from rlfh.cli import build_parser
    parser = build_parser()
    with pytest.raises(SystemExit) as e:
        parser.parse_args([*path, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    sub = _subparser(parser, *path)
    assert sub.description and len(sub.description) > 40, f"rlfh {' '.join(path)} has no description"
    # renamed settings' old flags are hidden (argparse.SUPPRESS): they only exist to refuse the old name
    options = [a for a in sub._actions if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS]
    assert options
    for action in options:
        assert action.help and len(action.help) > 15, f"rlfh {' '.join(path)} {action.option_strings}: no help"
        assert action.option_strings[0] in out
    if path == ("serve",):
        redis = next(a for a in options if a.dest == "redis_url")
        assert "REDIS_URL" in redis.help
        # trainer-side client settings are not options of the service
        assert not {"reward_url", "reward_timeout_s", "reward_max_retries"} & {a.dest for a in options}
    if path in (("verify",), ("bench", "verifier")):
        # one way to pick the backend (verify: --backend; bench verifier: fixed rows)
        assert "verifier_backend" not in {a.dest for a in options}
    assert "``" not in out and ":func:" not in out, "reST markup in --help"


@pytest.mark.parametrize("argv", [["bench", "rewards", "--concurrency", "0"], ["bench", "rewards", "--requests", "-1"],
                                  ["bench", "verifier", "--limit", "0"], ["verify", "--data", "halueval:dev",
                                                                          "--limit", "-5"]])
def test_cli_rejects_non_positive_counts(argv, capsys):
    """A count of 0 would hang the load test (a semaphore of 0) or slice the data from the end: usage error."""
    from rlfh.cli import build_parser
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2 and "must be >= 1" in capsys.readouterr().err


def test_app_builder_reads_args_as_settings():
    from core.config import ConfigError
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
    # the app scales exactly as the generated Serve config does (one rule: reward_service.serve_config)
    with pytest.raises(ConfigError, match="SERVE_MAX_REPLICAS"):
        app_builder({"REWARD_REPLICAS": "3", "SERVE_MAX_REPLICAS": "2"})
    from core.config import RLFHConfig
    from reward_service.serve_config import serve_config
    deps = {d["name"]: d for d in serve_config(RLFHConfig.load(
        {}, verifier_num_cpus=0.5, reward_replicas=2, max_replicas=3))["applications"][0]["deployments"]}
    assert deps["RLFHRewards"]["autoscaling_config"] == {
        "min_replicas": auto.min_replicas, "max_replicas": auto.max_replicas,
        "target_ongoing_requests": auto.target_ongoing_requests}
