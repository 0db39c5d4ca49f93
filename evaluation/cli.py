"""`rlfh eval`, `rlfh compare` and `rlfh select`. No torch or numpy at import time: they load inside the commands."""
from __future__ import annotations

import argparse
import sys

from core.prompts import ABSTAIN_TEXT, SYSTEM_PROMPTS   # constants of a dependency-free module
from evaluation.generate import EVAL_BATCH_SIZE, EVAL_DTYPES  # no heavy imports at module level
from evaluation.select import SelectError, print_selection, select_checkpoint

EVAL_DESCRIPTION = """\
Generate greedy answers with a model on a QA split and grade them for hallucination.

Two judges, both reported:
  1. the gold-answer grader (primary, independent of training): SimpleQA-style correct / incorrect /
     not attempted against the item's right_answer; metrics: correct, incorrect (the hallucination
     rate), not attempted, accuracy given attempted, SimpleQA F-score, all with 95% bootstrap CIs;
  2. the training verifier (the reward's judge; NOT independent): statements per answer, label shares,
     fact precision.

Writes OUT/answers.jsonl (one record per item) and OUT/summary.json, and prints a table.
Compare runs with `rlfh compare`.
"""

COMPARE_DESCRIPTION = """\
Compare `rlfh eval` runs: pair items by question, test the differences, write a report.

Runs are grouped by data and prompt mode. For every pair of runs in a group: exact McNemar tests on
incorrect vs not-incorrect and on correct vs not, and paired bootstrap CIs of the differences (of the
verifier's fact precision and supported statements per answer too, where both runs were verified). The
verdict "fewer hallucinations, correct answers kept" needs incorrect answers significantly fewer
(p < 0.05) while correct answers are not significantly fewer. Selectivity against the first run of each
mode (the reference): a random-abstention baseline (the reference declining as many random questions),
a question-type rule baseline (the reference declining every open question), what the reference answered
where each model abstains, outcomes per question type, and -- where `rlfh eval` recorded confidences --
the AUROC of the model's mean token log-prob against correctness and a risk-coverage plot.

Writes OUT/report.md, OUT/report.json, OUT/outcomes.png, OUT/tradeoff.png and, with --run,
OUT/training_curves.png (reward, KL, label mix from RUN_DIR/metrics.jsonl), and OUT/risk_coverage.png.
"""

SELECT_DESCRIPTION = """\
Choose which checkpoint of a training run to keep, by measurement on held-out dev questions.

Every weights snapshot (SAVE_PATH/snapshots/step_*, train with SNAPSHOT_STEP=N), checkpoint
(SAVE_PATH/checkpoints/global_step_*/policy_hf) and SAVE_PATH/final is evaluated greedy on
--data in each --mode, and so is the base model. Each candidate is judged against the base by the gate of
`rlfh compare --expect` (significantly fewer incorrect answers, correct answers not significantly fewer,
higher accuracy on attempted answers, better than random abstention). Among the candidates that pass, the
one with the fewest incorrect answers is selected; when none passes, the one failing the fewest criteria,
then the one keeping the most right answers, then the one with the fewest wrong ones.

Writes OUT/selection.json and OUT/selected (a symlink to the chosen model folder) and prints a table.
Exit status: 0 when the selected checkpoint passes the gate, 3 when none does, 2 on bad input.
Evaluations are re-used when weights and settings are unchanged.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds `rlfh eval`, `rlfh compare` and `rlfh select`."""
    _add_eval_parser(sub)
    _add_compare_parser(sub)
    _add_select_parser(sub)


