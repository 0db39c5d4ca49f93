"""Offline loaders: HaluEval-QA from its wheel, any JSONL, deterministic splits, clear errors."""
import json

import pytest

from cluster.data import DataError, load_halueval, load_items, read_jsonl, split_of


def test_halueval_loads_and_splits_deterministically():
    items = load_halueval("all")
    assert len(items) == 10_000
    test = load_halueval("test")
    train = load_halueval("train")
    assert len(test) >= 1_000
    test_q = {it.question for it in test}
    assert not test_q & {it.question for it in train}, "test questions leak into train"
    # deterministic: split depends on the question only
    assert all(split_of(it.question) == "test" for it in test[:50])
    assert len(load_halueval("test")) == len(test)
    it = items[0]
    assert it.question and it.right_answer and it.hallucinated_answer and len(it.knowledge) >= 2


def test_split_ignores_case_and_spacing():
    assert split_of("Who wrote  Hamlet?") == split_of("who wrote hamlet?")


def test_any_jsonl_with_string_or_list_knowledge(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"question": "Q1?", "knowledge": "A. B."}) + "\n\n" +
                 json.dumps({"question": "Q2?", "knowledge": ["p1", "p2"], "right_answer": "x"}) + "\n")
    items = read_jsonl(f)
    assert [i.question for i in items] == ["Q1?", "Q2?"]
    assert items[1].knowledge == ["p1", "p2"] and items[1].right_answer == "x"
    assert load_items(str(f), limit=1)[0].question == "Q1?"


@pytest.mark.parametrize("line,needle", [
    ("{not json", ":2: not valid JSON"),
    (json.dumps({"knowledge": "k"}), ":2: field 'question'"),
    (json.dumps({"question": "q"}), ":2: field 'knowledge' is missing"),
    (json.dumps({"question": "q", "knowledge": 3}), ":2: field 'knowledge' must be"),
    (json.dumps({"question": "q", "knowledge": "k", "right_answer": 5}), "'right_answer' must be a string"),
    (json.dumps([1, 2]), ":2: expected a JSON object"),
])
def test_malformed_line_reports_line_number(tmp_path, line, needle):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"question": "ok?", "knowledge": "k"}) + "\n" + line + "\n")
    with pytest.raises(DataError) as e:
        read_jsonl(f)
    assert needle in str(e.value)


def test_missing_file_and_bad_split(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="unknown split"):
        load_halueval("validation")
