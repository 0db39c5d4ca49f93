"""The claim judge (VERIFIER_BACKEND=judge): its training data, a few training steps on the real base encoder,
loading and serving it (in process, then through Ray Serve over HTTP with a real Redis cache), and bad input."""
from __future__ import annotations

import json
import random
import uuid

import httpx
import pytest
import torch

from verifier_service import judge_data as D
from verifier_service import judge_train as J
from core.config import ConfigError, RLFHConfig
from core.verify_schema import VerifyRequest
from verifier_service import judge_model as M
from verifier_service import text as T
from verifier_service.core import Verifier

QUESTION = "Which city is the capital of the country where the Seine flows?"
MATERIALS = ["The Seine is a river in northern France. It flows through Paris, the capital of France, and "
             "reaches the English Channel at Le Havre. Lyon lies on the Rhone."]


@pytest.fixture(scope="module")
def base_path() -> str:
    from core.assets import JUDGE_BASE, fetch_asset
    return str(fetch_asset(JUDGE_BASE))


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory, base_path):
    """A judge trained for 4 steps of 8 examples (mechanics only: its verdicts mean nothing yet)."""
    from core.data import load_halueval
    rng = random.Random(0)
    items = load_halueval("train")[:12]
    ex = D.qa_examples(items, rng)[:32]
    judge, tok, metrics = J.train_judge(ex, base_path, J.TrainSettings(batch_size=8, rank=4, alpha=8.0, epochs=1),
                                        data_key="test", progress=False)
    out = M.save_judge(judge, tmp_path_factory.mktemp("judge"), metrics)
    return out, metrics


# ----------------------------------------------------------------------------- data

def test_swap_entity_puts_another_entity_of_the_same_kind_from_the_pool():
    rng = random.Random(1)
    sent = "Hugh Laurie was born in 1959 in Oxford."
    pool = T.entities("Stephen Fry was born in 1957 in Hampstead. Cambridge is a city.")
    out = swap_entity_many(sent, pool, rng)
    assert out and all(o != sent for o in out)
    for o in out:
        # exactly one entity changed, into one of the pool's, of the same kind
        before = {e.text for e in T.entities(sent)}
        after = {e.text for e in T.entities(o)}
        new = after - before
        assert len(new) == 1 and new <= {e.text for e in pool}
    assert D.swap_entity("no entities here at all.", pool, rng) is None


def swap_entity_many(sent, pool, rng, n=20):
    return {D.swap_entity(sent, pool, rng) for _ in range(n)} - {None}


def test_qa_examples_label_the_right_answer_supported_and_the_hallucinated_one_not():
    from core.data import load_halueval
    items = load_halueval("train")[:30]
    ex = D.qa_examples(items, random.Random(0))
    qa = [e for e in ex if e.source == "qa"]
    assert len(qa) == 60
    right = {it.right_answer for it in items}
    assert all(e.label == (1 if e.inp.statement in {D.as_claim(r) for r in right} else 0) for e in qa)
    # short answers are written as sentences, so length does not give the label away
    assert D.as_claim("Delhi") == "The answer is Delhi." and D.as_claim("A long answer of several words.") == \
        "A long answer of several words."
    # the gold answer goes into about half the pairs, never a wrong one
    golds = [e.inp.gold for e in qa if e.inp.gold]
    assert 10 < len(golds) < 50 and set(golds) <= right
    swaps = [e for e in ex if e.source == "swap"]
    assert swaps and {e.label for e in swaps} == {0, 1}


def test_hand_examples_use_the_tune_part_only_and_never_the_held_out_third():
    tune = D.hand_examples("tune")
    held = D.hand_examples("heldout")
    tune_q = {e.inp.question for e in tune}
    held_q = {e.inp.question for e in held}
    assert tune and held and not (tune_q & held_q)
    from bench.real import split_of
    assert all(split_of(q) == "tune" for q in tune_q)
    build = D.build_training_set(D.DataSettings(qa_items=5, dialogue_items=0, summary_items=0))
    assert not ({e.inp.question for e in build} & held_q)


