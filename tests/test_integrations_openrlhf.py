"""OpenRLHF's own client code against the real reward service (Ray Serve over real HTTP, real Redis).

OpenRLHF 0.11's ``SingleTurnAgentExecutor`` (installed ``--no-deps`` by ``make setup``) sends
``query = tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)``: chat template and EOS in the
query. Whatever the template, label format or added whitespace, ``/get_reward`` must give the verdict
``/v1/rewards`` gives for the plain question and answer (issue 11).
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from integration_service import OBEROI, direct_rewards
from reward_service.openrlhf_adapter import (GetRewardInputError, clean_response, parse_get_reward,
                                             question_from_prompt, response_after_prompt)

REPO = Path(__file__).resolve().parents[1]
REWARD_FUNC_FILE = REPO / "reward_service" / "openrlhf_reward_func.py"

# Chat templates written out (no hub download); EOS per family as its tokenizer would append it.
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = ("<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
          "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
MISTRAL = ("<s>{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
           "{% elif m['role'] == 'assistant' %}{{ m['content'] }}</s>{% endif %}{% endfor %}")
TEMPLATES = {"chatml": (CHATML, "<|im_end|>"), "llama3": (LLAMA3, "<|eot_id|>"), "mistral": (MISTRAL, "</s>")}
SYSTEM = "You are a helpful assistant. Answer in one sentence."
EXTRA_SPECIAL = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<s>", "</s>",
                 "[INST]", "[/INST]"]


# ------------------------------------------------------------------------------ the adapter (no service)

@pytest.mark.parametrize("raw,want", [
    ("The head office is in Delhi.<|im_end|>", "The head office is in Delhi."),
    (" The head office is in Delhi.<|eot_id|>", "The head office is in Delhi."),
    ("The head office is in Delhi.</s>", "The head office is in Delhi."),
    ("The head office is in Delhi. <|im_end|>\n<|endoftext|><|endoftext|>", "The head office is in Delhi."),
    ("Delhi.<|im_end|>\n<|im_start|>user\nAnd Mumbai?<|im_end|>", "Delhi."),      # text after the turn ends
    ("<|im_start|>assistant\nDelhi.<|im_end|>", "Delhi."),                        # prompt without generation header
    ("<|start_header_id|>assistant<|end_header_id|>\n\nDelhi.<|eot_id|>", "Delhi."),
    ("Delhi.<end_of_turn>", "Delhi."),
    ("It is 5 < 6 and <b>bold</b>.", "It is 5 < 6 and <b>bold</b>."),              # not special tokens: kept
])
def test_clean_response_strips_what_templates_add(raw, want):
    assert clean_response(raw) == want


def test_response_after_prompt_whitespace_bos_and_mismatch():
    prompt = "<s>[INST] Where is the Oberoi head office? [/INST]"
    # a sentencepiece decode adds / drops spaces around special tokens
    assert response_after_prompt("<s> [INST] Where is the Oberoi head office?[/INST] Delhi.</s>", prompt) == " Delhi.</s>"
    assert response_after_prompt("<s>[INST]Where  is the Oberoi head office? [/INST]\nDelhi.", prompt) == "\nDelhi."
    # a BOS the decode put in front of a prompt that lacks it
    assert response_after_prompt("<|begin_of_text|>Question: Q?\nAnswer: A", "Question: Q?\nAnswer:") == " A"
    assert response_after_prompt("Question: Q?\nAnswer: A", "") == "Question: Q?\nAnswer: A"
    assert response_after_prompt("Question: Z?\nAnswer: A", "Question: Q?\nAnswer:") is None
    assert response_after_prompt("Some text. Question: Q?\nAnswer: A", "Question: Q?\nAnswer:") is None


@pytest.fixture(scope="module")
def template_tokenizer(embedded_model_path):
    """SmolLM2's tokenizer (byte-level BPE) with the other families' special tokens added as single tokens."""
    from core.model_loader import load_tokenizer
    tok = load_tokenizer(embedded_model_path)
    tok.add_special_tokens({"additional_special_tokens": EXTRA_SPECIAL})
    return tok


def templated(tok, family: str, question: str, system: bool = True) -> str:
    if family == "plain":
        return f"Question: {question}\nAnswer:"
    msgs = ([{"role": "system", "content": SYSTEM}] if system and family != "mistral" else []) + \
        [{"role": "user", "content": question}]
    return tok.apply_chat_template(msgs, chat_template=TEMPLATES[family][0], tokenize=False,
                                   add_generation_prompt=True)


@pytest.mark.parametrize("family", ["chatml", "llama3", "mistral"])
def test_question_from_templated_prompt(template_tokenizer, family):
    q = OBEROI["question"]
    assert question_from_prompt(templated(template_tokenizer, family, q)) == q
    assert question_from_prompt(f"  Question: {q}\nAnswer:") == f"Question: {q}\nAnswer:"


def test_parse_get_reward_names_the_bad_item():
    q = ["Question: A?\nAnswer: yes", "Question: B?\nAnswer: no"]
    with pytest.raises(GetRewardInputError) as ei:
        parse_get_reward(q, ["Question: A?\nAnswer:", "Question: C?\nAnswer:"], None, max_items=8)
    assert ei.value.field == "prompts.1" and ei.value.item_index == 1 and "prefix" in ei.value.message
    with pytest.raises(GetRewardInputError) as ei:
        parse_get_reward(q, ["x"], None, max_items=8)
    assert ei.value.field == "prompts"
    with pytest.raises(GetRewardInputError) as ei:
        parse_get_reward(q, None, None, max_items=1)
    assert ei.value.field == "query"
    with pytest.raises(GetRewardInputError) as ei:
        parse_get_reward(["<|im_end|>"], ["<|im_end|>"], ["Delhi"], max_items=8)
    assert ei.value.field == "labels.0"           # no question anywhere
    # the same sample in the label and in the prompt -> the same request
    label = json.dumps({"question": "A?", "answer": "yes"})
    a, = parse_get_reward(["<|im_start|>user\nA?<|im_end|>\n<|im_start|>assistant\nyes<|im_end|>"],
                          ["<|im_start|>user\nA?<|im_end|>\n<|im_start|>assistant\n"], [label], max_items=8)
    b, = parse_get_reward(["Q: A? yes"], ["Q: A?"], ["yes"], max_items=8)
    assert a.request.question == "A?" and a.request.response == "yes" and a.request.gold_answer == "yes"
    assert b.request.question == "Q: A?" and b.request.response == "yes"


# ------------------------------------------------------------------------------ through the real service

@pytest.fixture
def service(shared_reward_service):
    """The reward service the integration modules share (tests/conftest.py starts it once for all of them)."""
    return shared_reward_service


def executor(url_or_file: str):
    from openrlhf.utils.agent import SingleTurnAgentExecutor
    return SingleTurnAgentExecutor(remote_rm_url=url_or_file)


def fetch(url: str, queries, prompts, labels) -> list[dict]:
    """One request per rollout, as OpenRLHF's executor sends them."""
    ex = executor(f"{url}/get_reward")

    async def run():
        return await asyncio.gather(*[ex._fetch_rewards_via_http([q], [p], [lab])
                                      for q, p, lab in zip(queries, prompts, labels)])
    return [r[0] for r in asyncio.run(run())]


