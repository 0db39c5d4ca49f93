"""`rlfh verify` and `rlfh bench verifier` through the real CLI entry point."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlfh.cli import build_parser, main


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlfh", *args], capture_output=True, text=True, timeout=300)


def test_verify_help_explains_every_option():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["verify"]
    for action in sub._actions:
        if action.dest != "help":
            assert action.help and len(action.help) > 10, action.dest
    bench = next(a for a in parser._actions if a.dest == "command").choices["bench"]
    bv = next(a for a in bench._actions if a.dest == "bench").choices["verifier"]
    for action in bv._actions:
        if action.dest != "help":
            assert action.help and len(action.help) > 10, action.dest


def test_verify_one_response_json(capsys):
    rc = main(["verify", "--question", "Where is Jonathan Stark from?",
               "--response", "I think he is from Canada. He won two titles.",
               "--knowledge", "Jonathan Stark is a tennis player from the United States. He won two titles.",
               "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    labels = [st["label"] for s in out["sentences"] for st in s["statements"]]
    assert labels == ["Hedged wrong", "Correct"]
    assert out["backend"] == "evidence" and out["num_statements"] == 2


def test_verify_table_and_materials_file(tmp_path, capsys):
    mat = tmp_path / "m.json"
    mat.write_text(json.dumps(["Jonathan Stark is a tennis player from the United States."]))
    rc = main(["verify", "-q", "Where is Jonathan Stark from?", "-r", "The United States.", "-m", str(mat),
               "--gold", "United States"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "Correct" in out and "statement" in out


def test_verify_bad_input_is_a_clear_error(tmp_path, capsys):
    assert main(["verify", "--question", "q"]) == 2
    assert "--response" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SystemExit, match="list of strings"):
        main(["verify", "-q", "q", "-r", "r", "-m", str(bad)])
    assert main(["verify", "-q", "q", "-r", "x" * 30000]) == 2
    assert "response" in capsys.readouterr().err
    assert main(["verify", "-q", "q", "-r", "r", "--backend", "llm"]) == 2  # no MODEL_URL: ConfigError
    assert "MODEL_URL" in capsys.readouterr().err


def test_verify_self_backend_from_env_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setenv("VERIFIER_BACKEND", "self")
    assert main(["verify", "-q", "q", "-r", "Paris."]) == 2    # only `rlfh train` has the policy's engines
    err = capsys.readouterr().err
    assert "VERIFIER_BACKEND=self" in err and "--backend evidence" in err and "Traceback" not in err
    assert main(["verify", "-q", "Capital of France?", "-r", "Paris.", "--backend", "evidence", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "evidence"


def test_verify_data_summary_json():
    p = _run(["verify", "--data", "halueval:dev", "--limit", "5", "--json"])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["summary"]["right"]["responses"] == 5 and out["summary"]["hallucinated"]["responses"] == 5
    assert len(out["results"]) == 10


def test_bench_verifier_small(tmp_path):
    out = tmp_path / "bench.json"
    p = _run(["bench", "verifier", "--split", "dev", "--limit", "40", "--json", str(out)])
    assert p.returncode == 0, p.stderr
    for row in ("(1) length-only rule", "(3) evidence, no gold", "(4) evidence, with gold", "not configured"):
        assert row in p.stdout
    data = json.loads(out.read_text())
    rows = {r["row"]: r for r in data["rows"]}
    gold = rows["(4) evidence, with gold"]
    assert gold["a_n"] == 80 and 0.0 <= gold["a_accuracy"] <= 1.0 and gold["b_n"] > 20
    assert gold["b_pairwise"] > rows["(b-baseline) q-word proximity"]["b_pairwise"]
    assert 0.0 <= gold["b_reward_ties"] <= 1.0 and gold["b_reward_pairwise"] > 0.5
    # (c) long-form table: with and without gold, every metric in range, llm rows say why they are empty
    assert "(c) Verifier on long-form answers" in p.stdout
    lrows = {r["row"]: r for r in data["longform"]}
    assert data["longform_n"]["responses"] >= 30 and data["longform_n"]["statements"] >= 100
    for name in ("(3) evidence, no gold", "(4) evidence, with gold"):
        m = lrows[name]
        assert m["n_statements"] == data["longform_n"]["statements"]
        for k in ("accuracy", "span_cover", "span_iou", "token_sign_agreement"):
            assert 0.0 <= m[k] <= 1.0, (name, k)
        assert set(m["per_label"]) == {"Correct", "Hedged correct", "Vague", "Hedged wrong", "Wrong"}
    assert lrows["(4) evidence, with gold"]["accuracy"] > 0.5
    assert "not configured" in lrows["(5) llm (MODEL_URL), no gold"]["note"]


def test_swap_entity_is_deterministic_and_never_the_answer(halueval_test_items):
    from bench.longform import swap_entity
    from verifier_service.text import normalize
    n = 0
    for it in halueval_test_items[:200]:
        d = swap_entity(it)
        assert d == swap_entity(it)
        if d is None:
            continue
        n += 1
        rn, dn = normalize(it.right_answer), normalize(d)
        assert dn and dn not in rn and rn not in dn
        assert dn in normalize(" ".join(it.knowledge))
    assert n > 150


def test_bench_abstain_small_and_bad_input(capsys):
    """`rlfh bench abstain` on the real model: one row per system prompt x mode, counts out of the right totals."""
    import re
    p = _run(["bench", "abstain", "--questions", "2", "--samples", "2", "--max-new-tokens", "4"])
    assert p.returncode == 0, p.stderr[-2000:]
    rows = re.findall(r"│ (default|may-abstain|strong)\s+│ (closed|evidence)\s+│ (\d) / 2\s+│ (\d) / 4", p.stdout)
    assert {(r[0], r[1]) for r in rows} == {(s, m) for s in ("default", "may-abstain", "strong")
                                            for m in ("closed", "evidence")}, p.stdout
    assert main(["bench", "abstain", "--samples", "0"]) == 2     # bad input: in this process, no Python start
    assert "--samples must be >= 1" in capsys.readouterr().out
