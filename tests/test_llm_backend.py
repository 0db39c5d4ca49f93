"""The `llm` and `self` verifier backends against a real OpenAI-compatible HTTP server.

The server is tests/openai_server.py (FastAPI + uvicorn on a free loopback port): replay mode
returns recorded completions (success path, malformed and invalid replies), fault injection gives HTTP
500s and slow answers (retries, timeouts), model mode runs the real SmolLM2-135M-Instruct (slow tests).
"""
from __future__ import annotations

import json
import time

import httpx
import pytest

from core import metrics
from core.config import RLFHConfig
from conftest import HANG_S, free_port  # not tests.conftest: openrlhf installs a top-level "tests" package
from openai_server import BackgroundServer, create_app, load_replay, messages_key
from core.verify_schema import LABELS, VerifyRequest
from verifier_service.align import align_statement
from verifier_service.core import Verifier
from verifier_service.prompts import JudgeFormatError, parse_extract, parse_verify

MATERIALS = ["Jonathan Stark (born April 3, 1971) is a former professional tennis player from the United States. "
             "During his career he won two Grand Slam doubles titles."]
QUESTION = "How many Grand Slam doubles titles did Jonathan Stark win?"
RESPONSE = "He won two Grand Slam doubles titles and was born in 1971. I think he is from Canada."

EXTRACT_REPLY = json.dumps({"sentences": [
    {"id": 1, "statements": ["Jonathan Stark won two Grand Slam doubles titles", "Jonathan Stark was born in 1971"]},
    {"id": 2, "statements": ["Jonathan Stark is from Canada", "The sky over Wimbledon is green"]},
]})
VERIFY_REPLY = "```json\n" + json.dumps({"results": [
    {"id": "S1", "label": "Correct", "informativeness": 5, "confidence": 0.9, "evidence": ["E1"]},
    {"id": "S2", "label": "Correct", "informativeness": 3, "confidence": 0.8, "evidence": ["E1"]},
    {"id": "S3", "label": "Wrong", "informativeness": 3, "confidence": 0.85, "evidence": []},
    {"id": "S4", "label": "Vague", "informativeness": 1, "confidence": 0.5},
]}) + "\n```"
REPLAY_OK = [
    {"match": ["atomic statements", "He won two Grand Slam doubles titles"], "reply": EXTRACT_REPLY},
    {"match": ["For every statement give", "[S1] Jonathan Stark won two"], "reply": VERIFY_REPLY},
]


def _cfg(url: str, **kw) -> RLFHConfig:
    base = dict(model_url=url, annotate_model="judge", llm_timeout_s=10.0, llm_max_retries=2,
                llm_fallback_label="Vague")
    base.update(kw)
    return RLFHConfig.load(environ={}, **base)


def _verifier(url: str, **kw) -> Verifier:
    v = Verifier(_cfg(url, **kw), backend="llm")
    v.backend.backoff_s = 0.01
    return v


def _req(**kw) -> VerifyRequest:
    return VerifyRequest(question=QUESTION, response=kw.pop("response", RESPONSE), materials=MATERIALS, **kw)


def _stats(srv) -> dict:
    return httpx.get(srv.url.replace("/v1", "/stats"), timeout=5).json()


@pytest.fixture
def fallback_spy(monkeypatch):
    """Record metric increments (metrics are no-ops outside Ray; the call itself is what we check)."""
    seen = []
    real = metrics.inc

    def spy(name, value=1.0, tags=None):
        seen.append((name, value, dict(tags or {})))
        real(name, value, tags)

    monkeypatch.setattr(metrics, "inc", spy)
    return seen


def _fallbacks(seen) -> float:
    return sum(v for n, v, _ in seen if n == "rlfh_judge_fallbacks_total")


def _call_failures(seen, target="judge_llm") -> float:
    return sum(v for n, v, t in seen if n == "rlfh_call_failures_total" and t == {"target": target})


# ----------------------------------------------------------------------------- parsing & alignment (no server)

