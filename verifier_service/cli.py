"""`rlfh verify`: run the atomic-fact verifier on one response or on HaluEval answers.

Top-level imports stay light (no torch): the verifier's default backends need none.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.config import ServiceSettings, positive_int
from core.data import load_items
from core.verify_schema import BAD_LABELS, LABELS, VerifyRequest
from verifier_service.core import Verifier

DESCRIPTION = """\
Verify a response: split it into sentences and atomic statements (with character spans), label each
statement Correct / Hedged correct / Vague / Hedged wrong / Wrong against the evidence (and the gold
answer when given), and score its informativeness 1-5.

One response:
  rlfh verify --question "Where was Joe Heck born?" --response "He was born in Reno." \\
      --knowledge "Joseph John Heck (born October 30, 1961) is an American politician from Nevada." --gold Nevada

HaluEval answers (N right and N hallucinated answers, label summary):
  rlfh verify --data halueval:test --limit 20

Backends: evidence (default, no LLM), llm (OpenAI-compatible endpoint at MODEL_URL / --model-url).
The self backend needs an in-process engine and is not available from the command line."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="Verify a response (or HaluEval answers) with the atomic-fact verifier.",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    one = p.add_argument_group("one response")
    one.add_argument("--question", "-q", default=None, help="The question the response answers.")
    one.add_argument("--response", "-r", default=None,
                     help="The response to verify (use '-' to read it from standard input).")
    one.add_argument("--materials", "-m", default=None, metavar="FILE",
                     help="Evidence passages: a text file (passages separated by blank lines), a JSON list of "
                          "strings, or a JSONL file with one passage (string) per line.")
    one.add_argument("--knowledge", "-k", action="append", default=None, metavar="TEXT",
                     help="An evidence passage given inline; repeat for several passages.")
    one.add_argument("--gold", "-g", default=None, help="The reference answer, when known.")
    data = p.add_argument_group("data set")
    data.add_argument("--data", default=None, metavar="SPEC",
                      help="Verify the right and hallucinated answers of a data set instead: 'halueval:SPLIT' "
                           "(SPLIT = train, dev or test) or a JSONL path with question, knowledge, right_answer, "
                           "hallucinated_answer.")
    data.add_argument("--limit", type=positive_int, default=20, metavar="N",
                      help="With --data: verify the first N items (2N responses; default 20).")
    data.add_argument("--no-gold", action="store_true",
                      help="With --data: do not pass the right answer as gold answer.")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true",
                     help="Print JSON (one VerifyResult; with --data, a summary plus every result) instead "
                          "of tables.")
    out.add_argument("--backend", choices=["evidence", "llm"], default=None,
                     help="Verifier backend (default: VERIFIER_BACKEND from the environment, else evidence). "
                          "llm needs MODEL_URL / --model-url.")
    # --backend above is this command's form of --verifier-backend
    ServiceSettings.add_cli_args(p, groups={"verifier"}, exclude=("verifier_backend",))
    p.set_defaults(func=_run)


def _read_materials(path: str) -> list[str]:
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"rlfh verify: --materials {path}: no such file")
    text = p.read_text(encoding="utf-8")
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise SystemExit(f"rlfh verify: --materials {path}: not valid JSON ({e.msg} at char {e.pos})")
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise SystemExit(f"rlfh verify: --materials {path}: a JSON file must hold a list of strings")
        return [x for x in data if x.strip()]
    if path.endswith(".jsonl"):
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    v = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit(f"rlfh verify: --materials {path}:{n}: not valid JSON ({e.msg})")
                if not isinstance(v, str):
                    raise SystemExit(f"rlfh verify: --materials {path}:{n}: each line must be a JSON string")
                out.append(v)
        return out
    return [b.strip() for b in text.split("\n\n") if b.strip()]


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    cfg = ServiceSettings.from_args(args)
    if (args.backend or cfg.verifier_backend) == "self":
        print("rlfh verify: VERIFIER_BACKEND=self judges with the policy's rollout engines, which only `rlfh train` "
              "has; pass --backend evidence or --backend llm (with MODEL_URL)", file=sys.stderr)
        return 2
    verifier = Verifier(cfg, backend=args.backend)
    if args.data:
        return _run_data(args, verifier)
    if args.question is None or args.response is None:
        print("rlfh verify: give --question and --response (or --data halueval:SPLIT); see --help",
              file=sys.stderr)
        return 2
    response = sys.stdin.read() if args.response == "-" else args.response
    materials = list(args.knowledge or [])
    if args.materials:
        materials += _read_materials(args.materials)
    try:
        req = VerifyRequest(question=args.question, response=response, materials=materials, gold_answer=args.gold)
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "request"
            print(f"rlfh verify: {loc}: {err['msg']}", file=sys.stderr)
        return 2
    res = verifier.verify(req)
    if args.json:
        print(res.model_dump_json(indent=2))
    else:
        print_result(req, res)
    return 0


