"""Offline loaders: HaluEval-QA from its wheel, any JSONL, deterministic splits, clear errors."""
import json

import pytest

from core.data import DataError, load_halueval, load_items, read_jsonl, split_of


def test_halueval_loads_and_splits_deterministically():
    items = load_halueval("all")
    assert len(items) == 10_000
    splits = {name: load_halueval(name) for name in ("train", "dev", "test")}
    # the three splits partition the data set: every item in exactly one split, none lost
    assert sum(len(v) for v in splits.values()) == len(items)
    uids = {name: {it.uid for it in v} for name, v in splits.items()}
    assert not uids["test"] & uids["train"], "test questions leak into train"
    assert not uids["test"] & uids["dev"] and not uids["dev"] & uids["train"]
    # roughly 80 / 5 / 15 % (hash buckets), and the test split is at least the documented 1,000 items
    assert len(splits["test"]) >= 1_000
    for name, share in (("train", 0.80), ("dev", 0.05), ("test", 0.15)):
        assert abs(len(splits[name]) / len(items) - share) < 0.02, (name, len(splits[name]))
    # deterministic: a second load gives the same items in the same order, and the split of an item
    # is a function of its question alone (independent of file order)
    assert [it.question for it in load_halueval("test")] == [it.question for it in splits["test"]]
    by_split = {}
    for it in reversed(items):
        by_split.setdefault(split_of(it.question), set()).add(it.uid)
    assert by_split == uids
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
