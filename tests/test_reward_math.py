"""Pure reward math (reward_service.token_rewards): hand-computed cases, alignment edge cases, validation."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from core.config import RLFHConfig
from core.verify_schema import Sentence, Statement, VerifyResult
from reward_service.token_rewards import (RewardInputError, RewardSettings, align_spans, compute_token_rewards,
                                          offsets_from_tokenizer, validate_offsets)

TEXT = "Paris is in France. It is big."
#        0    5  8  11     19 20 23 26  30


def word_offsets(text: str, eos: bool = True) -> list[tuple[int, int]]:
    offs = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    if eos:
        offs.append((len(text), len(text)))
    return offs


OFFS = word_offsets(TEXT)   # Paris is in France. | It is big. | EOS  -> 8 tokens
assert OFFS == [(0, 5), (6, 8), (9, 11), (12, 19), (20, 22), (23, 25), (26, 30), (30, 30)]


def st(text, start, end, label, info=3, aligned=True, confidence=1.0):
    # confidence 1: the full paper reward whatever TRUTH_CONFIDENCE is (the hand-computed values below)
    return Statement(text=text, start=start, end=end, label=label, informativeness=info, aligned=aligned,
                     confidence=confidence)


def two_sentences(label1="Correct", label2="Wrong", info1=5, info2=3, span1=(0, 18)):
    return VerifyResult(sentences=[
        Sentence(text="Paris is in France.", start=0, end=19,
                 statements=[st("Paris is in France", span1[0], span1[1], label1, info1)]),
        Sentence(text="It is big.", start=20, end=30, statements=[st("It is big", 20, 29, label2, info2)]),
    ])


# The hand-computed cases below use these label values (Wrong -1, as the default map had before it moved to -2):
# the arithmetic is what they check, not the defaults.
HAND_MAP = '{"Wrong": -1, "Hedged wrong": -0.5}'


@pytest.fixture
def base() -> RewardSettings:
    return RewardSettings.from_config(RLFHConfig.load(environ={"VERIFICATION_MAP": HAND_MAP}))


def test_reward_settings_defaults_are_the_configs():
    """RewardSettings defines each reward setting once; RewardOverrides and RLFHConfig's reward fields are derived
    from it: the same names (REWARD_FIELDS), defaults, descriptions and constraints."""
    from core.config import REWARD_FIELDS, doc_of
    from reward_service.schemas import RewardOverrides
    assert list(RewardSettings.model_fields) == list(REWARD_FIELDS) == list(RewardOverrides.model_fields)
    plain, cfg = RewardSettings(), RLFHConfig.load(environ={})
    for name in REWARD_FIELDS:
        value = getattr(plain, name)
        assert (dict(value) if name.endswith("_map") else value) == getattr(cfg, name), name
        spec, conf, wire = (m.model_fields[name] for m in (RewardSettings, RLFHConfig, RewardOverrides))
        assert spec.description == wire.description and spec.description, name
        # the config's help is the description, or a short help with the description as its reference (CONFIG.md)
        assert conf.description == spec.description or (conf.description and doc_of(name) == spec.description), name
        assert spec.metadata == conf.metadata, name       # e.g. TRUTH_CONFIDENCE in [0, 1], REWARD_CLIP > 0
        assert wire.default is None, name
    schema = RewardOverrides.model_json_schema()["properties"]
    # the wire schema documents each setting's constraint (the schemathesis test relies on it)
    assert schema["truth_confidence"]["anyOf"][0] == {"type": "number", "minimum": 0, "maximum": 1}
    assert schema["reward_clip"]["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0, "minimum": -1e6,
                                                 "maximum": 1e6}


def test_from_config_carries_every_reward_setting():
    from core.config import REWARD_FIELDS
    changed = RLFHConfig.load(environ={}, granularity="sentence", placement="spread", verification_map={"Wrong": -3},
                              informative_map={"5": 1.5}, info_weight=0.25, truth_weight=2.0, reward_epsilon=-0.5,
                              reward_mu=1.5, reward_clip=3.0, abstain_token_reward=0.1, empty_reward=-0.4,
                              truth_confidence=0.6, reward_formula="paper")
    s, plain = RewardSettings.from_config(changed), RewardSettings()
    for name in REWARD_FIELDS:
        value = getattr(s, name)
        assert value != getattr(plain, name), name     # every field changed, so a dropped one shows
        assert (dict(value) if name.endswith("_map") else value) == getattr(changed, name), name


# ------------------------------------------------------------------------------ hand-computed rewards

# The RLFH authors' example launch settings, as their script writes them (single quotes), with the paper's formula.
AUTHORS_ENV = {"VERIFICATION_MAP": "{'Correct':0.45,'Hedged correct':0.35,'Vague':-1,'Hedged wrong':-1.5,'Wrong':-1.7}",
               "INFORMATIVE_MAP": "{'5':1.25,'4':1,'3':0.75,'2':0.1,'1':-0.2}", "INFO_WEIGHT": "1.2",
               "REWARD_FORMULA": "paper", "REWARD_EPSILON": "-0.9", "REWARD_MU": "1", "TRUTH_CONFIDENCE": "0"}


@pytest.mark.parametrize("label,info,expected", [
    # r = V[label] * |I[info]| + 1.2 * ln(max(-0.9, I[info]) + 1), one statement per sentence
    ("Correct", 5, 0.45 * 1.25 + 1.2 * math.log(2.25)),      # an answer: 0.5625 + 0.9731 = 1.5356
    ("Correct", 4, 0.45 * 1.0 + 1.2 * math.log(2.0)),        # a fact crucial to it: 0.45 + 0.8318 = 1.2818
    ("Correct", 2, 0.45 * 0.1 + 1.2 * math.log(1.1)),        # a true statement off the question: 0.1594
    ("Vague", 1, -1.0 * 0.2 + 1.2 * math.log(0.8)),          # a restatement: -0.2 - 0.2678 = -0.4678
    ("Wrong", 5, -1.7 * 1.25 + 1.2 * math.log(2.25)),        # a wrong answer: -2.125 + 0.9731 = -1.1519
])
def test_paper_formula_with_the_authors_maps_by_hand(label, info, expected):
    s = RewardSettings.from_config(RLFHConfig.load(environ=AUTHORS_ENV))
    assert s.verification_map["Wrong"] == -1.7 and s.informative_map["2"] == 0.1
    first = two_sentences(label1="Correct", info1=3, label2="Correct", info2=3)   # a second sentence: checkable
    res = two_sentences(label1=label, info1=info, label2="Correct", info2=3)
    r, r3 = (compute_token_rewards(x, OFFS, len(TEXT), s) for x in (res, first))
    # token 3 ends sentence 1 (statement and sentence rewards both land there); sentence 2 is the same in both
    assert r.token_rewards[3] == pytest.approx(expected, abs=1e-12)
    assert r.token_rewards[6] == pytest.approx(r3.token_rewards[6]) == pytest.approx(0.45 * 0.75 + 1.2 * math.log(1.75))


def test_paper_formula_sentence_of_several_statements_by_hand():
    # one sentence, an answer (Correct, 5) then an off-topic true statement (Correct, 2): each statement's truth
    # on its last token, the sentence's informativeness log(max(-0.9, 1.25 + 0.1) + 1) on the sentence's last
    s = RewardSettings.from_config(RLFHConfig.load(environ=AUTHORS_ENV))
    res = VerifyResult(sentences=[
        Sentence(text="Paris is in France.", start=0, end=19,
                 statements=[st("Paris is", 0, 8, "Correct", 5), st("in France", 9, 18, "Correct", 2)]),
        Sentence(text="It is big.", start=20, end=30, statements=[st("It is big", 20, 29, "Wrong", 1)])])
    r = compute_token_rewards(res, OFFS, len(TEXT), s)
    expected = [0, 0.45 * 1.25, 0, 0.45 * 0.1 + 1.2 * math.log(2.35), 0, 0, -1.7 * 0.2 + 1.2 * math.log(0.8), 0]
    np.testing.assert_allclose(r.token_rewards, expected, atol=1e-12)
    # the additive formula pays the off-topic statement like the answer: 0.45 each
    add = compute_token_rewards(res, OFFS, len(TEXT), s.with_overrides({"reward_formula": "additive"}))
    assert add.token_rewards[1] == pytest.approx(0.45) and add.token_rewards[3] - r.token_rewards[3] == \
        pytest.approx(0.45 - 0.045)

def test_token_end_hand_computed(base):
    # defaults: V[Correct]=1, V[Wrong]=-1, I["5"]=0.4, I["3"]=0, w_info=0.5, eps=0, mu=1
    r = compute_token_rewards(two_sentences(), OFFS, len(TEXT), base)
    info1 = 0.5 * math.log(max(0.0, 0.4) + 1.0)
    info2 = 0.5 * math.log(max(0.0, 0.0) + 1.0)       # = 0
    expected = [0, 0, 0, 1.0 + info1, 0, 0, -1.0 + info2, 0]
    np.testing.assert_allclose(r.token_rewards, expected, atol=1e-12)
    assert r.score == pytest.approx(sum(expected))
    assert r.token_label_signs == [1, 1, 1, 1, -1, -1, -1, 0]
    assert r.label_counts["Correct"] == 1 and r.label_counts["Wrong"] == 1
    assert r.num_statements == 2 and r.num_unaligned == 0 and not r.is_correct and not r.abstained
    assert r.truth_reward == pytest.approx(0.0) and r.info_reward == pytest.approx(info1 + info2)


def test_token_spread_hand_computed(base):
    s = base.with_overrides({"placement": "spread"})
    r = compute_token_rewards(two_sentences(), OFFS, len(TEXT), s)
    info1 = 0.5 * math.log(1.4)
    # statement 1 [0,18) covers tokens 0..3, sentence 1 [0,19) covers 0..3; statement 2 [20,29) covers 4..6
    expected = [(1.0 + info1) / 4] * 4 + [-1.0 / 3] * 3 + [0.0]
    np.testing.assert_allclose(r.token_rewards, expected, atol=1e-12)
    assert r.token_rewards[-1] == 0.0            # exact zero outside every span


def test_statement_vs_sentence_granularity(base):
    # statement "Paris is" ends on token 1, its sentence on token 3
    res = two_sentences(span1=(0, 8))
    tok = compute_token_rewards(res, OFFS, len(TEXT), base)
    sen = compute_token_rewards(res, OFFS, len(TEXT), base.with_overrides({"granularity": "sentence"}))
    info1 = 0.5 * math.log(1.4)
    np.testing.assert_allclose(tok.token_rewards, [0, 1.0, 0, info1, 0, 0, -1.0, 0], atol=1e-12)
    np.testing.assert_allclose(sen.token_rewards, [0, 0, 0, 1.0 + info1, 0, 0, -1.0, 0], atol=1e-12)
    assert tok.score == pytest.approx(sen.score)
    # FSPO signs follow the statement's own span, whatever the granularity
    assert tok.token_label_signs[:4] == [1, 1, 0, 0]
    assert sen.token_label_signs == tok.token_label_signs


def test_response_granularity(base):
    info1 = 0.5 * math.log(1.4)
    end = compute_token_rewards(two_sentences(), OFFS, len(TEXT), base.with_overrides({"granularity": "response"}))
    np.testing.assert_allclose(end.token_rewards, [0] * 7 + [info1], atol=1e-12)   # 1 - 1 + info1 on EOS
    spread = compute_token_rewards(two_sentences(), OFFS, len(TEXT),
                                   base.with_overrides({"granularity": "response", "placement": "spread"}))
    np.testing.assert_allclose(spread.token_rewards, [info1 / 8] * 8, atol=1e-12)


def test_paper_formula_with_paper_settings(base):
    # RLFH's run-script settings: eps=-0.9, mu=1, I = {5: 1.3, ..., 1: -0.1}
    paper = base.with_overrides({
        "verification_map": {"Correct": 0.3, "Hedged correct": 0.1, "Vague": -0.8, "Hedged wrong": -0.9,
                             "Wrong": -1.2},
        "informative_map": {"5": 1.3, "4": 1.2, "3": 1.1, "2": 1.0, "1": -0.1},
        "info_weight": 1.0, "reward_epsilon": -0.9, "reward_mu": 1.0})
    res = VerifyResult(sentences=[
        Sentence(text="Paris is in France.", start=0, end=19, statements=[
            st("Paris is", 0, 8, "Correct", 5), st("in France", 9, 18, "Hedged wrong", 1)]),
        Sentence(text="It is big.", start=20, end=30, statements=[st("It is big", 20, 29, "Vague", 1)]),
    ])
    r = compute_token_rewards(res, OFFS, len(TEXT), paper)
    s1 = math.log(max(-0.9, 1.3 - 0.1) + 1.0)      # sentence 1: log(2.2)
    s2 = math.log(max(-0.9, -0.1) + 1.0)           # sentence 2: log(0.9) < 0
    np.testing.assert_allclose(r.token_rewards, [0, 0.3, 0, -0.9 + s1, 0, 0, -0.8 + s2, 0], atol=1e-12)
    # the epsilon floor: a sentence of score-1 statements cannot cost more than log(eps + mu)
    many_bad = VerifyResult(sentences=[Sentence(text=TEXT, start=0, end=30, statements=[
        st("x", 0, 5, "Vague", 1) for _ in range(30)])])
    r2 = compute_token_rewards(many_bad, OFFS, len(TEXT), paper.with_overrides({"verification_map": {"Vague": 0}}))
    assert r2.info_reward == pytest.approx(math.log(-0.9 + 1.0))


def test_clip(base):
    s = base.with_overrides({"truth_weight": 10.0, "reward_clip": 2.5})
    r = compute_token_rewards(two_sentences(), OFFS, len(TEXT), s)
    assert r.token_rewards[3] == 2.5 and r.token_rewards[6] == -2.5
    assert r.num_clipped == 2 and r.score == pytest.approx(0.0)
    assert np.abs(np.asarray(r.token_rewards)).max() <= 2.5


def test_reward_clip_is_applied_in_one_place():
    """REWARD_CLIP is applied where the reward is made (compute_token_rewards, above) and nowhere else: no other
    module of the project reads a ``.reward_clip`` (the trainer used to clip the service's rewards twice more)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    readers = set()
    for pkg in ("actors", "cluster", "reward_service", "verifier_service", "evaluation", "integrations",
                "baselines", "bench"):
        for path in (root / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, ast.Attribute) and n.attr == "reward_clip" for n in ast.walk(tree)):
                readers.add(path.relative_to(root).as_posix())
    assert readers == {"reward_service/token_rewards.py"}