def test_strict_parsers():
    assert parse_extract(EXTRACT_REPLY, 2) == {0: ["Jonathan Stark won two Grand Slam doubles titles",
                                                   "Jonathan Stark was born in 1971"],
                                               1: ["Jonathan Stark is from Canada", "The sky over Wimbledon is green"]}
    out = parse_verify(VERIFY_REPLY, 4, 1)
    assert out[0]["label"] == "Correct" and out[0]["evidence"] == [0] and out[3]["confidence"] == 0.5
    bad = [
        "", "Sure! Here are the statements: [1] ...", '{"sentences": "none"}', '[{"id": 1}]',
        '{"sentences": [{"id": 3, "statements": ["x"]}]}', '{"sentences": [{"id": 1, "statements": [1]}]}',
        'Here you go: {"sentences": []}',
    ]
    for reply in bad:
        with pytest.raises(JudgeFormatError):
            parse_extract(reply, 2)
    for item in ({"id": "S1", "label": "Mostly correct", "informativeness": 3},
                 {"id": "S1", "label": "correct", "informativeness": 3},
                 {"id": "S1", "label": "Correct", "informativeness": 6},
                 {"id": "S1", "label": "Correct", "informativeness": "5"},
                 {"id": "S1", "label": "Correct", "informativeness": 4, "confidence": 1.5},
                 {"id": "S9", "label": "Correct", "informativeness": 4}):
        with pytest.raises(JudgeFormatError):
            parse_verify(json.dumps({"results": [item]}), 4, 1)


def test_alignment_of_rewritten_statements():
    resp = "He won two Grand Slam doubles titles and was born in 1971. I think he is from Canada."
    sents = [(0, 58), (59, len(resp))]
    a = align_statement("Jonathan Stark won two Grand Slam doubles titles", resp, sents, hint=0)
    assert a.aligned and resp[a.start:a.end] == "won two Grand Slam doubles titles"
    a = align_statement("Jonathan Stark was born in 1971", resp, sents, hint=0)
    assert a.aligned and resp[a.start:a.end] == "was born in 1971"
    a = align_statement("Stark is from Canada", resp, sents, hint=0)  # wrong hint: found in sentence 2
    assert a.aligned and a.sentence == 1 and resp[a.start:a.end] == "is from Canada"
    a = align_statement("The sky over Wimbledon is green", resp, sents, hint=1)
    assert not a.aligned and (a.start, a.end) == sents[1]


def test_alignment_on_a_long_response_finds_the_right_sentence():
    """400 sentences and a wrong hint: the statement is found (its time is measured by `rlfh bench scaling`)."""
    sent = "The band played in many cities and towns across the country. "
    resp = sent * 400  # 24k chars, 400 sentences
    spans, pos = [], 0
    for _ in range(400):
        spans.append((pos, pos + len(sent) - 1))
        pos += len(sent)
    a = align_statement("The band played in many towns", resp, spans, hint=399)
    assert a.aligned and spans[a.sentence][0] <= a.start < a.end <= spans[a.sentence][1] + 1


# ----------------------------------------------------------------------------- llm backend over HTTP

def test_llm_success_via_replay(fallback_spy):
    app = create_app("replay", replay=REPLAY_OK)
    with BackgroundServer(app, free_port()) as srv:
        v = _verifier(srv.url)
        res = v.verify(_req(gold_answer="two"))
        stats = _stats(srv)
    assert stats["calls"] == 2 and stats["failed"] == 0
    assert res.backend == "llm" and res.num_statements == 4
    assert res.num_fallback == 0 and _fallbacks(fallback_spy) == 0 and _call_failures(fallback_spy) == 0
    sts = res.statements()
    by_text = {s.text: s for s in sts}
    won = by_text["Jonathan Stark won two Grand Slam doubles titles"]
    assert won.label == "Correct" and won.informativeness == 5 and won.aligned
    assert RESPONSE[won.start:won.end] == "won two Grand Slam doubles titles"
    assert won.evidence == MATERIALS[0:1] or "Grand Slam" in won.evidence[0]
    canada = by_text["Jonathan Stark is from Canada"]
    assert canada.label == "Hedged wrong"  # judge said Wrong; the sentence hedges ("I think")
    sky = by_text["The sky over Wimbledon is green"]
    assert not sky.aligned and (sky.start, sky.end) == (res.sentences[1].start, res.sentences[1].end)
    assert res.num_unaligned == 1
    assert all(s.label in LABELS for s in sts)