def print_result(req, res, console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    colours = {"Correct": "green", "Hedged correct": "cyan", "Vague": "yellow", "Hedged wrong": "magenta",
               "Wrong": "red"}
    t = Table(title=f"{res.backend} verifier: {res.num_statements} statement(s)"
                    + (" - ABSTAINED" if res.abstained else ""), show_lines=True)
    t.add_column("sent", justify="right")
    t.add_column("span", justify="right")
    t.add_column("statement")
    t.add_column("label")
    t.add_column("info", justify="right")
    t.add_column("conf", justify="right")
    t.add_column("evidence")
    for i, sent in enumerate(res.sentences, 1):
        if not sent.statements:
            t.add_row(str(i), f"{sent.start}-{sent.end}", f"[dim]{sent.text}[/]", "-", "-", "-", "")
        for st in sent.statements:
            flags = ("" if st.aligned else " (unaligned)") + (" (fallback)" if st.fallback else "")
            ev = st.evidence[0][:80] + ("..." if st.evidence and len(st.evidence[0]) > 80 else "") if st.evidence \
                else ""
            t.add_row(str(i), f"{st.start}-{st.end}", st.text + flags,
                      f"[{colours.get(st.label, 'white')}]{st.label}[/]", str(st.informativeness),
                      f"{st.confidence:.2f}", ev)
    console.print(t)
    console.print(f"labels: {res.label_counts()}  unaligned: {res.num_unaligned}  fallback: {res.num_fallback}  "
                  f"latency: {res.latency_ms:.1f} ms")


def _run_data(args: argparse.Namespace, verifier) -> int:
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    items = [it for it in load_items(args.data, limit=args.limit) if it.right_answer and it.hallucinated_answer]
    reqs, kinds = [], []
    for it in items:
        gold = None if args.no_gold else it.right_answer
        for kind, resp in (("right", it.right_answer), ("hallucinated", it.hallucinated_answer)):
            reqs.append(VerifyRequest(question=it.question, response=resp, materials=it.knowledge, gold_answer=gold))
            kinds.append(kind)
    console = Console(stderr=args.json)
    results = []
    for i in track(range(0, len(reqs), 8), description=f"verifying {len(reqs)} answers", console=console,
                   transient=True):
        results.extend(verifier.verify_many(reqs[i:i + 8]))
    summary = {k: {"responses": 0, "flagged": 0, **{lab: 0 for lab in LABELS}} for k in ("right", "hallucinated")}
    for kind, res in zip(kinds, results):
        s = summary[kind]
        s["responses"] += 1
        s["flagged"] += int(any(st.label in BAD_LABELS for st in res.statements()))
        for lab, c in res.label_counts().items():
            s[lab] += c
    if args.json:
        print(json.dumps({"backend": verifier.backend_name, "summary": summary,
                          "results": [{"kind": k, "question": r.question, "response": r.response,
                                       "result": res.model_dump()} for k, r, res in zip(kinds, reqs, results)]},
                         indent=2))
        return 0
    t = Table(title=f"{verifier.backend_name} verifier on {args.data} ({len(items)} items, "
                    f"gold answer {'off' if args.no_gold else 'on'})")
    t.add_column("answers")
    t.add_column("responses", justify="right")
    t.add_column("flagged (any Wrong)", justify="right")
    for lab in LABELS:
        t.add_column(lab, justify="right")
    for kind, s in summary.items():
        n = max(1, s["responses"])
        t.add_row(kind, str(s["responses"]), f"{s['flagged']} ({100 * s['flagged'] / n:.0f}%)",
                  *[str(s[lab]) for lab in LABELS])
    console.print(t)
    return 0