def test_abstain_and_empty(base):
    s = base.with_overrides({"abstain_token_reward": 0.7, "empty_reward": -0.3})
    text = "I don't know."
    offs = word_offsets(text)
    abst = compute_token_rewards(VerifyResult(sentences=[Sentence(text=text, start=0, end=13)], abstained=True),
                                 offs, len(text), s)
    assert abst.token_rewards == [0, 0, 0, 0.7] and abst.abstained and not abst.is_correct
    assert abst.score == pytest.approx(0.7) and abst.token_label_signs == [0, 0, 0, 0]
    empty = compute_token_rewards(VerifyResult(sentences=[Sentence(text=text, start=0, end=13)]), offs, len(text), s)
    assert empty.token_rewards == [0, 0, 0, -0.3] and empty.num_statements == 0
    # only Vague statements ("Sure, the answer is") is no checkable claim either: the Vague penalty AND the
    # empty reward, so content-free filler never beats abstaining (RL found that loophole in 5 steps)
    vague_text = "Sure, the answer is"
    vo = word_offsets(vague_text)
    vague = VerifyResult(sentences=[Sentence(text=vague_text, start=0, end=len(vague_text), statements=[
        st(vague_text, 0, len(vague_text), "Vague")])])
    vr = compute_token_rewards(vague, vo, len(vague_text), s)
    v_label = s.truth_weight * s.verification_map["Vague"]
    assert vr.token_rewards[-1] == pytest.approx(-0.3) and vr.score == pytest.approx(v_label - 0.3)
    # one checkable statement beside a Vague one: no empty reward
    both_text = "Sure. Paris is in France."
    both = VerifyResult(sentences=[
        Sentence(text="Sure.", start=0, end=5, statements=[st("Sure.", 0, 5, "Vague")]),
        Sentence(text="Paris is in France.", start=6, end=25, statements=[st("Paris is in France.", 6, 25, "Correct")])])
    br = compute_token_rewards(both, word_offsets(both_text), len(both_text), s)
    assert br.score == pytest.approx(v_label + s.truth_weight * s.verification_map["Correct"])
    # the last token is the last token, even without an EOS
    offs2 = word_offsets(text, eos=False)
    e2 = compute_token_rewards(VerifyResult(), offs2, len(text), s)
    assert e2.token_rewards == [0, 0, -0.3]


