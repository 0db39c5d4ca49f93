"""The `rlfh` command. Each subcommand lives in the package that owns it.

Every module in SUBCOMMANDS exposes ``add_parser(subparsers)``, which registers its parser and sets
``func(args) -> int``. They are imported here, at the top, one plain import each, so the import graph
(tests/test_import_graph.py) sees every arrow from the command to a subcommand. Those modules import only light
things at top level (argparse, config) so ``rlfh --help`` stays fast; torch / ray / transformers are imported
inside ``func``.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from baselines import cli as baseline_cli
from bench import cli as bench_cli
from cluster import driver_cli
from core.config import ConfigError, ProcessSettings
from evaluation import cli as eval_cli
from ops import chaos, show, submit
from reward_service import cli as serve_cli
from rlfh import config_cmd
from verifier_service import cli as verify_cli, judge_cli

#: The subcommand modules, in --help order.
SUBCOMMANDS = [
    driver_cli,         # train
    serve_cli,          # serve
    verify_cli,         # verify
    eval_cli,           # eval, compare, select
    bench_cli,          # bench verifier|rewards|train|...
    baseline_cli,       # baseline rtuning|dpo
    judge_cli,          # judge train|eval
    config_cmd,         # config
    submit,             # submit
    chaos,              # chaos list|kill|soak
    show,               # show (a run's samples.jsonl as an HTML page)
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlfh",
        description="RLFH: on-policy RL from fine-grained knowledge feedback. Trains a language model to state "
                    "only what it knows, with token-level rewards from an atomic-fact verifier, on Ray.",
        epilog="Every setting is also an environment variable; `rlfh config` lists them all.")
    parser.add_argument("--log-level", default=None, choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="Logging verbosity of this command's process [env RLFH_LOG_LEVEL; default: INFO].")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        level = args.log_level or ProcessSettings.load().log_level
    except ConfigError as e:
        print(f"rlfh: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"rlfh {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlfh config | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
