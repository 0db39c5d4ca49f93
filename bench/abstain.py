"""`rlfh bench abstain`: how often a model says "I don't know" by itself, before any training.

On-policy RL can only reinforce what the policy samples. This counts, for each system prompt and prompt mode,
how many of the model's own answers the training verifier reads as abstentions (pure "I don't know", no
content left): greedy over ``--questions`` train questions, and sampled ``--samples`` times each at
``--temperature``. When the sampled rate is near zero, train with ABSTAIN_SAMPLES=1 or a warm start (WARM_START).
"""
from __future__ import annotations

import argparse

from core.data import load_items
from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
from core.prompts import SYSTEM_PROMPTS, render_prompt
from verifier_service.text import is_abstention_text

# a stronger wording than the may-abstain baseline, to see whether prompting alone gets abstentions sampled
STRONG_SYSTEM = ("You are a helpful assistant. Answer the question in one short sentence. If you do not know the "
                 "answer for certain, reply only: I don't know.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("abstain", help="How often the model abstains by itself (greedy and sampled), per system "
                                       "prompt and prompt mode.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="Model: 'smollm2-135m-instruct' (embedded) or a HF folder. Default: the embedded model.")
    p.add_argument("--data", default="halueval:train", help="Questions: a split or JSONL (default halueval:train).")
    p.add_argument("--questions", type=int, default=24, help="Questions per cell (default 24).")
    p.add_argument("--samples", type=int, default=8, help="Samples per question (default 8).")
    p.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (default 1.0).")
    p.add_argument("--max-new-tokens", type=int, default=30, help="Answer length cap (default 30).")
    p.add_argument("--seed", type=int, default=0, help="Sampling seed (default 0).")
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    for name in ("questions", "samples", "max_new_tokens"):
        if getattr(args, name) < 1:
            print(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
            return 2
    if not args.temperature > 0:
        print(f"--temperature must be > 0, got {args.temperature}")
        return 2
    import torch
    from rich.console import Console
    from rich.table import Table

    model_dir = resolve_model_path(args.model)
    tok = load_tokenizer(model_dir)
    tok.padding_side = "left"
    model = load_causal_lm(model_dir).eval()
    items = load_items(args.data, limit=args.questions)
    systems = dict(SYSTEM_PROMPTS, strong=STRONG_SYSTEM)
    table = Table(title=f"abstentions by the model itself ({len(items)} questions, {args.samples} samples each "
                        f"at T={args.temperature})")
    for col in ("system prompt", "mode", "greedy", "sampled", "example"):
        table.add_column(col)
    for sname, system in systems.items():
        for mode in ("closed", "evidence"):
            texts = [render_prompt(tok, it.question, it.knowledge_text, mode, system) for it in items]
            enc = tok(texts, return_tensors="pt", padding=True)
            n_in = enc["input_ids"].shape[1]
            torch.manual_seed(args.seed)
            with torch.no_grad():
                greedy = model.generate(**enc, do_sample=False, max_new_tokens=args.max_new_tokens,
                                        pad_token_id=tok.pad_token_id)
                sampled = model.generate(**enc, do_sample=True, temperature=args.temperature, top_p=1.0,
                                         max_new_tokens=args.max_new_tokens, num_return_sequences=args.samples,
                                         pad_token_id=tok.pad_token_id)
            g = [is_abstention_text(t) for t in tok.batch_decode(greedy[:, n_in:], skip_special_tokens=True)]
            s_text = tok.batch_decode(sampled[:, n_in:], skip_special_tokens=True)
            s = [t for t in s_text if is_abstention_text(t)]
            table.add_row(sname, mode, f"{sum(g)} / {len(g)}", f"{len(s)} / {len(s_text)}",
                          repr(s[0][:40]) if s else "")
    Console().print(table)
    return 0