def test_llm_malformed_json_is_a_counted_fallback(fallback_spy):
    replay = [{"match": ["atomic statements"], "reply": "Sure! The facts are: he won two titles."},
              {"match": ["For every statement give"],
               "reply": '{"results": [{"id": "S1", "label": "Mostly right", "informativeness": 4}]}'}]
    with BackgroundServer(create_app("replay", replay=replay), free_port()) as srv:
        v = _verifier(srv.url, llm_max_retries=1, llm_fallback_label="Hedged wrong")
        res = v.verify(_req())
        stats = _stats(srv)
    # 2 attempts for extraction, 2 for verification; rule-based statements with exact spans
    assert stats["calls"] == 4
    sts = res.statements()
    assert res.num_statements == len(sts) == 3
    assert res.num_fallback == 3 and all(s.fallback and s.label == "Hedged wrong" for s in sts)
    assert all(RESPONSE[s.start:s.end] == s.text for s in sts)
    assert _fallbacks(fallback_spy) == 3
    assert [t for n, _, t in fallback_spy if n == "rlfh_judge_fallbacks_total"] == [{"backend": "llm"}]
    assert _call_failures(fallback_spy) == 4       # every malformed reply is a counted failed attempt


def test_llm_http_500_bounded_retries_then_fallback(fallback_spy):
    app = create_app("replay", replay=REPLAY_OK, fail_first=1000)
    with BackgroundServer(app, free_port()) as srv:
        v = _verifier(srv.url, llm_max_retries=2)
        t0 = time.perf_counter()
        res = v.verify(_req())
        elapsed = time.perf_counter() - t0
        stats = _stats(srv)
    assert stats["calls"] == 6 and stats["failed"] == 6  # (1 + 2 retries) x (extract, verify)
    assert res.num_fallback == res.num_statements == 3 and _fallbacks(fallback_spy) == 3
    assert _call_failures(fallback_spy) == 6
    assert elapsed < HANG_S                              # bounded retries: a hang guard, not a benchmark


def test_judge_backoff_is_capped(monkeypatch):
    """LLM_MAX_RETRIES=10 must not mean 0.5 * 2^9 s of sleeping before the last attempt."""
    import verifier_service.llm_backend as lb
    seen = []
    real_sleep = time.sleep
    monkeypatch.setattr(lb.time, "sleep", lambda s: (seen.append(s), real_sleep(s)))

    def engine(convs):
        raise RuntimeError("down")

    v = Verifier(RLFHConfig.load(environ={}, llm_max_retries=10), backend="self", chat_fn=engine)
    v.backend.backoff_s, v.backend.max_backoff_s = 0.001, 0.004
    t0 = time.perf_counter()
    res = v.verify(_req())
    assert res.num_fallback == res.num_statements == 3
    assert max(seen) == pytest.approx(0.004) and len(seen) == 2 * 10   # 10 waits per stage, capped
    assert time.perf_counter() - t0 < HANG_S             # the cap is checked above; this only catches a hang


def test_llm_transient_500_recovers_on_retry(fallback_spy):
    app = create_app("replay", replay=REPLAY_OK, fail_first=1)
    with BackgroundServer(app, free_port()) as srv:
        res = _verifier(srv.url, llm_max_retries=1).verify(_req())
        stats = _stats(srv)
    assert stats == {"calls": 3, "failed": 1, "served": 2}
    assert res.num_fallback == 0 and res.num_statements == 4 and _fallbacks(fallback_spy) == 0