def test_the_training_set_never_holds_a_dev_or_test_question():
    from core.data import split_of
    ex = D.build_training_set(D.DataSettings(qa_items=200, dialogue_items=5, summary_items=5))
    qa_like = [e for e in ex if e.source in ("qa", "swap", "policy")]
    assert qa_like and all(split_of(e.inp.question) == "train" for e in qa_like)
    assert {e.source for e in ex} == set(D.SOURCES)


def test_held_out_dialogue_and_summaries_are_not_in_the_training_parts():
    train_d = {r.statement for r, _ in D.dialogue_items("train", 300)}
    held_d = {r.statement for r, _ in D.dialogue_items("heldout", 30)}
    assert held_d and not (train_d & held_d)


# ----------------------------------------------------------------------------- model

def test_pair_texts_carry_statement_sentence_question_gold_and_evidence():
    inp = M.JudgeInput("Paris", "The capital is Paris.", QUESTION, tuple(MATERIALS), "Paris")
    ev = M.select_evidence(inp)
    assert ev and any("Paris" in s for s in ev)
    a, b = M.pair_texts(inp, ev)
    assert a == "Paris || The capital is Paris."
    assert b.startswith("question: Which city") and "answer key: Paris" in b and "evidence:" in b
    a2, b2 = M.pair_texts(M.JudgeInput("x", "x", "q?", (), None), [])
    assert a2 == "x" and "answer key" not in b2 and b2.endswith("(none)")


def test_lora_starts_as_the_base_model(base_path):
    enc, tok = M.load_base(base_path)
    batch = M.encode(tok, [("a claim", "question: q evidence: e")], 32)
    with torch.no_grad():
        ref = enc(**batch).last_hidden_state
    judge = M.ClaimJudge(enc, M.JudgeSpec(rank=4, alpha=8.0))
    judge.eval()
    with torch.no_grad():
        out = judge.encoder(**batch).last_hidden_state
    torch.testing.assert_close(out, ref)
    trainable = {n for n, p in judge.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n or n.startswith("head.") for n in trainable)


def test_training_runs_its_steps_and_only_adapters_and_head_are_saved(tiny_judge, base_path):
    out, metrics = tiny_judge
    assert metrics["examples"] == 32 and metrics["steps"] == 4
    from safetensors.torch import load_file
    keys = set(load_file(str(out / "adapter.safetensors")))
    assert keys and all(".lora_" in k or k.startswith("head.") for k in keys)
    # much smaller than the base it adapts
    assert (out / "adapter.safetensors").stat().st_size < 2_000_000


def test_a_saved_judge_loads_and_gives_the_same_probabilities(tiny_judge, base_path):
    out, _ = tiny_judge
    judge, tok = M.load_judge(out, base_path)
    pairs = [("Paris is the capital.", "question: q evidence: Paris is the capital of France."),
             ("Lyon is the capital.", "question: q evidence: Paris is the capital of France.")]
    p1 = M.predict(judge, tok, pairs)
    p2 = M.predict(judge, tok, list(reversed(pairs)))
    assert all(0.0 < p < 1.0 for p in p1)
    assert p1 == pytest.approx(list(reversed(p2)), abs=1e-5)   # batch order does not change a verdict


def test_load_judge_names_what_is_missing(tmp_path, base_path):
    with pytest.raises(FileNotFoundError, match="judge.json and adapter.safetensors"):
        M.load_judge(tmp_path, base_path)