def openrlhf_query(tok, prompt: str, response: str, eos: str | None) -> str:
    """What OpenRLHF sends: decode(prompt_ids + response_ids) with special tokens kept."""
    ids = tok(prompt, add_special_tokens=False)["input_ids"] + tok(response, add_special_tokens=False)["input_ids"]
    if eos:
        ids += tok(eos, add_special_tokens=False)["input_ids"]
    return tok.decode(ids, skip_special_tokens=False)


def label_of(extra: dict, i: int = 0) -> dict:
    return {k.removeprefix("label_"): v[i] for k, v in extra.items() if k.startswith("label_")}


def counts_key(label_counts: dict) -> dict:
    return {k.lower().replace(" ", "_"): float(v) for k, v in label_counts.items()}


@pytest.mark.slow
def test_issue_table_all_rows_same_label(service, embedded_model_path):
    """Issue 11's table, through OpenRLHF's client with the SmolLM2 tokenizer: EOS in the query x question in
    the label JSON. Before the fix the first row was Wrong (-0.909) and the others Correct (1.091)."""
    from core.model_loader import load_tokenizer
    tok = load_tokenizer(embedded_model_path)
    q, know, resp = OBEROI["question"], OBEROI["knowledge"], OBEROI["right"]
    prompt = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    direct, = direct_rewards(service["url"], [{"question": q, "response": resp, "materials": [know]}])
    rows = []
    for with_eos in (True, False):
        for q_in_label in (True, False):
            lab = {"knowledge": know, **({"question": q} if q_in_label else {})}
            query = openrlhf_query(tok, prompt, resp, tok.eos_token if with_eos else None)
            assert query.endswith("<|im_end|>") == with_eos
            rows.append(fetch(service["url"], [query], [prompt], [json.dumps(lab)])[0])
    assert direct["label_counts"]["Correct"] >= 1 and direct["is_correct"]
    for row in rows:
        assert row["rewards"] == [pytest.approx(direct["score"])], rows
        assert label_of(row["extra_logs"]) == counts_key(direct["label_counts"]), rows
        assert row["extra_logs"]["cached"] == [1.0]          # the very same verifier request as /v1/rewards