def test_llm_timeout_bounded_retries_then_fallback(fallback_spy):
    app = create_app("replay", replay=REPLAY_OK, delay_s=1.5)
    with BackgroundServer(app, free_port()) as srv:
        v = _verifier(srv.url, llm_timeout_s=0.3, llm_max_retries=1)
        t0 = time.perf_counter()
        res = v.verify(_req())
        elapsed = time.perf_counter() - t0
        calls = _stats(srv)["calls"]
    # the timeouts fired: 4 calls, each cut at 0.3 s (a reply after 1.5 s would have been a good one, no fallback)
    assert calls == 4
    assert res.num_fallback == res.num_statements == 3
    # the bound the reward service waits for a verifier chunk covers both stages' retries and back-off
    from verifier_service.llm_backend import judge_time_bound_s
    bound = judge_time_bound_s(v.cfg)
    assert bound == pytest.approx(2 * (2 * (0.3 + 30.0) + 0.5))   # + LLM_MAX_WAIT_S per attempt (default 30 s)
    assert elapsed < HANG_S                              # a hang guard, not a benchmark (a loaded runner is slow)
    assert judge_time_bound_s(_cfg("http://x/v1", llm_timeout_s=60, llm_max_retries=2)) == \
        2 * (3 * (60 + 30) + 1.5)


def test_llm_unreachable_endpoint_falls_back():
    port = free_port()  # nothing listens there
    res = _verifier(f"http://127.0.0.1:{port}/v1", llm_max_retries=1).verify(_req())
    assert res.num_fallback == res.num_statements == 3


def test_llm_batch_only_resends_failed_conversations():
    replay = REPLAY_OK + [{"match": ["atomic statements", "Paris is in France"],
                           "reply": "not json at all"}]
    with BackgroundServer(create_app("replay", replay=replay), free_port()) as srv:
        v = _verifier(srv.url, llm_max_retries=2)
        res = v.verify_many([_req(), _req(response="Paris is in France."), _req(response="I don't know.")])
        stats = _stats(srv)
    ok, bad, abstain = res
    assert ok.num_fallback == 0 and ok.num_statements == 4
    # extraction of the 2nd failed 3 times -> rule split; its verification has no recording -> 404 x3
    assert bad.num_statements == 1 and bad.num_fallback == 1
    assert abstain.abstained and abstain.num_statements == 0
    assert stats["calls"] == 2 + 3 + 3  # ok: 2, bad: 3 extract + 3 verify, abstention: none


def test_replay_file_round_trip(tmp_path):
    path = tmp_path / "rec.jsonl"
    msgs = [{"role": "user", "content": "hello"}]
    path.write_text(json.dumps({"key": messages_key(msgs), "reply": "hi"}) + "\n"
                    + json.dumps({"match": "bye", "reply": "ciao"}) + "\n")
    entries = load_replay(path)
    with BackgroundServer(create_app("replay", replay=entries), free_port()) as srv:
        r = httpx.post(srv.url + "/chat/completions", json={"model": "m", "messages": msgs}, timeout=5)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "hi"
        r = httpx.post(srv.url + "/chat/completions",
                       json={"messages": [{"role": "user", "content": "ok bye"}]}, timeout=5)
        assert r.json()["choices"][0]["message"]["content"] == "ciao"
        r = httpx.post(srv.url + "/chat/completions", json={"messages": []}, timeout=5)
        assert r.status_code == 422
        r = httpx.post(srv.url + "/chat/completions", json={"messages": [{"role": "user", "content": "?"}]},
                       timeout=5)
        assert r.status_code == 404
    (tmp_path / "bad.jsonl").write_text('{"reply": "x"}\n')
    with pytest.raises(ValueError, match="key"):
        load_replay(tmp_path / "bad.jsonl")


# ----------------------------------------------------------------------------- self backend

def test_self_backend_with_failing_engine_falls_back(fallback_spy):
    calls = []

    def engine(convs):
        calls.append(len(convs))
        raise RuntimeError("engine is asleep")

    cfg = RLFHConfig.load(environ={}, llm_max_retries=1)
    v = Verifier(cfg, backend="self", chat_fn=engine)
    v.backend.backoff_s = 0.0
    res = v.verify(_req())
    assert calls == [1, 1, 1, 1]
    assert res.backend == "self" and res.num_fallback == res.num_statements == 3
    assert [t for n, _, t in fallback_spy if n == "rlfh_judge_fallbacks_total"] == [{"backend": "self"}]
    assert _call_failures(fallback_spy, "judge_self") == 4