def test_is_correct_and_hedged(base):
    good = two_sentences("Correct", "Hedged correct")
    r = compute_token_rewards(good, OFFS, len(TEXT), base)
    assert r.is_correct and r.token_label_signs == [1, 1, 1, 1, 1, 1, 1, 0]
    assert r.token_rewards[6] == pytest.approx(0.5)      # V[Hedged correct] + 0.5*log(1+0)
    vague = compute_token_rewards(two_sentences("Correct", "Vague"), OFFS, len(TEXT), base)
    assert not vague.is_correct and vague.token_label_signs[4:7] == [0, 0, 0]
    hw = compute_token_rewards(two_sentences("Correct", "Hedged wrong"), OFFS, len(TEXT), base)
    assert hw.token_label_signs[4:7] == [-1, -1, -1]


def test_overlapping_statements_negative_sign_wins(base):
    res = VerifyResult(sentences=[Sentence(text="Paris is in France.", start=0, end=19, statements=[
        st("Paris is in France", 0, 18, "Correct"), st("in France", 9, 18, "Wrong")])])
    r = compute_token_rewards(res, OFFS, len(TEXT), base)
    assert r.token_label_signs[:4] == [1, 1, -1, -1]
    assert r.token_rewards[3] == pytest.approx(1.0 - 1.0)   # both end on token 3