def cases(halueval_test_items):
    """(question, knowledge passages, right answer, wrong answer): the issue's example and two HaluEval items."""
    out = [(OBEROI["question"], [OBEROI["knowledge"]], OBEROI["right"], OBEROI["wrong"])]
    for qa in halueval_test_items[:2]:
        out.append((qa.question, list(qa.knowledge), qa.right_answer, qa.hallucinated_answer))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("label_kind", ["gold", "json"])
def test_openrlhf_client_templates_match_v1_rewards(service, template_tokenizer, halueval_test_items, label_kind):
    """Plain text, ChatML, Llama-3 and Mistral [INST] queries with their EOS, labels as gold answers or JSON:
    right and wrong answers get exactly the /v1/rewards result, via the very same verifier request."""
    tok = template_tokenizer
    direct_items, queries, prompts, labels, which = [], [], [], [], []
    for ci, (q, know, right, wrong) in enumerate(cases(halueval_test_items)):
        gold = right if ci else OBEROI["gold"]
        label = gold if label_kind == "gold" else json.dumps({"knowledge": know, "answer": gold, "question": q})
        for ai, answer in enumerate((right, wrong)):
            direct_items.append({"question": q, "response": answer, "materials": [] if label_kind == "gold" else know,
                                 "gold_answer": gold})
            for family in ("plain", "chatml", "llama3", "mistral"):
                prompt = templated(tok, family, q)
                eos = TEMPLATES[family][1] if family != "plain" else tok.eos_token
                response = (" " + answer) if family == "plain" else answer
                queries.append(openrlhf_query(tok, prompt, response, eos))
                prompts.append(prompt)
                labels.append(label)
                which.append(len(direct_items) - 1)
    direct = direct_rewards(service["url"], direct_items)        # fills the cache first
    got = fetch(service["url"], queries, prompts, labels)
    for j, (out, d) in enumerate(zip(got, which)):
        want = direct[d]
        assert out["rewards"] == [pytest.approx(want["score"])], (queries[j], out, want)
        assert label_of(out["extra_logs"]) == counts_key(want["label_counts"]), (queries[j], out, want)
        if label_kind == "json" or not queries[j].startswith("Question:"):
            # identical (question, response, materials, gold); a plain prompt with no question in the label is
            # itself the question ("Question: ...\nAnswer:"), so only its verdict is the same
            assert out["extra_logs"]["cached"] == [1.0], queries[j]
    # the comparison is not vacuous: right and wrong answers are told apart on the issue's example
    assert direct[0]["score"] > direct[1]["score"]
    assert direct[0]["is_correct"] and not direct[1]["is_correct"]


