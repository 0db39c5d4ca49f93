"""The reward service for real: Ray Serve over HTTP, the real evidence Verifier, a real redis-server.

One Serve app for the whole module (module-scoped fixture). The verifier replicas run the real
``Verifier`` except that a response containing FAULT_MARKER raises (fault injection for the
"verifier crashes on one item" path); every other response is verified normally.
"""
from __future__ import annotations

import json
import math
import re
import sys
import time
import uuid

import httpx
import pytest

from core.config import RLFHConfig
from core.verify_schema import GOOD_LABELS
from reward_service.client import RewardClient, RewardRequestError, RewardServiceUnavailable
from verifier_service.core import Verifier

pytestmark = pytest.mark.slow

TOKEN = "s3cret-token"
MAX_ITEMS = 8
FAULT_MARKER = "<<inject-verifier-fault>>"


class FaultyVerifier(Verifier):
    """The real Verifier; a response containing FAULT_MARKER makes it raise (like a backend bug)."""

    def verify_many(self, reqs):
        if any(FAULT_MARKER in getattr(r, "response", "") for r in reqs):
            raise RuntimeError("injected verifier fault")
        return super().verify_many(reqs)


def faulty_factory(cfg):
    return FaultyVerifier(cfg)


@pytest.fixture(scope="module")
def service(serve_ray):
    import ray

    from conftest import RedisProcess

    redis_proc = RedisProcess().start()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # ship FaultyVerifier to the replicas
    cfg = RLFHConfig.load(environ={}, redis_url=redis_proc.url, reward_api_token=TOKEN, max_batch_items=MAX_ITEMS,
                          cache_ttl_s=600)
    try:
        # on the Ray + Serve the service modules share (tests/conftest.py)
        with serve_ray.app(cfg, verifier_factory=faulty_factory) as url:
            yield {"url": url, "redis": redis_proc, "cfg": cfg}
    finally:
        redis_proc.stop()