def _add_eval_parser(sub: argparse._SubParsersAction) -> None:
    """`rlfh eval`: its arguments in help order, a function per group."""
    p = sub.add_parser("eval", help="Answer a QA split with a model and grade hallucination (gold grader + "
                                    "training verifier).",
                       description=EVAL_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _eval_input_args(p)
    _eval_decoding_args(p)
    _eval_confidence_args(p)
    _eval_abstention_args(p)
    _eval_run_args(p)
    p.set_defaults(func=_cmd_eval)


def _eval_input_args(p: argparse.ArgumentParser) -> None:
    """What `rlfh eval` answers and where it writes: --model, --data, --mode, --out, --limit."""
    p.add_argument("--model", required=True,
                   help="Model: 'smollm2-135m-instruct' (embedded base), a HF folder (e.g. SAVE_PATH/final of "
                        "`rlfh train`), or a hub id already in the local HF cache.")
    p.add_argument("--data", default="halueval:test",
                   help="'halueval:train|dev|test' (embedded HaluEval-QA split) or a JSONL file with question, "
                        "knowledge and right_answer per line. Default: halueval:test (held out from training).")
    p.add_argument("--mode", choices=["closed", "evidence"], default="closed",
                   help="closed: the question alone (closed book); evidence: the item's knowledge passages are "
                        "put in the prompt. Default: closed.")
    p.add_argument("--out", required=True, help="Output folder for answers.jsonl and summary.json.")
    p.add_argument("--limit", type=int, default=0,
                   help="Evaluate a deterministic subset of N items (the N whose question hash sorts first: the "
                        "same subset for every model, so runs pair up). 0: all items.")


def _eval_decoding_args(p: argparse.ArgumentParser) -> None:
    """How `rlfh eval` decodes and grades: --batch-size, --max-new-tokens, --system, --grade-scope, --dtype,
    --threads."""
    p.add_argument("--batch-size", type=int, default=EVAL_BATCH_SIZE,
                   help="Prompts decoded together (left padded; prefilled a few at a time). More rows per decode step "
                        f"is more tokens per second, and a KV buffer of ~46 KB per row and token. Default "
                        f"{EVAL_BATCH_SIZE}.")
    p.add_argument("--max-new-tokens", type=int, default=40,
                   help="Answer length cap in tokens (greedy decoding stops at EOS earlier). Default 40.")
    p.add_argument("--system", choices=list(SYSTEM_PROMPTS), default="default",
                   help="System prompt: 'default' (the training prompt), 'may-abstain' (the prompt-only "
                        "baseline: the model is told it may answer \"I don't know\"), 'grounded' (the answer in "
                        "one sentence, then the passage's facts behind it: SYSTEM_PROMPT=grounded) or "
                        "'grounded-may-abstain' (the grounded prompt told it may decline: the grounded recipe's "
                        "prompt-only baseline). Default: default.")
    p.add_argument("--grade-scope", choices=["whole", "first-sentence"], default="whole",
                   help="What the gold grader reads: the whole answer, or its first sentence (the answer sentence "
                        "of a grounded reply, GRADE_SCOPE). Default: whole.")
    p.add_argument("--dtype", choices=list(EVAL_DTYPES), default="fp32",
                   help="Inference precision: fp32, bf16 or fp16 weights, or autocast (fp32 weights, bf16 matmuls: "
                        "what a training rollout samples with; faster on a CPU with native bf16, and it changes "
                        "some greedy answers). Default fp32.")
    p.add_argument("--threads", type=int, default=0,
                   help="Torch CPU threads (0: auto = all cores on an idle machine, 1 when other work keeps the "
                        "cores busy: on a shared small machine one thread avoids OpenMP stalls).")


def _eval_confidence_args(p: argparse.ArgumentParser) -> None:
    """What `rlfh eval` records of the model's own knowledge: --confidence, --knowledge-samples,
    --knowledge-temperature."""
    p.add_argument("--confidence", choices=["auto", "on", "off"], default="auto",
                   help="Record each answer's mean token log-prob (the model's own confidence; `rlfh compare` "
                        "reports its AUROC against correctness and a risk-coverage plot). One extra forward "
                        "pass; 'auto' (default): closed book only, where prompts are short.")
    p.add_argument("--knowledge-samples", type=int, default=0, metavar="K",
                   help="Also sample K answers per question (at --knowledge-temperature) and record how many the "
                        "gold grader marks right (known_rate). Run it on the base model: `rlfh compare` then shows "
                        "every run's outcomes on the questions the base never / sometimes / mostly knew. Costs "
                        "about K times the generation. Default 0 (off).")
    p.add_argument("--knowledge-temperature", type=float, default=0.7,
                   help="Sampling temperature for --knowledge-samples (the training rollouts' TEMPERATURE by "
                        "default: 0.7).")


def _eval_abstention_args(p: argparse.ArgumentParser) -> None:
    """How `rlfh eval` decides to decline: --abstain-threshold, --abstain-text, --abstain-model, --grounding-gate."""
    p.add_argument("--abstain-threshold", type=float, default=0.0, metavar="TAU",
                   help="Decide abstention by the model's own probability of replying --abstain-text "
                        "(teacher-forced, one forward per question): decline where it exceeds TAU, elsewhere answer "
                        "greedily with the abstention's first token blocked. For models trained to abstain "
                        "(R-Tuning, RL with an abstain reward) whose greedy reply declines nearly always or never; "
                        "choose TAU on dev data (`rlfh select --abstain-sweep`), never on test. Records "
                        "p_abstain per answer. 1 scores P(abstain) but answers every question (what a threshold "
                        "sweep starts from). Default 0 (off: the greedy reply decides).")
    p.add_argument("--abstain-text", default=ABSTAIN_TEXT,
                   help="The abstention reply --abstain-threshold scores (the trainer's ABSTAIN_TEXT and the "
                        "baselines' --abstain-text default).")
    p.add_argument("--abstain-model", default="", metavar="PATH",
                   help="With --abstain-threshold: take the probability from this model (a refusal-trained copy of "
                        "the same base, e.g. `rlfh baseline rtuning`'s output) while --model answers; the gate "
                        "decides, the deployed model's answers stay as they were. Default: --model itself.")
    p.add_argument("--grounding-gate", action="store_true",
                   help="Evidence mode: decline (reply --abstain-text) where an open question's answer adds no "
                        "word that is in the question's passage (it restates the question, or everything it adds "
                        "is from elsewhere). Yes/no and either-or questions are never declined. A rule, not a "
                        "learned model: it needs no gold answer and no training, and every evidence-mode record "
                        "gets its grounded_share either way. Off by default.")


def _eval_run_args(p: argparse.ArgumentParser) -> None:
    """The run itself: --answers-from, --name, --no-verifier, --n-boot, --seed, --no-progress, --reuse."""
    p.add_argument("--answers-from", default="", metavar="RUN_DIR",
                   help="Re-use the greedy answers of an earlier plain `rlfh eval` run (its --out) of the same "
                        "model, data, mode, --system, --limit and --max-new-tokens instead of generating, e.g. to "
                        "evaluate --grounding-gate on the base model's answers in seconds. Default: generate.")
    p.add_argument("--name", default="",
                   help="Display name of this run in tables and reports (default: derived from --model and "
                        "--system).")
    p.add_argument("--no-verifier", dest="verifier", action="store_false",
                   help="Skip the training verifier's statement metrics (gold grader only; faster).")
    p.add_argument("--n-boot", type=int, default=2000, help="Bootstrap resamples for the CIs. Default 2000.")
    p.add_argument("--seed", type=int, default=0, help="Bootstrap seed. Default 0.")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="Hide progress bars.")
    p.add_argument("--reuse", action="store_true",
                   help="Skip the run when OUT already holds one made with the same model weights and settings "
                        "(the demo re-uses base-model evaluations this way); otherwise take the greedy answers "
                        "from $RLFH_CACHE_DIR/answers, or from the ones shipped in evaluation/shipped/ (the embedded "
                        "model on make train's held-out questions), where they were made for the same model, "
                        "prompts, token limit, batch size and dtype. Without it the answers are made here (and "
                        "cached for a later --reuse).")


