"""Write an example run's samples.jsonl and its `rlfh show` page, from real parts: HaluEval-QA train items, answers
written by hand in the policy's style (right, partly wrong, hedged, abstaining), the verifier (VERIFIER_BACKEND,
default evidence), the reward service's token-reward math and the embedded model's tokenizer. The records are the
ones a training run writes (cluster.samples_log.sample_record).

    .venv/bin/python scripts/show_example.py OUT_DIR [--backend evidence|judge]

docs/img/show.png is a headless-Chromium screenshot of OUT_DIR/samples.html (docs/EVALUATION.md, "Looking at what
the verifier said").
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.types import RolloutSample, token_offsets  # noqa: E402  (the repository on sys.path first)
from cluster.samples_log import sample_record  # noqa: E402
from core.config import ServiceSettings  # noqa: E402
from core.data import load_halueval  # noqa: E402
from core.model_loader import load_tokenizer, resolve_model_path  # noqa: E402
from core.verify_schema import VerifyRequest  # noqa: E402
from ops.show import build  # noqa: E402
from reward_service.token_rewards import RewardSettings, compute_token_rewards  # noqa: E402
from verifier_service.core import Verifier  # noqa: E402

#: (step, HaluEval train question prefix, prompt mode, the handwritten response)
EXAMPLES = [
    (1, "The Oberoi family is part of", "evidence",
     "The Oberoi family is an Indian family famous for its hotels. The Oberoi Group has its head office in Mumbai."),
    (1, "Which magazine was started first", "evidence",
     "Arthur's Magazine was started first. It was published in Philadelphia from 1844 to 1846, while First for "
     "Women is published by Bauer Media Group."),
    (1, "The Dutch-Belgian television series", "closed", "I don't know."),
    (2, "The Oberoi family is part of", "evidence",
     "The Oberoi Group, the Oberoi family's hotel company, has its head office in Delhi."),
    (2, "Which magazine was started first", "closed", "First for Women was started first, in 1844."),
    (2, "The Dutch-Belgian television series", "evidence",
     "Het Huis Anubis first aired in September 2006. I think its last episode was broadcast in 2012."),
]


def build_records(backend: str) -> list[dict]:
    items = load_halueval("train")
    tok = load_tokenizer(resolve_model_path("smollm2-135m-instruct"))
    cfg = ServiceSettings.load()
    verifier, settings = Verifier(cfg, backend=backend), RewardSettings.from_config(cfg)
    records = []
    for step, prefix, mode, response in EXAMPLES:
        item = next(it for it in items if it.question.startswith(prefix))
        ids = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        text, offsets = token_offsets(tok, ids)
        sample = RolloutSample(prompt_index=0, prompt_token_ids=[], response_token_ids=ids, response_text=text,
                               token_offsets=offsets, finish_reason="stop")
        verified = verifier.verify(VerifyRequest(question=item.question, response=text, materials=item.knowledge,
                                                 gold_answer=item.right_answer))
        reward = compute_token_rewards(verified, offsets, len(text), settings)
        reward.verification = verified
        records.append(sample_record(step, item, mode, sample, reward))
    return records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="Folder for samples.jsonl and samples.html.")
    ap.add_argument("--backend", default="evidence", help="Verifier backend (default evidence).")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.jsonl", "w", encoding="utf-8") as fh:
        for rec in build_records(args.backend):
            fh.write(json.dumps(rec) + "\n")
    page, shown, _ = build(out)
    print(f"wrote {out / 'samples.jsonl'} and {page} ({shown} rollouts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