# ------------------------------------------------------------------------------ fallback, counted

def test_unalignable_statement_falls_back_to_sentence_and_is_counted(base):
    # span [100, 110) is past the text; "It is big" keeps its span
    res = VerifyResult(sentences=[
        Sentence(text="Paris is in France.", start=0, end=19, statements=[st("Paris rewritten", 100, 110, "Wrong")]),
        Sentence(text="It is big.", start=20, end=30, statements=[st("It is big", 20, 29, "Correct")]),
    ])
    r = compute_token_rewards(res, OFFS, len(TEXT), base)
    assert r.num_unaligned == 1
    assert r.token_rewards[3] == pytest.approx(-1.0)          # sentence 1's last token, not dropped
    assert r.token_label_signs[:4] == [-1, -1, -1, -1]
    assert r.score == pytest.approx(0.0)


def test_span_in_untokenized_gap_falls_back(base):
    # tokens skip the whitespace at 19..20; a statement spanning only that gap overlaps nothing
    res = VerifyResult(sentences=[Sentence(text=TEXT, start=0, end=30,
                                           statements=[st(" ", 19, 20, "Correct")])])
    r = compute_token_rewards(res, OFFS, len(TEXT), base)
    assert r.num_unaligned == 1 and r.token_rewards[6] == pytest.approx(1.0)   # sentence [0,30) ends on token 6