def _add_compare_parser(sub: argparse._SubParsersAction) -> None:
    """`rlfh compare`: the runs and the report, then the gate (--expect, --gate, --expect-mode, --expect-against)."""
    c = sub.add_parser("compare", help="Compare eval runs (paired McNemar, bootstrap CIs) and write a report "
                                       "with plots.",
                       description=COMPARE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("runs", nargs="+", metavar="EVAL_DIR",
                   help="Output folders of `rlfh eval` (two or more). Order matters: within a mode the first is "
                        "the reference the others are compared with (every pair is tested).")
    c.add_argument("--out", required=True, help="Report folder (report.md, report.json, PNGs).")
    c.add_argument("--run", dest="run_dir", default=None,
                   help="Training run folder (SAVE_PATH of `rlfh train`): adds training curves from its "
                        "metrics.jsonl.")
    c.add_argument("--title", default="RLFH hallucination report", help="Report title.")
    c.add_argument("--n-boot", type=int, default=2000, help="Bootstrap resamples. Default 2000.")
    c.add_argument("--seed", type=int, default=0, help="Bootstrap seed. Default 0.")
    c.add_argument("--expect", default="", metavar="NAME",
                   help="Gate (for CI and the demo): exit with status 3 unless the run named NAME (its --name) "
                        "passes --gate in every gated mode. selective: significantly fewer incorrect answers than "
                        "every other run "
                        "without significantly fewer correct ones (exact McNemar), accuracy on its attempted answers "
                        "significantly above the mode's first run (paired bootstrap CI above 0), and more correct "
                        "answers than the first run would keep declining as many random questions (exact "
                        "hypergeometric p < 0.05). grounded: see --gate. The report is written either way.")
    c.add_argument("--gate", choices=["selective", "grounded"], default="selective",
                   help="What --expect asks. selective (default; closed book): the abstention gate above. grounded "
                        "(with the passage; default mode evidence): against the mode's first run, correct answers "
                        "up 10 points and incorrect down 15, both significant (exact McNemar), and the verifier's "
                        "fact precision up 15 points with supported statements per answer not lower.")
    c.add_argument("--expect-mode", action="append", choices=["closed", "evidence"], default=None,
                   metavar="MODE", help="With --expect: only these prompt modes are gated (repeatable; default: "
                                        "all). The other modes are still compared and reported.")
    c.add_argument("--expect-against", action="append", default=None, metavar="NAME",
                   help="With --expect: judge the gate only against these runs (repeatable; default: every other "
                        "run of the mode). The others are still compared and reported: the held-out report gates "
                        "against the base model and shows the warm start's paired tests without gating on them.")
    c.set_defaults(func=_cmd_compare)


def _add_select_parser(sub: argparse._SubParsersAction) -> None:
    """`rlfh select`: the run, the dev data, the abstention sweep, the evaluation's resources."""
    s = sub.add_parser("select", help="Pick a training run's checkpoint on the dev split by the selectivity gate "
                                      "(early stopping).",
                       description=SELECT_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("run_dir", metavar="RUN_DIR",
                   help="SAVE_PATH of `rlfh train`. Its weight snapshots (snapshots/step_*, written every "
                        "SNAPSHOT_STEP steps), checkpoints (checkpoints/global_step_*/policy_hf) and final/ are the "
                        "candidates. A model folder (e.g. a baseline's --out) is the one candidate.")
    s.add_argument("--data", default="halueval:dev",
                   help="Split to select on: 'halueval:dev' (default) or a JSONL file. Never the test split the "
                        "final report uses.")
    s.add_argument("--mode", action="append", choices=["closed", "evidence"], default=None, dest="modes",
                   help="Prompt mode(s) the gate is judged in (repeatable). Default: closed.")
    s.add_argument("--limit", type=int, default=200,
                   help="Questions of --data (the same deterministic subset as `rlfh eval --limit`). Default 200.")
    s.add_argument("--base", default="",
                   help="The model the run started from (default: read from the run's rlfh_meta.json).")
    s.add_argument("--out", default="",
                   help="Folder for the evaluations, selection.json and the 'selected' symlink. Default: "
                        "RUN_DIR/select.")
    s.add_argument("--abstain-sweep", action="store_true",
                   help="Also choose an abstention threshold: score each candidate's P(I don't know.) once "
                        "(`rlfh eval --abstain-threshold 1`) and judge it at the thresholds that decline 10, 15, "
                        "..., 90 percent of the dev questions; every (candidate, threshold) is a candidate, and each "
                        "--mode gets its own threshold (OUT/<mode>/). For models whose greedy reply declines nearly always or never (R-Tuning, RL with an abstain "
                        "reward). Prints the `rlfh eval` options that reproduce the choice on the test split.")
    s.add_argument("--abstain-gate", action="store_true",
                   help="With --abstain-sweep: the candidates only decide (their P(abstain) against the threshold) "
                        "and the base model answers (`rlfh eval --abstain-model`), so the answers users get are "
                        "the base model's. RUN_DIR may be a model folder, e.g. the --out of `rlfh baseline "
                        "rtuning`.")
    s.add_argument("--threads", type=int, default=0, help="Torch CPU threads (0: auto, as for `rlfh eval`).")
    s.add_argument("--batch-size", type=int, default=EVAL_BATCH_SIZE,
                   help=f"Prompts decoded together, as for `rlfh eval`. Default {EVAL_BATCH_SIZE}.")
    s.add_argument("--no-progress", dest="progress", action="store_false", help="Hide progress bars.")
    s.set_defaults(func=_cmd_select)


def _cmd_eval(args: argparse.Namespace) -> int:
    from evaluation.runner import EvalConfig, print_summary, run_eval   # numpy: not for `rlfh --help`
    cfg = EvalConfig(model=args.model, data=args.data, mode=args.mode, out=args.out, limit=args.limit,
                     batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, system=args.system,
                     dtype=args.dtype, name=args.name, verifier=args.verifier, n_boot=args.n_boot, seed=args.seed,
                     progress=args.progress, reuse=args.reuse, threads=args.threads,
                     confidence=args.confidence, knowledge_samples=args.knowledge_samples,
                     knowledge_temperature=args.knowledge_temperature,
                     abstain_threshold=args.abstain_threshold, abstain_text=args.abstain_text,
                     abstain_model=args.abstain_model, grounding_gate=args.grounding_gate,
                     grade_scope=args.grade_scope,
                     answers_from=args.answers_from)
    try:
        cfg.check()
        summary = run_eval(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"rlfh eval: {e}", file=sys.stderr)
        return 2
    print_summary(summary)
    if summary.get("reused"):
        print(f"(re-used the existing run in {args.out}: same model weights and settings)")
    print(f"answers: {args.out}/answers.jsonl  summary: {args.out}/summary.json")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from evaluation.report import GATES, CompareError, compare_runs, print_report
    try:
        report = compare_runs(args.runs, args.out, run_dir=args.run_dir, n_boot=args.n_boot, seed=args.seed,
                              title=args.title)
    except CompareError as e:
        print(f"rlfh compare: {e}", file=sys.stderr)
        return 2
    print_report(report)
    print(f"report: {args.out}/report.md")
    if args.expect:
        try:
            failures = GATES[args.gate](report, args.expect, args.expect_mode, args.expect_against)
        except CompareError as e:
            print(f"rlfh compare: {e}", file=sys.stderr)
            return 2
        if failures:
            print(f"EXPECTATION NOT MET for {args.expect!r}:")
            for f in failures:
                print(f"  - {f}")
            return 3
        where = f" ({', '.join(args.expect_mode)} mode)" if args.expect_mode else ""
        if args.gate == "grounded":
            print(f"EXPECTATION MET{where}: {args.expect!r} answers significantly more questions right and fewer "
                  "wrong than the reference, by the grounded gate's margins, with higher fact precision and no "
                  "fewer supported statements per answer")
        else:
            print(f"EXPECTATION MET{where}: {args.expect!r} has significantly fewer incorrect answers than every "
                  "other run, with correct answers not significantly fewer, higher accuracy on its attempted answers "
                  "than the reference, and beats random abstention")
    return 0


def _cmd_select(args: argparse.Namespace) -> int:
    if args.limit < 0:
        print("rlfh select: --limit must be >= 0 (0: every question of --data)", file=sys.stderr)
        return 2
    try:
        result = select_checkpoint(args.run_dir, data=args.data, modes=tuple(args.modes or ["closed"]),
                                   limit=args.limit, base=args.base or None, out=args.out or None,
                                   threads=args.threads, batch_size=args.batch_size, progress=args.progress,
                                   abstain_sweep=args.abstain_sweep, abstain_gate=args.abstain_gate)
    except (SelectError, ValueError, FileNotFoundError) as e:
        print(f"rlfh select: {e}", file=sys.stderr)
        return 2
    print_selection(result)
    return 0 if result["selected_passes"] else 3