def test_self_backend_with_scripted_engine():
    """A deterministic in-process engine (the rollout engine's shape): replies by prompt kind."""
    def engine(convs):
        return [EXTRACT_REPLY if "atomic statements" in c[-1]["content"] else VERIFY_REPLY for c in convs]

    v = Verifier(RLFHConfig.load(environ={}), backend="self", chat_fn=engine)
    res = v.verify_many([_req(), _req()])
    assert [r.num_statements for r in res] == [4, 4] and all(r.num_fallback == 0 for r in res)


# ----------------------------------------------------------------------------- the real SmolLM2

# real model: these tests check what SmolLM2 answers a judge prompt (it cannot finish the JSON in 16 tokens)
@pytest.fixture(scope="module")
def smol_chat():
    """SmolLM2 in this process, with one intra-op thread while these tests run.

    On a 2-core machine that other jobs keep busy, torch's default of one OpenMP thread per core spends its
    time in barriers: one 214-token extraction prompt + 16 new tokens took ~50 s with 2 threads and ~1.5 s
    with 1 (the actors make the same choice, see actors/base.py).
    """
    import torch

    from hf_chat import HFChat
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield HFChat("smollm2-135m-instruct", max_new_tokens=16, batch_size=4)
    finally:
        torch.set_num_threads(threads)


def _check_invariants(res, response):
    sts = res.statements()
    assert res.num_statements == len(sts) >= 1
    assert res.num_fallback == sum(s.fallback for s in sts)
    assert res.num_unaligned == sum(not s.aligned for s in sts)
    for s in sts:
        assert s.label in LABELS and 1 <= s.informativeness <= 5
        assert 0 <= s.start < s.end <= len(response)
        if s.fallback:
            assert s.label == "Vague" and s.confidence == 0.0


@pytest.mark.slow
def test_llm_backend_against_real_smollm2_server(smol_chat, fallback_spy):
    app = create_app("model", chat=smol_chat, max_new_tokens_cap=16)
    with BackgroundServer(app, free_port()) as srv:
        v = _verifier(srv.url, llm_timeout_s=300, llm_max_retries=0)
        res = v.verify(_req(response="Jonathan Stark won two titles. He is from Canada."))
        stats = _stats(srv)
    assert stats["calls"] == 2 and stats["served"] == 2
    _check_invariants(res, "Jonathan Stark won two titles. He is from Canada.")
    # SmolLM2-135M with 16 new tokens cannot finish the JSON object: the strict parser rejects it and
    # every statement is an explicit, counted fallback (never a crash, never a silent label)
    assert res.num_fallback == res.num_statements
    assert _fallbacks(fallback_spy) == res.num_fallback


@pytest.mark.slow
def test_self_backend_with_real_smollm2_chatfn(smol_chat):
    v = Verifier(RLFHConfig.load(environ={}, llm_max_retries=0), backend="self", chat_fn=smol_chat)
    resp = "Jonathan Stark won two titles."
    res = v.verify(VerifyRequest(question=QUESTION, response=resp, materials=MATERIALS, gold_answer="two"))
    assert res.backend == "self"
    _check_invariants(res, resp)
    assert v.cache_identity()["model"] == "smollm2-135m-instruct"


@pytest.mark.slow
def test_hf_chat_is_greedy_generate_and_shares_a_loaded_model(smol_chat):
    """HFChat (the rollout engine's chat) = HF greedy generate of the chat template; given objects are shared."""
    import torch

    shared = type(smol_chat)("smollm2-135m-instruct", max_new_tokens=8, model=smol_chat.model,
                             tokenizer=smol_chat.tokenizer)
    assert shared.model is smol_chat.model and shared.tokenizer is smol_chat.tokenizer
    convs = [[{"role": "user", "content": "Name a colour."}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of Italy?"}]]
    got = shared(convs)
    tok, model = smol_chat.tokenizer, smol_chat.model
    for conv, reply in zip(convs, got):
        ids = tok(tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True),
                  add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                                 do_sample=False, pad_token_id=tok.pad_token_id)
        assert reply == tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()
    assert shared([]) == []