def test_verifier_unaligned_flag_counted(base):
    res = VerifyResult(sentences=[Sentence(text="Paris is in France.", start=0, end=19, statements=[
        st("Paris lies in France", 0, 19, "Correct", aligned=False)])])
    r = compute_token_rewards(res, OFFS, len(TEXT), base)
    assert r.num_unaligned == 1 and r.token_rewards[3] == pytest.approx(1.0)


def test_sentence_without_tokens_goes_to_last_token(base):
    text = "Paris is in France. It is big."
    offs = [(0, 5), (6, 8), (30, 30)]                   # a truncated tokenization
    res = two_sentences()
    r = compute_token_rewards(res, offs, len(text), base)
    assert r.num_unaligned == 1                         # "It is big" and its sentence overlap no token
    assert r.token_rewards[2] == pytest.approx(-1.0)    # on the last token, not dropped
    assert r.token_rewards[1] == pytest.approx(1.0 + 0.5 * math.log(1.4))


# ------------------------------------------------------------------------------ the linear sweep

def _brute_force(offsets, spans):
    first, last = [], []
    for a, b in spans:
        hit = [i for i, (s, e) in enumerate(offsets) if e > s and s < b and e > a and b > a]
        first.append(hit[0] if hit else -1)
        last.append(hit[-1] if hit else -1)
    return first, last