class StubEngine:
    """Stands in for a vLLM engine (no GPU here): 'generates' a fixed answer followed by EOS."""

    def __init__(self, tok, answer: str, eos_id: int):
        self.ids = tok(answer, add_special_tokens=False)["input_ids"] + [eos_id]
        self.text = answer
        self.calls = 0

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.calls += 1
        out = SimpleNamespace(token_ids=list(self.ids), text=self.text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def run_execute(ex, tok, prompt, label, answer):
    engine = StubEngine(tok, answer, tok.eos_token_id)
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    out = asyncio.run(ex.execute(prompt, label, params, 512, tok, engine))
    assert engine.calls == 1
    return out


@pytest.mark.slow
def test_openrlhf_execute_http_and_reward_func_file(service, embedded_model_path, monkeypatch):
    """OpenRLHF's whole single-turn rollout (``execute``, stub engine) in both reward modes: the HTTP URL and
    ``--reward.remote_url reward_service/openrlhf_reward_func.py`` (in-process function calling the service)."""
    import torch

    from core.model_loader import load_tokenizer
    tok = load_tokenizer(embedded_model_path)
    q, know = OBEROI["question"], OBEROI["knowledge"]
    prompt = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    label = json.dumps({"knowledge": know, "question": q})
    direct = direct_rewards(service["url"], [{"question": q, "response": a, "materials": [know]}
                                             for a in (OBEROI["right"], OBEROI["wrong"])])
    monkeypatch.setenv("REWARD_URL", service["url"])
    monkeypatch.setenv("REWARD_TIMEOUT_S", "60")
    monkeypatch.setenv("REWARD_MAX_RETRIES", "1")
    http_ex = executor(f"{service['url']}/get_reward")
    func_ex = executor(str(REWARD_FUNC_FILE))
    assert func_ex.reward_func is not None                     # OpenRLHF loaded our file
    for answer, want in zip((OBEROI["right"], OBEROI["wrong"]), direct):
        via_http = run_execute(http_ex, tok, prompt, label, answer)
        via_func = run_execute(func_ex, tok, prompt, label, answer)
        assert tok.decode(via_http["observation_tokens"]).endswith("<|im_end|>")   # EOS was in the query
        assert via_http["reward"] == [pytest.approx(want["score"])]
        assert isinstance(via_func["reward"], torch.Tensor) and via_func["reward"].shape == (1,)
        assert via_func["reward"].item() == pytest.approx(want["score"], abs=1e-5)
        assert via_func["scores"].item() == pytest.approx(via_http["scores"][0], abs=1e-5)
        assert via_func["extra_logs"]["label_correct"].item() == want["label_counts"]["Correct"]
    # the function batches, and fails loudly (not a silent zero) on bad input
    from reward_service import openrlhf_reward_func as rf
    out = rf.reward_func([prompt + OBEROI["right"], prompt + OBEROI["wrong"]], [prompt, prompt], [label, label])
    assert out["rewards"].tolist() == pytest.approx([d["score"] for d in direct], abs=1e-5)
    from reward_service.client import RewardRequestError
    with pytest.raises(RewardRequestError) as ei:
        rf.reward_func([prompt + "x", "Other text x"], [prompt, prompt], [label, label])
    assert ei.value.status == 422 and ei.value.field == "prompts.1" and ei.value.item_index == 1


@pytest.mark.slow
def test_get_reward_prompt_not_prefix_is_422_naming_the_item(service):
    body = {"query": ["Question: A?\nAnswer: yes", "Question: B?\nAnswer: no"],
            "prompts": ["Question: A?\nAnswer:", "Question: C?\nAnswer:"], "labels": ["yes", "no"]}
    r = httpx.post(f"{service['url']}/get_reward", json=body, timeout=60)
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["item_index"] == 1 and err["detail"][0]["field"] == "prompts.1" and "prefix" in err["error"]


# ------------------------------------------------------------------------------ the documented commands

def openrlhf_cli_args(argv: list[str]):
    """``argv`` parsed as ``python -m openrlhf.cli.train_ppo_ray`` parses it, and checked as it checks it.

    OpenRLHF 0.11 builds its parser inline, under ``if __name__ == "__main__":`` of openrlhf/cli/train_ppo_ray.py,
    and importing that module imports vLLM, DeepSpeed's GPU paths and the Ray trainer (not installed here: openrlhf
    is installed ``--no-deps``). So this runs OpenRLHF's own code from that file without importing it: the
    module's standard-library imports, then the statements of the ``__main__`` block up to ``train(args)``, with
    ``parser.parse_args()`` given ``argv``. That is OpenRLHF's own parser (every flag, type, choice) and its own
    argument checks (``hierarchize`` and the asserts before training). Returns the hierarchized namespace
    OpenRLHF's ``train(args)`` would get; an unknown flag raises SystemExit (argparse), a failed check
    AssertionError.
    """
    import ast
    import importlib.util
    import sys

    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")       # imports the packages, not the module
    assert spec is not None and spec.origin, "openrlhf is not installed: run `make setup`"
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    stdlib = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and all(
        (getattr(n, "module", None) or a.name).split(".")[0] in sys.stdlib_module_names for a in n.names)]
    body = []
    for stmt in main.body:
        if isinstance(stmt, ast.Expr) and ast.unparse(stmt) == "train(args)":
            break
        body.append(stmt)
    else:
        raise AssertionError("train_ppo_ray's __main__ block has no train(args): OpenRLHF changed; update this test")
    calls = []

    class GiveArgv(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Attribute) and node.func.attr == "parse_args" and not node.args:
                node.args = [ast.Name("ARGV", ast.Load())]
                calls.append(node)
            return node
    module = ast.fix_missing_locations(GiveArgv().visit(ast.Module(body=stdlib + body, type_ignores=[])))
    assert len(calls) == 1, "expected one parser.parse_args() in train_ppo_ray's __main__ block"
    ns = {"__name__": "openrlhf_cli_check", "ARGV": list(argv)}
    exec(compile(module, spec.origin, "exec"), ns)
    return ns["args"]


