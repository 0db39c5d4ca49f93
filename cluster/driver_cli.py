"""`rlfh train`: every setting as a flag, environment variables as defaults (flag > env > default).

Only light modules (argparse, the config) are imported here; torch / ray load inside :func:`_cmd_train`.
"""
from __future__ import annotations

import argparse
import sys

from core.config import RLFHConfig, add_recipe_arg
from core.reaper import start_for_this_process

DESCRIPTION = """\
Train a policy with on-policy RL from fine-grained knowledge feedback (RLFH).

One step: the rollout engines sample N answers per prompt; the reward service (Ray Serve, over HTTP)
verifies every atomic statement against the prompt's evidence and returns token-level rewards aligned
to the engines' token offsets; the driver adds the per-token KL penalty to the frozen reference,
computes advantages (GAE with a critic, or a group estimator), runs the PPO epochs on the policy (and
critic) groups, and syncs the new weights into the rollout engines.

With no flags, no environment and no recipe it trains the embedded model and data at the config's
defaults: SmolLM2-135M-Instruct on the HaluEval-QA train split, the evidence verifier, one replica per
group on CPU (an embedded local Ray), for one episode (MAX_STEPS=0). A recipe (--recipe NAME or
RECIPE=NAME: a file of settings in recipes/) sets its settings under the environment and the flags:
`rlfh train --recipe main` is the RL stage of `make train` (`bash scripts/train.sh main` adds the warm
start before it and the held-out report after it). `rlfh config --recipe NAME` shows every value and
where it came from.
Checkpoints go to SAVE_PATH/checkpoints every SAVE_STEP steps, at the end and on Ctrl-C; a run resumes
from the latest checkpoint in CKPT_PATH automatically (same step, same data position).
Outputs: SAVE_PATH/final (HF model), metrics.jsonl, tensorboard/, training_curves.png.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="Train the policy with PPO / GRPO on token-level factuality rewards (the embedded default "
                      "without arguments).",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Every flag is also an environment variable (shown in brackets); `rlfh config` lists the values "
               "the current environment gives them.")
    add_recipe_arg(p)
    RLFHConfig.add_cli_args(p)
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = RLFHConfig.from_args(args)
    from cluster.driver import ActorGroupsFailed, train   # torch and Ray: not for `rlfh --help`
    start_for_this_process()   # if this process is SIGKILLed, what its embedded Ray leaves behind is ended
    try:
        result = train(cfg)
    except ActorGroupsFailed as e:   # an actor kept dying / hanging: say so plainly, no traceback
        print(f"rlfh train: stopped: {e}", file=sys.stderr)
        return 3
    return 0 if result.completed else 130