def test_balanced_accuracy():
    assert J.balanced_accuracy([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert J.balanced_accuracy([0.9, 0.1], [0.1, 0.2]) == 0.75
    assert J.balanced_accuracy([0.9], [0.9]) == 0.5


# ----------------------------------------------------------------------------- the backend

def judge_cfg(weights, **kw) -> RLFHConfig:
    return RLFHConfig.load(environ={}, verifier_backend="judge", claim_judge_weights=str(weights), **kw)


def test_backend_labels_checkable_statements_and_keeps_vague_and_abstention(tiny_judge):
    out, _ = tiny_judge
    ver = Verifier(judge_cfg(out))
    assert ver.backend_name == "judge"
    res = ver.verify(VerifyRequest(question=QUESTION, response="The capital is Paris. It lies on the Seine.",
                                   materials=MATERIALS))
    sts = res.statements()
    assert sts and all(s.label in ("Correct", "Wrong") for s in sts)
    assert all(0.5 <= s.confidence <= 1.0 for s in sts)   # the judge's probability of the label it gave
    # a restated question claims nothing: Vague by the rules, not sent to the judge
    res = ver.verify(VerifyRequest(question=QUESTION, response="Which city is the capital of the country?",
                                   materials=MATERIALS))
    assert {s.label for s in res.statements()} <= {"Vague"}
    # hedged statements get the hedged labels; an abstention holds no statement
    res = ver.verify(VerifyRequest(question=QUESTION, response="I think it is Paris.", materials=MATERIALS))
    assert {s.label for s in res.statements()} <= {"Hedged correct", "Hedged wrong"}
    assert ver.verify(VerifyRequest(question=QUESTION, response="I don't know.", materials=MATERIALS)).abstained


def test_backend_with_empty_evidence_and_no_gold_says_vague_not_wrong(tiny_judge):
    out, _ = tiny_judge
    res = Verifier(judge_cfg(out)).verify(VerifyRequest(question=QUESTION, response="Paris is the capital.",
                                                        materials=[]))
    assert res.statements() and {s.label for s in res.statements()} == {"Vague"}


def test_backend_judges_an_oversized_statement_within_its_token_budget(tiny_judge):
    out, _ = tiny_judge
    long = "Paris " + " ".join(["and the river Seine flows to Le Havre"] * 300) + "."
    res = Verifier(judge_cfg(out)).verify(VerifyRequest(question=QUESTION, response=long, materials=MATERIALS))
    assert res.statements() and all(s.label != "Vague" or s.confidence for s in res.statements())


def test_batched_requests_get_the_same_labels_as_one_by_one(tiny_judge):
    out, _ = tiny_judge
    ver = Verifier(judge_cfg(out))
    reqs = [VerifyRequest(question=QUESTION, response=r, materials=MATERIALS)
            for r in ("Paris.", "The capital is Lyon, on the Rhone.", "It is Le Havre. The Seine ends there.")]
    together = ver.verify_many(reqs)
    alone = [ver.verify(r) for r in reqs]
    for a, b in zip(together, alone):
        assert [(s.label, round(s.confidence, 3)) for s in a.statements()] == \
               [(s.label, round(s.confidence, 3)) for s in b.statements()]


def test_cache_identity_names_the_weights(tiny_judge):
    out, _ = tiny_judge
    ident = Verifier(judge_cfg(out)).cache_identity()
    assert ident["backend"] == "judge" and len(ident["weights"]) == 16
    assert ident != Verifier(judge_cfg(out, claim_judge_threshold=0.7)).cache_identity()


def test_bad_judge_settings_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="CLAIM_JUDGE_WEIGHTS=.*rlfh judge train"):
        Verifier(judge_cfg(tmp_path))
    with pytest.raises(ConfigError, match="VERIFIER_BACKEND"):
        RLFHConfig.load(environ={"VERIFIER_BACKEND": "judgee"})
    with pytest.raises(ConfigError, match="CLAIM_JUDGE_THRESHOLD"):
        RLFHConfig.load(environ={"CLAIM_JUDGE_THRESHOLD": "1.5"})


def test_judge_cli_eval_with_missing_weights_exits_with_a_message(tmp_path, capsys):
    from rlfh.cli import main
    assert main(["judge", "eval", "--weights", str(tmp_path)]) == 2
    assert "adapter.safetensors" in capsys.readouterr().err


# ----------------------------------------------------------------------------- served

@pytest.mark.slow
def test_judge_served_through_ray_serve_and_cached_in_redis(serve_ray, tiny_judge):
    from conftest import RedisProcess
    out, _ = tiny_judge
    redis_proc = RedisProcess().start()
    try:
        cfg = judge_cfg(out, redis_url=redis_proc.url, cache_ttl_s=600)
        with serve_ray.app(cfg) as url:
            body = {"question": QUESTION, "materials": MATERIALS,
                    "response": f"The capital is Paris ({uuid.uuid4().hex[:6]}). It lies on the Seine."}
            with httpx.Client(base_url=url, timeout=120) as http:
                r = http.post("/v1/verify", json=body)
                assert r.status_code == 200, r.text
                first = r.json()
                assert first["backend"] == "judge" and first["cached"] is False
                labels = [s["label"] for sent in first["sentences"] for s in sent["statements"]]
                assert labels and set(labels) <= {"Correct", "Wrong", "Vague"}
                again = http.post("/v1/verify", json=body).json()
                assert again["cached"] is True and again["sentences"] == first["sentences"]
                assert http.get("/v1/stats").json()["cache"]["backend"] == "redis"
                bad = http.post("/v1/verify", json={k: v for k, v in body.items() if k != "response"})
                assert bad.status_code == 422 and "response" in bad.text
    finally:
        redis_proc.stop()


def test_sampled_answers_label_the_answer_statement_by_the_gold_grader():
    from core.data import load_halueval
    it = next(i for i in load_halueval("train") if i.right_answer and len(i.right_answer.split()) <= 3)
    recs = [{"uid": it.uid, "mode": "evidence", "answer": f"The answer is {it.right_answer}.", "grade": "correct"},
            {"uid": it.uid, "mode": "closed", "answer": "The answer is Zanzibar Quux.", "grade": "incorrect"},
            {"uid": it.uid, "mode": "closed", "answer": "I don't know.", "grade": "not_attempted"},
            {"uid": "unknown-uid", "mode": "closed", "answer": "X.", "grade": "incorrect"}]
    ex = D.sampled_examples(recs, {it.uid: it}, random.Random(0))
    assert [e.label for e in ex] == [1, 0]
    assert all(e.source == "policy" and e.inp.materials == tuple(it.knowledge) for e in ex)


def test_bench_judge_times_both_backends_on_real_answers(tiny_judge, monkeypatch):
    from bench.judge_speed import measure
    out, _ = tiny_judge
    cfg = judge_cfg(out)
    rows = [measure(b, 1, 64, 1, cfg) for b in ("evidence", "judge")]
    assert [r["backend"] for r in rows] == ["evidence", "judge"]
    for r in rows:
        assert r["answers"] == 206 and r["statements"] > 206 and r["statements_per_s"] > 0


def test_calibrated_threshold_is_the_best_cut_off_on_the_given_examples(tiny_judge, base_path):
    out, _ = tiny_judge
    judge, tok = M.load_judge(out, base_path)
    ex = D.hand_examples("tune")[:40]
    thr, acc = J.calibrate_threshold(judge, tok, ex)
    assert 0.05 <= thr <= 0.95 and 0.0 <= acc <= 1.0
    probs = M.predict(judge, tok, J.pairs_of(ex))
    for k in range(1, 20):
        other = sum((p >= k / 20) == bool(e.label) for e, p in zip(ex, probs)) / len(ex)
        assert other <= acc + 1e-9
    # the backend uses the judge's own threshold unless CLAIM_JUDGE_THRESHOLD is set
    meta = json.loads((out / "judge.json").read_text())
    meta["metrics"]["threshold"] = 0.35
    (out / "judge.json").write_text(json.dumps(meta))
    assert Verifier(judge_cfg(out)).backend.threshold == 0.35
    assert Verifier(judge_cfg(out, claim_judge_threshold=0.6)).backend.threshold == 0.6



def test_real_bench_has_judge_rows_when_a_judge_is_given_and_says_how_to_build_one_when_not(tiny_judge, tmp_path):
    from bench.real import DEFAULT_PATH, load_real, run_real
    out, _ = tiny_judge
    small = tmp_path / "real.jsonl"
    lines = DEFAULT_PATH.read_text().splitlines()
    small.write_text("\n".join(lines[:6]) + "\n")
    assert len(load_real(small)) == 6
    rows = run_real(small, parts=("tune", "heldout"), cfg=judge_cfg(out), with_llm=False)
    judge_rows = [r for r in rows if r["backend"] == "judge"]
    assert judge_rows and all("label_accuracy" in r or "note" not in r for r in judge_rows)
    missing = run_real(small, parts=("tune",), cfg=judge_cfg(tmp_path), with_llm=False)
    notes = [r["note"] for r in missing if r["backend"] == "judge"]
    assert len(notes) == 2 and all("rlfh judge train" in n for n in notes)