@pytest.fixture(scope="module")
def http(service):
    with httpx.Client(base_url=service["url"], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(embedded_model_path):
    from core.model_loader import load_tokenizer
    return load_tokenizer(embedded_model_path)


def offsets(tok, text):
    return [list(p) for p in tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]


def unique_item(text="Paris is the capital of France."):
    return {"question": f"Where is Paris? [{uuid.uuid4().hex}]", "response": text,
            "materials": ["Paris is the capital and largest city of France."], "gold_answer": "France"}


def stats(http):
    r = http.get("/v1/stats")
    assert r.status_code == 200, r.text
    return r.json()


# ------------------------------------------------------------------------------ round trips

def test_rewards_batch_round_trip_with_client(service, halueval_test_items, tokenizer):
    items, offs = [], []
    for i, qa in enumerate(halueval_test_items[:3]):
        for answer in (qa.right_answer, qa.hallucinated_answer):
            it = {"question": qa.question, "response": answer, "materials": qa.knowledge,
                  "gold_answer": qa.right_answer}
            o = offsets(tokenizer, answer)
            if i % 2 == 0:
                it["token_offsets"] = o + [[len(answer), len(answer)]]        # + EOS, as the trainer sends
                o = it["token_offsets"]
            items.append(it)
            offs.append(o)
    with RewardClient(service["url"], token=TOKEN, timeout_s=120, max_retries=1) as client:
        out = client.rewards(items)
        assert client.failures == 0
    assert len(out) == len(items)
    for it, o, r in zip(items, offs, out):
        assert r.num_tokens == len(o) == len(r.token_rewards) == len(r.token_label_signs)
        assert r.score == pytest.approx(sum(r.token_rewards))
        assert sum(r.label_counts.values()) == r.num_statements
        assert r.is_correct == (r.num_statements > 0 and all(
            n == 0 for lb, n in r.label_counts.items() if lb not in GOOD_LABELS))
        assert all(abs(x) <= service["cfg"].reward_clip for x in r.token_rewards)
        assert set(r.token_label_signs) <= {-1, 0, 1}
        if r.num_statements == 0 and not r.abstained:
            assert r.token_rewards[-1] == pytest.approx(service["cfg"].empty_reward)
    assert sum(r.num_statements for r in out) > 0


def test_overrides_apply_per_request(http):
    item = unique_item("Paris is the capital of France. It has a famous tower.")
    text = item["response"]
    item["token_offsets"] = [[m.start(), m.end()] for m in re.finditer(r"\w+|[^\w\s]", text)] + [[len(text)] * 2]
    base = http.post("/v1/rewards", json={"items": [item]}).json()
    resp = http.post("/v1/rewards", json={"items": [item], "overrides": {"granularity": "response"}})
    assert resp.status_code == 200, resp.text
    r = resp.json()["items"][0]
    assert all(x == 0 for x in r["token_rewards"][:-1])
    assert r["token_rewards"][-1] == pytest.approx(base["items"][0]["score"])
    assert resp.json()["settings"]["granularity"] == "response"
    assert base["settings"]["granularity"] == "token"          # the service default is unchanged


def test_cache_hit_on_repeat_skips_the_verifier(http):
    item = unique_item()
    s0 = stats(http)
    t0 = time.perf_counter()
    first = http.post("/v1/rewards", json={"items": [item], "return_verification": True})
    t_first = time.perf_counter() - t0
    assert first.status_code == 200, first.text
    s1 = stats(http)
    t0 = time.perf_counter()
    second = http.post("/v1/rewards", json={"items": [item], "return_verification": True})
    t_second = time.perf_counter() - t0
    s2 = stats(http)
    a, b = first.json()["items"][0], second.json()["items"][0]
    assert a["cached"] is False and b["cached"] is True
    assert second.json()["num_cached"] == 1
    assert a["token_rewards"] == b["token_rewards"] and a["score"] == b["score"]
    assert a["verification"]["sentences"] == b["verification"]["sentences"]
    assert s1["verifier"]["items"] - s0["verifier"]["items"] == 1
    assert s2["verifier"]["items"] == s1["verifier"]["items"]                # not called again
    assert s2["cache"]["hits"] - s1["cache"]["hits"] == 1
    assert s2["cache"]["backend"] == "redis"
    print(f"first {t_first * 1000:.1f} ms, cached {t_second * 1000:.1f} ms")


def test_duplicates_in_a_batch_are_verified_once(http):
    item = unique_item()
    s0 = stats(http)
    r = http.post("/v1/rewards", json={"items": [item, item, item]})
    assert r.status_code == 200, r.text
    scores = {x["score"] for x in r.json()["items"]}
    assert len(scores) == 1
    assert stats(http)["verifier"]["items"] - s0["verifier"]["items"] == 1


def test_verify_route(http):
    item = unique_item()
    r = http.post("/v1/verify", json={k: item[k] for k in ("question", "response", "materials", "gold_answer")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["num_statements"] == sum(len(s["statements"]) for s in body["sentences"]) > 0
    again = http.post("/v1/verify", json={k: item[k] for k in ("question", "response", "materials", "gold_answer")})
    assert again.json()["cached"] is True


def test_get_reward_openrlhf_protocol(http, halueval_test_items):
    qa = halueval_test_items[3]
    prompt = f"Question: {qa.question}\nAnswer:"
    responses = [" " + qa.right_answer, " " + qa.hallucinated_answer, " I don't know."]
    labels = [json.dumps({"knowledge": " ".join(qa.knowledge), "answer": qa.right_answer, "question": qa.question}),
              json.dumps({"knowledge": qa.knowledge, "answer": qa.right_answer, "question": qa.question}),
              qa.right_answer]
    body = {"query": [prompt + r for r in responses], "prompts": [prompt] * 3, "labels": labels}
    r = http.post("/get_reward", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["rewards"]) == len(out["scores"]) == 3
    assert all(isinstance(x, float) and math.isfinite(x) for x in out["rewards"])
    assert all(0.0 <= s <= 1.0 for s in out["scores"])
    for key, values in out["extra_logs"].items():
        assert len(values) == 3, key
    # the scalar reward is the response-level return of /v1/rewards with one token over the response
    for resp, label, reward in zip(responses[:2], labels[:2], out["rewards"][:2]):
        lab = json.loads(label)
        mats = lab["knowledge"] if isinstance(lab["knowledge"], list) else [lab["knowledge"]]
        resp = resp.strip()           # /get_reward verifies the response without surrounding whitespace
        item = {"question": qa.question, "response": resp, "materials": mats, "gold_answer": qa.right_answer,
                "token_offsets": [[0, len(resp)]]}
        rr = http.post("/v1/rewards", json={"items": [item]}).json()["items"][0]
        assert rr["score"] == pytest.approx(reward)
        assert rr["cached"] is True                              # /get_reward filled the same cache entry
    # malformed protocol input
    bad = http.post("/get_reward", json={**body, "prompts": [prompt] * 2})
    assert bad.status_code == 422 and "prompts" in bad.json()["error"]
    bad = http.post("/get_reward", json={**body, "prompts": ["Another prompt:"] * 3})
    assert bad.status_code == 422 and "prompts.0" in bad.json()["error"]


# ------------------------------------------------------------------------------ auth, health, docs

def test_auth(service):
    url = service["url"]
    item = unique_item()
    r = httpx.post(f"{url}/v1/rewards", json={"items": [item]}, timeout=60)
    assert r.status_code == 401 and "Authorization" in r.json()["error"]
    r = httpx.post(f"{url}/v1/rewards", json={"items": [item]}, timeout=60, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    r = httpx.post(f"{url}/get_reward", json={"query": ["x"]}, timeout=60)
    assert r.status_code == 401
    r = httpx.post(f"{url}/v1/rewards", json={"items": [item]}, timeout=60,
                   headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    with pytest.raises(RewardRequestError) as ei:
        RewardClient(url, token="wrong", max_retries=3).rewards([item])
    assert ei.value.status == 401
    # health stays open; the docs and the schema need the token too (issue 12)
    h = httpx.get(f"{url}/healthz", timeout=30).json()
    assert h["status"] == "ok" and h["auth"] is True
    assert h["replicas"]["running"]["RLFHRewards"].get("RUNNING", 0) >= 1
    assert h["replicas"]["running"]["RLFHVerifier"].get("RUNNING", 0) >= 1
    assert httpx.get(f"{url}/docs", timeout=30).status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{url}/docs", timeout=30, headers=auth).status_code == 200
    spec = httpx.get(f"{url}/openapi.json", timeout=30, headers=auth).json()
    assert {"/v1/rewards", "/v1/verify", "/get_reward", "/healthz", "/v1/stats"} <= set(spec["paths"])


# ------------------------------------------------------------------------------ bad input -> 422

def _item(**kw):
    d = {"question": "Where is Paris?", "response": "Paris is in France.", "materials": ["Paris is in France."]}
    d.update(kw)
    return d


BAD_JSON = [
    # (name, body, field expected in the error)
    ("missing response", {"items": [{"question": "q"}]}, "items.0.response"),
    ("response not a string", {"items": [_item(response=3)]}, "items.0.response"),
    ("offset end past the text", {"items": [_item(token_offsets=[[0, 5], [6, 99]])]}, "items.0.token_offsets.1"),
    ("offset start > end", {"items": [_item(token_offsets=[[0, 5], [9, 6]])]}, "items.0.token_offsets.1"),
    ("offsets not monotonic", {"items": [_item(token_offsets=[[6, 8], [0, 5]])]}, "items.0.token_offsets.1"),
    ("empty offsets", {"items": [_item(token_offsets=[])]}, "items.0.token_offsets"),
    ("offsets not pairs", {"items": [_item(token_offsets=[[0, 1, 2]])]}, "items.0.token_offsets.0"),
    ("unknown label in map", {"items": [_item()], "overrides": {"verification_map": {"Partly": 1.0}}},
     "overrides.verification_map.Partly"),
    ("unknown info score", {"items": [_item()], "overrides": {"informative_map": {"9": 1.0}}},
     "overrides.informative_map.9"),
    ("bad granularity", {"items": [_item()], "overrides": {"granularity": "paragraph"}}, "overrides.granularity"),
    ("log domain", {"items": [_item()], "overrides": {"reward_epsilon": -2.0, "reward_mu": 1.0}},
     "overrides.reward_mu"),
    ("zero clip", {"items": [_item()], "overrides": {"reward_clip": 0}}, "overrides.reward_clip"),
    ("unknown override", {"items": [_item()], "overrides": {"kl_coef": 0.1}}, "overrides.kl_coef"),
    ("unknown item field", {"items": [_item(answer="x")]}, "items.0.answer"),
    ("empty batch", {"items": []}, "items"),
    ("no items", {}, "items"),
    ("oversized batch", {"items": [_item()] * (MAX_ITEMS + 1)}, "items"),
    ("response too long", {"items": [_item(response="x" * 20_001)]}, "items.0.response"),
    ("materials too large", {"items": [_item(materials=["m" * 150_000, "m" * 60_000])]}, "items.0"),
]
BAD_RAW = [
    ("NaN weight", b'{"items": [{"question": "q", "response": "r"}], "overrides": {"info_weight": NaN}}',
     "overrides.info_weight"),
    ("Infinity in a map", b'{"items": [{"question": "q", "response": "r"}], '
                          b'"overrides": {"verification_map": {"Wrong": -Infinity}}}',
     "overrides.verification_map.Wrong"),
    ("broken JSON", b'{"items": [', "body"),
]


@pytest.mark.parametrize("name, body, field", BAD_JSON, ids=[b[0] for b in BAD_JSON])
def test_bad_input_is_422_naming_the_field(http, name, body, field):
    r = http.post("/v1/rewards", json=body)
    _check_422(r, field)


@pytest.mark.parametrize("name, raw, field", BAD_RAW, ids=[b[0] for b in BAD_RAW])
def test_bad_raw_json_is_422(http, name, raw, field):
    r = http.post("/v1/rewards", content=raw, headers={"Content-Type": "application/json"})
    _check_422(r, field)


def _check_422(r, field):
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["status"] == 422
    assert body["error"].startswith(field), body["error"]
    assert any(d["field"].startswith(field) for d in body["detail"])
    assert all(d["fix"] for d in body["detail"]), body


def test_replica_still_healthy_after_bad_input(http):
    r = http.post("/v1/rewards", json={"items": [unique_item()]})
    assert r.status_code == 200
    s = stats(http)["counters"]["requests"]
    assert s.get("/v1/rewards 422", 0) >= len(BAD_JSON) + len(BAD_RAW)
    assert s.get("/v1/rewards 500", 0) == 0


def test_client_raises_request_error_with_server_message(service):
    with RewardClient(service["url"], token=TOKEN, max_retries=3) as client:
        with pytest.raises(RewardRequestError) as ei:
            client.rewards([_item(), _item(token_offsets=[[0, 500]])])
        assert client.requests == 1                 # a 422 is not retried
    e = ei.value
    assert e.status == 422 and e.item_index == 1 and e.field == "items.1.token_offsets.0"
    assert "past the end" in e.message


# ------------------------------------------------------------------------------ verifier failure on one item

def test_verifier_failure_on_one_item_is_reported_with_its_index(service, http):
    s0 = stats(http)
    items = [unique_item(), unique_item(f"Paris is in France. {FAULT_MARKER}"), unique_item()]
    r = http.post("/v1/rewards", json={"items": items})
    assert r.status_code == 502, r.text
    body = r.json()
    assert body["item_index"] == 1 and body["error"].startswith("items.1")
    assert "injected verifier fault" in body["error"]
    s1 = stats(http)
    assert s1["counters"]["verifier_errors"] - s0["counters"].get("verifier_errors", 0) == 1
    assert s1["verifier"]["errors"] - s0["verifier"]["errors"] == 1
    # the healthy items were verified and cached; the service keeps answering
    ok = http.post("/v1/rewards", json={"items": [items[0], items[2]]})
    assert ok.status_code == 200 and all(x["cached"] for x in ok.json()["items"])
    # the client retries a 5xx a bounded number of times, counts the failures, then gives up
    with RewardClient(service["url"], token=TOKEN, max_retries=1, backoff_s=0.05) as client:
        with pytest.raises(RewardServiceUnavailable, match="items.1"):
            client.rewards(items)
        assert client.failures == 2 and client.unavailable == 1


# ------------------------------------------------------------------------------ Redis outage mid-test

def test_redis_outage_keeps_serving_and_recovers(service, http):
    redis_proc = service["redis"]
    item = unique_item()
    assert http.post("/v1/rewards", json={"items": [item]}).status_code == 200
    assert http.post("/v1/rewards", json={"items": [item]}).json()["items"][0]["cached"] is True

    redis_proc.stop()
    try:
        e0 = stats(http)["cache"]["errors"]
        for _ in range(3):
            r = http.post("/v1/rewards", json={"items": [item, unique_item()]})
            assert r.status_code == 200, r.text
            assert not any(x["cached"] for x in r.json()["items"])     # no cache, still answers
        h = http.get("/healthz").json()
        assert h["status"] == "degraded" and h["cache"]["available"] is False
        assert h["cache"]["errors"] - e0 >= 6
    finally:
        redis_proc.start()

    deadline = time.monotonic() + 15
    fresh = unique_item()
    while time.monotonic() < deadline:
        http.post("/v1/rewards", json={"items": [fresh]})
        if http.post("/v1/rewards", json={"items": [fresh]}).json()["items"][0]["cached"]:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"cache did not come back after Redis restarted: {stats(http)['cache']}")
    h = http.get("/healthz").json()
    assert h["status"] == "ok" and h["cache"]["available"] is True and h["cache"]["outages"] >= 1