def _random_tokenization(rng, n_chars):
    """Monotonic offsets with gaps, zero-width tokens and byte-split tokens sharing one character."""
    offs, pos = [], 0
    while pos < n_chars:
        kind = rng.random()
        if kind < 0.1:
            offs.append((pos, pos))                     # zero-width
        elif kind < 0.2:
            pos += int(rng.integers(1, 3))              # gap (untokenized characters)
            continue
        elif kind < 0.3:
            end = min(pos + 1, n_chars)
            offs += [(pos, end)] * int(rng.integers(2, 4))   # one character split into several tokens
            pos = end
            continue
        else:
            end = min(pos + int(rng.integers(1, 7)), n_chars)
            offs.append((pos, end))
            pos = end
    offs.append((n_chars, n_chars))
    return offs


@pytest.mark.parametrize("seed", range(20))
def test_align_spans_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_chars = int(rng.integers(1, 200))
    offs = _random_tokenization(rng, n_chars)
    validate_offsets(offs, n_chars)
    spans = [(int(a), int(a + rng.integers(-2, 30))) for a in rng.integers(-3, n_chars + 5, size=40)]
    spans += [(0, n_chars), (n_chars, n_chars), (0, 0), (n_chars - 1, n_chars)]
    first, last = align_spans(np.array(offs), np.array([a for a, _ in spans]), np.array([b for _, b in spans]),
                              n_chars)
    bf, bl = _brute_force(offs, spans)
    assert first.tolist() == bf
    assert last.tolist() == bl


def test_align_edge_cases():
    # no tokens, only zero-width tokens, no spans
    f, l_ = align_spans(np.zeros((0, 2), dtype=int), np.array([0]), np.array([3]))
    assert f.tolist() == [-1] and l_.tolist() == [-1]
    f, l_ = align_spans(np.array([[0, 0], [3, 3]]), np.array([0]), np.array([3]))
    assert f.tolist() == [-1]
    f, l_ = align_spans(np.array([[0, 3]]), np.array([], dtype=int), np.array([], dtype=int))
    assert f.size == 0
    # a span touching a token boundary does not overlap the neighbour
    f, l_ = align_spans(np.array([[0, 3], [3, 6]]), np.array([3, 0]), np.array([6, 3]))
    assert f.tolist() == [1, 0] and l_.tolist() == [1, 0]


def test_alignment_scales_to_long_responses(base):
    # 20,000 characters / ~5,000 tokens / 200 statements: every statement's reward lands on the token the brute
    # force finds, and align_spans equals the brute force on a random sample of 300 spans over the whole text
    words = " ".join(f"w{i % 97}" for i in range(5000))
    text = (words + ".")[:20000]
    offs = word_offsets(text)
    sents, pos = [], 0
    while pos < len(text):
        end = min(pos + 100, len(text))
        sents.append(Sentence(text=text[pos:end], start=pos, end=end,
                              statements=[st("s", pos, min(pos + 40, end), "Correct")]))
        pos = end
    r = compute_token_rewards(VerifyResult(sentences=sents), offs, len(text), base)
    assert len(r.token_rewards) == len(offs) and r.num_statements == len(sents) and r.num_unaligned == 0
    assert r.score == pytest.approx(sum(np.clip(r.token_rewards, -5, 5)))
    assert r.token_label_signs.count(1) > 0
    # Correct (1.0) with informativeness 3 (log(0 + 1) = 0): 1.0 on each statement's last token, 0 elsewhere
    _, last = _brute_force(offs, [(s.statements[0].start, s.statements[0].end) for s in sents])
    assert -1 not in last
    assert np.flatnonzero(r.token_rewards).tolist() == last
    assert [r.token_rewards[i] for i in last] == pytest.approx([1.0] * len(last))
    rng = np.random.default_rng(0)
    starts = rng.integers(-5, len(text) + 5, size=300)
    spans = [(int(a), int(a + rng.integers(-3, 400))) for a in starts]
    first, last = align_spans(np.array(offs), np.array([a for a, _ in spans]), np.array([b for _, b in spans]),
                              len(text))
    bf, bl = _brute_force(offs, spans)
    assert first.tolist() == bf and last.tolist() == bl


