"""``rlfh show``: a run's samples.jsonl as an HTML page (ops/show.py), from records written the way a training
run writes them (cluster/samples_log.sample_record: the rollout's tokens from SmolLM2's tokenizer, the tiny model's
too, the verifier's result, the reward service's token rewards)."""
from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from actors.types import RolloutSample, token_offsets
from rlfh.cli import main as rlfh
from cluster.samples_log import BASE_KEYS, read_samples, sample_record
from ops.show import build, render_page
from core.config import RLFHConfig
from core.data import QAItem
from core.verify_schema import Sentence, Statement, VerifyRequest, VerifyResult
from reward_service.token_rewards import RewardSettings, compute_token_rewards

PASSAGE = ("Arthur's Magazine (1844-1846) was an American literary periodical published in Philadelphia. "
           "First for Women is a woman's magazine published by Bauer Media Group in the USA.")
ITEM = QAItem(question="Which magazine was started first <Arthur's Magazine> or First for Women?",
              knowledge=[PASSAGE], right_answer="Arthur's Magazine")
# model output with markup in it: the page must show it as text
RESPONSE = "Arthur's <b>Magazine</b> was started first & it was published in Philadelphia."


@pytest.fixture(scope="module")
def tok(embedded_model_path):
    from core.model_loader import load_tokenizer
    return load_tokenizer(embedded_model_path)


@pytest.fixture(scope="module")
def settings():
    return RewardSettings.from_config(RLFHConfig.load(environ={}))


def _rollout(tok, text: str) -> RolloutSample:
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    decoded, offsets = token_offsets(tok, ids)
    assert decoded == text
    return RolloutSample(prompt_index=0, prompt_token_ids=[1], response_token_ids=ids, response_text=decoded,
                         token_offsets=offsets, finish_reason="stop")


def _record(step, item, sample, verified, settings, mode="evidence"):
    reward = compute_token_rewards(verified, sample.token_offsets, len(sample.response_text), settings)
    reward.verification = verified
    return sample_record(step, item, mode, sample, reward)


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