def test_openrlhf_is_011_and_its_parser_refuses_the_old_flags():
    """The parser the next test uses is OpenRLHF 0.11's: the pre-0.10.2 flags are refused."""
    from importlib.metadata import version
    assert version("openrlhf").startswith("0.11."), version("openrlhf")
    args = openrlhf_cli_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://h/get_reward"])
    assert args.actor.model_name_or_path == "m" and args.reward.remote_url == ["http://h/get_reward"]
    for old in (["--pretrain", "m"], ["--remote_rm_url", "http://h/get_reward"], ["--prompt_data", "d.jsonl"]):
        with pytest.raises(SystemExit):
            openrlhf_cli_args(old)


def test_documented_openrlhf_commands_parse():
    """Both OpenRLHF commands of docs/INTEGRATIONS.md, as written, through OpenRLHF 0.11's parser and checks: the
    reward URL (HTTP) or our reward-function file (in-process, with REWARD_URL), the dataset keys our labels use,
    and the chat template reach OpenRLHF where it reads them."""
    import doc_commands
    cmds = doc_commands.commands("INTEGRATIONS.md", "openrlhf.cli.train_ppo_ray",
                                 MODEL="/models/policy", DATA="/data/train.jsonl")
    assert len(cmds) == 2, cmds
    modes = {}
    for prefix, argv in cmds:
        args = openrlhf_cli_args(argv)
        assert args.actor.model_name_or_path == "/models/policy"
        assert args.data.prompt_dataset == "/data/train.jsonl"
        assert (args.data.input_key, args.data.label_key, args.data.apply_chat_template) == ("question", "label", True)
        url, = args.reward.remote_url
        modes["file" if url.endswith(".py") else "http"] = (prefix, url)
    assert set(modes) == {"http", "file"}
    assert modes["http"][1].endswith("/get_reward")
    prefix, path = modes["file"]
    assert Path(path).resolve() == REWARD_FUNC_FILE.resolve()       # OpenRLHF loads reward_func from this file
    assert prefix.get("REWARD_URL", "").startswith("http")          # which the file's client reads