# ------------------------------------------------------------------------------ validation

@pytest.mark.parametrize("offsets, field, needle", [
    ([], "token_offsets", "empty"),
    ([[0, 5], [5, 40]], "token_offsets.1", "past the end"),
    ([[3, 2]], "token_offsets.0", "start 3 > end 2"),
    ([[-1, 2]], "token_offsets.0", "negative"),
    ([[0, 5], [6, 8], [0, 0]], "token_offsets.2", "not monotonic"),
    ([[5, 8], [0, 4]], "token_offsets.1", "not monotonic"),
    ([[0, 1, 2]], "token_offsets", "shape"),
    ([["a", "b"]], "token_offsets", "integer"),
])
def test_validate_offsets_errors(offsets, field, needle):
    with pytest.raises(RewardInputError) as ei:
        validate_offsets(offsets, len(TEXT))
    assert ei.value.field == field and needle in ei.value.message and ei.value.fix


def test_truth_confidence_orders_equal_labels_and_zero_is_the_old_reward(base):
    """TRUTH_CONFIDENCE: two statements with the same label and informativeness get truth rewards ordered by the
    verifier's confidence (a weight in [1 - c, 1], never flipping the label's sign); 0 gives the old rewards."""
    def result(label, confidences):
        return VerifyResult(sentences=[
            Sentence(text="Paris is in France.", start=0, end=19,
                     statements=[st("Paris is in France", 0, 18, label, 3, confidence=confidences[0])]),
            Sentence(text="It is big.", start=20, end=30,
                     statements=[st("It is big", 20, 29, label, 3, confidence=confidences[1])])])

    s = base.with_overrides({"truth_confidence": 0.5, "info_weight": 0.0})
    for label in ("Correct", "Hedged correct", "Hedged wrong", "Wrong"):
        v = s.truth_weight * s.verification_map[label]
        r = compute_token_rewards(result(label, (0.9, 0.3)), OFFS, len(TEXT), s).token_rewards
        hi, lo = r[3], r[6]                       # the statements' last tokens: "France." and "big."
        assert hi == pytest.approx(v * (0.5 + 0.5 * 0.9)) and lo == pytest.approx(v * (0.5 + 0.5 * 0.3)), label
        assert (abs(hi) > abs(lo) > 0) and np.sign(hi) == np.sign(lo) == np.sign(v), label
        assert (hi > lo) if v > 0 else (hi < lo), label  # surer right: more reward; surer wrong: more penalty

    off = base.with_overrides({"truth_confidence": 0.0})
    for confs in ((0.9, 0.3), (0.0, 1.0), (0.5, 0.5)):
        got = compute_token_rewards(two_sentences(), OFFS, len(TEXT), off)
        old = compute_token_rewards(VerifyResult(sentences=[
            Sentence(text=snt.text, start=snt.start, end=snt.end,
                     statements=[st(x.text, x.start, x.end, x.label, x.informativeness, confidence=c)
                                 for x in snt.statements])
            for snt, c in zip(two_sentences().sentences, confs)]), OFFS, len(TEXT), off)
        assert got.token_rewards == old.token_rewards and got.score == old.score
    # the hand-computed paper value (test_token_end_hand_computed): V[Correct] * 1 on "France."
    assert compute_token_rewards(result("Correct", (0.2, 0.2)), OFFS, len(TEXT),
                                 off.with_overrides({"info_weight": 0.0})).token_rewards[3] == pytest.approx(
        off.truth_weight * off.verification_map["Correct"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1.5, -0.1])