class Spans(HTMLParser):
    """The page's token spans (class ``t``) in order: (classes, title, text), and the text inside <details>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tokens, self.details_text, self._stack, self._details = [], [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "details":
            self._details += 1
        if tag == "span" and "t" in classes:
            self.tokens.append([classes, a.get("title", ""), ""])
            self._stack.append(True)
        elif tag == "span":
            self._stack.append(False)

    def handle_endtag(self, tag):
        if tag == "details":
            self._details -= 1
        if tag == "span":
            self._stack.pop()

    def handle_data(self, data):
        if self._stack and self._stack[-1]:
            self.tokens[-1][2] += data
        if self._details:
            self.details_text.append(data)


def _parse(page: str) -> Spans:
    p = Spans()
    p.feed(page)
    return p


def test_page_shows_a_real_verification_token_by_token(tmp_path, tok, settings):
    """The verifier's statements and the service's token rewards on a tokenized response: every token appears,
    escaped, with its reward's sign as its colour and its reward on hover; every statement with its label and p;
    the passage folded away in <details>."""
    from verifier_service.core import Verifier
    sample = _rollout(tok, RESPONSE)
    verified = Verifier(backend="evidence").verify(VerifyRequest(question=ITEM.question, response=RESPONSE,
                                                                 materials=ITEM.knowledge,
                                                                 gold_answer=ITEM.right_answer))
    rec = _record(3, ITEM, sample, verified, settings)
    assert list(rec)[:len(BASE_KEYS)] == list(BASE_KEYS)   # what older readers of samples.jsonl read is unchanged
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "samples.jsonl", [rec])
    assert rlfh(["show", str(run)]) == 0
    page = (run / "samples.html").read_text(encoding="utf-8")
    assert "<b>Magazine</b>" not in page and "&lt;b&gt;" in page            # model output is text, not markup
    assert "<Arthur's Magazine>" not in page and "&lt;Arthur&#x27;s Magazine&gt;" in page
    assert not re.search(r"<(link|img|iframe)\b|src=|href=\"http", page)    # self-contained

    parsed = _parse(page)
    # one span per token (this response has no multi-byte characters), the EOS token last
    assert len(parsed.tokens) == len(sample.response_token_ids)
    assert "".join(t[2] for t in parsed.tokens[:-1]) == RESPONSE and parsed.tokens[-1][2] == "eos"
    for (classes, title, text), reward in zip(parsed.tokens, rec["token_rewards"]):
        sign = "neg" if reward < -1e-6 else "pos" if reward > 1e-6 else "zero"
        assert any(c.startswith(sign) for c in classes), (text, reward, classes)
        assert f"reward {reward:+.3f}" in title
    assert any(r != 0 for r in rec["token_rewards"])
    statements = [st for s in verified.sentences for st in s.statements]
    assert statements
    for st in statements:
        assert re.search(rf'class="lab lab-\d">{re.escape(st.label)}</span><span class="p"[^>]*>p {st.confidence:.2f}',
                         page), st
        assert html.escape(st.text) in page
    assert PASSAGE in "".join(parsed.details_text)
    assert ITEM.question in "".join(parsed.details_text)


def test_a_wrong_statement_is_red_and_a_right_one_green(tmp_path, tok, settings):
    """The colour scale's sign, on the reward service's own math: the last token of a Wrong statement carries a
    negative reward and gets a red class, the last token of a Correct one a green class; p is shown as logged."""
    text = "Paris is in France. It is in Spain."
    sample = _rollout(tok, text)
    verified = VerifyResult(sentences=[
        Sentence(text="Paris is in France.", start=0, end=19, statements=[
            Statement(text="Paris is in France", start=0, end=18, label="Correct", informativeness=4,
                      confidence=0.91)]),
        Sentence(text="It is in Spain.", start=20, end=35, statements=[
            Statement(text="Paris is in Spain", start=20, end=34, label="Wrong", informativeness=4,
                      confidence=0.07)])])
    rec = _record(1, ITEM, sample, verified, settings)
    page = render_page(read_samples(_write(tmp_path / "samples.jsonl", [rec])), "x")
    tokens = {t[2].strip(): t for t in _parse(page).tokens}
    assert any(c.startswith("neg") for c in tokens["Spain"][0]) and "Wrong, p 0.07" in tokens["Spain"][1]
    assert any(c.startswith("pos") for c in tokens["France"][0]) and "Correct, p 0.91" in tokens["France"][1]
    assert "p 0.91" in page and "p 0.07" in page
    # the legend has both ends of the scale
    assert re.search(r'class="neg5"[^>]*>-\d', page) and re.search(r'class="pos5"[^>]*>\+\d', page)


def test_header_steps_select_and_limit(tmp_path, tok, settings):
    """Grouped by step with a selector; the header counts steps, rollouts and labels; --step and --limit choose."""
    verified = VerifyResult(sentences=[Sentence(text="Paris is in France.", start=0, end=19, statements=[
        Statement(text="Paris is in France", start=0, end=18, label="Correct", informativeness=4)])])
    sample = _rollout(tok, "Paris is in France.")
    path = _write(tmp_path / "samples.jsonl", [_record(s, ITEM, sample, verified, settings) for s in (1, 1, 2, 5)])
    page = render_page(read_samples(path), str(path))
    assert [int(x) for x in re.findall(r'<section class="step" id="step-(\d+)"', page)] == [1, 2, 5]
    assert re.findall(r'<option value="(\d+)">', page) == ["1", "2", "5"]
    assert "<b>steps</b> 3 (1–5)" in page and "<b>rollouts</b> 4" in page
    assert re.search(r'>Correct</span> 4', page)

    out = tmp_path / "one.html"
    assert rlfh(["show", str(path), "--step", "1", "--out", str(out)]) == 0
    one = out.read_text()
    assert re.findall(r'id="step-(\d+)"', one) == ["1"] and one.count('<article class="rollout">') == 2
    assert rlfh(["show", str(path), "--limit", "1", "--out", str(out)]) == 0
    last = out.read_text()
    assert re.findall(r'id="step-(\d+)"', last) == ["5"] and "<b>rollouts</b> 1 of 4" in last


def test_records_written_before_per_token_logging_still_render(tmp_path):
    """A samples.jsonl of an older run (the eight first keys only): the response as text, a note for the rest."""
    old = {"step": 2, "question": "Q?", "mode": "closed", "gold": "A", "response": "It is <A>.", "score": -0.5,
           "abstained": False, "labels": {"Wrong": 1}}
    page, shown, total = build(_write(tmp_path / "samples.jsonl", [old]))
    text = page.read_text()
    assert page == tmp_path / "samples.html" and (shown, total) == (1, 1)
    assert "It is &lt;A&gt;." in text and "No statements in this record" in text
    assert re.search(r'>Wrong</span> 1', text)


@pytest.mark.parametrize("content, expect", [
    (None, "no such file"),
    ("", "empty, no samples to show"),
    ('{"step": 1, "question": "q", "response": "r"}\n{"step": 2, "question": \n', "line 2: not JSON"),
    ('{"step": 1, "question": "q"}\n', "line 1: no 'response' field"),
    ('[1, 2]\n', "line 1: a JSON list, not an object"),
    ('{"step": "one", "question": "q", "response": "r"}\n', "line 1: 'step' must be an integer"),
    ('{"step": 1, "question": "q", "response": "ab", "token_offsets": [[0, 1], [1, 2]], "token_rewards": [0.5]}\n',
     "line 1: 1 token_rewards for 2 token_offsets"),
    ('{"step": 1, "question": "q", "response": "ab", "token_offsets": [[0, 9]], "token_rewards": [0.5]}\n',
     "line 1: token_offsets[0] = [0, 9] is not a span of the 2-character response"),
])
def test_bad_input_names_the_file_and_line(tmp_path, capsys, content, expect):
    path = tmp_path / "samples.jsonl"
    if content is not None:
        path.write_text(content)
    assert rlfh(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfh show: ") and str(path) in err and expect in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "samples.html").exists()


def test_a_folder_without_samples_and_an_unknown_step_are_explained(tmp_path, capsys):
    assert rlfh(["show", str(tmp_path)]) == 2
    assert "has no samples.jsonl" in capsys.readouterr().err
    rec = {"question": "q", "response": "r"}
    path = _write(tmp_path / "samples.jsonl", [dict(rec, step=s) for s in (1, 2, 3, 7)])
    assert rlfh(["show", str(path), "--step", "4"]) == 2
    assert "no samples of step 4; it has steps 1-3, 7" in capsys.readouterr().err


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        rlfh(["show", "--help"])
    out = capsys.readouterr().out
    for opt in ("RUN", "--out FILE", "--step N", "--limit N"):
        assert opt in out
    assert "samples.html" in out and "Default 200" in out


def test_sample_record_without_verification_logs_no_statements():
    """A reward function that returns no verification (a caller's own): the record says so by leaving
    ``statements`` out, and keeps the tokens and rewards."""
    sample = SimpleNamespace(response_text="Hi.", token_offsets=[(0, 2), (2, 3), (3, 3)], finish_reason="length")
    result = SimpleNamespace(score=0.25, abstained=False, label_counts={"Correct": 1}, token_rewards=[0, 0.25, 0],
                             verification=None)
    rec = sample_record(4, ITEM, "closed", sample, result)
    assert "statements" not in rec and rec["token_rewards"] == [0.0, 0.25, 0.0]
    assert rec["token_offsets"] == [[0, 2], [2, 3], [3, 3]] and rec["materials"] == [PASSAGE]


@pytest.mark.slow
def test_a_run_logs_the_statements_the_reward_service_gave(tmp_path, serve_ray, tok):
    """The path of a training run, on the reward service over HTTP (Ray Serve): the trainer's reward function asks
    for the verification when the run logs samples (LOG_SAMPLES > 0; not otherwise, where nothing reads it), and
    the record it writes keeps the statements, so the page shows them."""
    from cluster.experience import ServiceReward, reward_items
    sample = _rollout(tok, RESPONSE)
    cfg = RLFHConfig.load(environ={}, log_samples=2)
    with serve_ray.app(cfg) as url:
        logging_fn, quiet_fn = ServiceReward(url, cfg), ServiceReward(url, cfg.model_copy(update={"log_samples": 0}))
        try:
            [logged] = logging_fn(reward_items([sample], [ITEM]))
            [quiet] = quiet_fn(reward_items([sample], [ITEM]))
        finally:
            logging_fn.close()
            quiet_fn.close()
    assert quiet.verification is None and quiet.token_rewards == logged.token_rewards
    statements = [st for s in logged.verification.sentences for st in s.statements]
    assert statements and logged.num_statements == len(statements)
    rec = sample_record(1, ITEM, "evidence", sample, logged)
    assert [st["label"] for st in rec["statements"]] == [st.label for st in statements]
    assert len(rec["token_rewards"]) == len(sample.response_token_ids)
    page = render_page(read_samples(_write(tmp_path / "samples.jsonl", [rec])), "x")
    for st in statements:
        assert html.escape(st.text) in page and f"p {st.confidence:.2f}" in page