def test_truth_confidence_bad_values_are_rejected(base, value):
    from core.config import ConfigError
    with pytest.raises(RewardInputError) as ei:
        base.with_overrides({"truth_confidence": value})
    assert ei.value.field == "overrides.truth_confidence", str(ei.value)
    with pytest.raises(RewardInputError, match="truth_confidence"):
        RewardSettings(truth_confidence=value)
    with pytest.raises(ConfigError, match="TRUTH_CONFIDENCE"):
        RLFHConfig.load(environ={"TRUTH_CONFIDENCE": str(value)})
    if not math.isnan(value) and not math.isinf(value):
        with pytest.raises(RewardInputError, match="TRUTH_CONFIDENCE"):
            RewardSettings(truth_confidence=value)


@pytest.mark.parametrize("overrides, field", [
    ({"verification_map": {"Mostly right": 1.0}}, "overrides.verification_map.Mostly right"),
    ({"informative_map": {"7": 1.0}}, "overrides.informative_map.7"),
    ({"info_weight": float("nan")}, "overrides.info_weight"),
    ({"truth_weight": float("inf")}, "overrides.truth_weight"),
    ({"verification_map": {"Correct": float("nan")}}, "overrides.verification_map.Correct"),
    ({"granularity": "paragraph"}, "overrides.granularity"),
    ({"placement": "middle"}, "overrides.placement"),
    ({"reward_epsilon": -1.0, "reward_mu": 1.0}, "overrides.reward_mu"),
    ({"reward_clip": 0.0}, "overrides.reward_clip"),
    ({"kl_coef": 0.1}, "overrides.kl_coef"),
    ({"info_weight": "high"}, "overrides.info_weight"),
])
def test_override_errors_name_the_field(base, overrides, field):
    with pytest.raises(RewardInputError) as ei:
        base.with_overrides(overrides)
    assert ei.value.field == field, str(ei.value)
    assert ei.value.fix


def test_partial_map_override_merges(base):
    s = base.with_overrides({"verification_map": {"Wrong": -3.0}, "informative_map": {5: 1.0}})
    assert s.verification_map["Wrong"] == -3.0 and s.verification_map["Correct"] == base.verification_map["Correct"]
    assert s.informative_map["5"] == 1.0 and s.informative_map["1"] == base.informative_map["1"]
    assert base.verification_map["Wrong"] == -1.0          # the service's settings are untouched


def test_real_tokenizer_offsets(base, embedded_model_path):
    from core.model_loader import load_tokenizer
    tok = load_tokenizer(embedded_model_path)
    text = "Paris is in France. It is big, maybe 2,000 km² — café!"
    offs = offsets_from_tokenizer(tok, text)
    validate_offsets(offs, len(text))                       # HF offsets are monotonic and in range
    res = VerifyResult(sentences=[
        Sentence(text="Paris is in France.", start=0, end=19, statements=[st("Paris is in France", 0, 18, "Correct")]),
        Sentence(text=text[20:], start=20, end=len(text), statements=[st("It is big", 20, 29, "Hedged wrong")]),
    ])
    r = compute_token_rewards(res, offs, len(text), base)
    # the Correct reward lands on the token containing the 'e' of "France" (char 17)
    i = int(np.flatnonzero((offs[:, 0] <= 17) & (offs[:, 1] > 17))[-1])
    assert r.token_rewards[i] == pytest.approx(1.0)
    assert r.num_unaligned == 0 and r.token_label_signs[i] == 1


def test_the_reward_math_returns_the_wire_record_valid_as_built():
    """One record of a reward: compute_token_rewards builds the /v1/rewards item (ItemReward) itself, without
    validation (model_construct, for speed); validating it again must give the same record, types included."""
    from reward_service.schemas import ItemReward
    r = compute_token_rewards(two_sentences(), OFFS, len(TEXT), RewardSettings())
    assert type(r) is ItemReward
    again = ItemReward.model_validate(r.model_dump())
    assert again == r and again.model_dump_json() == r.model_dump_json()
    assert r.num_tokens == len(r.token_rewards) == len(OFFS) and r.score == pytest.approx(sum(r.token_rewards))
    assert all(type(x) is float for x in r.token_rewards) and all(type(x) is int for x in r.token_label_signs)
    assert r.cached is False and r.verification is None
