"""The `rlfh` command. Each subcommand lives in the package that owns it.

Every module listed in SUBCOMMANDS exposes ``add_parser(subparsers)`` which
registers its parser and sets ``func(args) -> int``. Those modules import only
light things at top level (argparse, config) so ``rlfh --help`` stays fast;
torch / ray / transformers are imported inside ``func``.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys

# (module, required) in --help order. A module that is not there yet is skipped
# so a partial checkout still has a working CLI.
SUBCOMMANDS = [
    "cluster.driver_cli",        # train
    "reward_service.cli",        # serve
    "verifier_service.cli",      # verify
    "evaluation.cli",            # eval, compare
    "bench.cli",                 # bench verifier|rewards|train
    "baselines.cli",             # baseline rtuning|dpo
    "baselines.judge_cli",       # judge train|eval
    "core.config",            # config
    "ops.submit",                # submit
    "ops.chaos",                 # chaos list|kill
    "ops.show",                  # show (a run's samples.jsonl as an HTML page)
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
    add_subcommands(sub, SUBCOMMANDS)
    return parser


def plain_doc(doc: str) -> str:
    """A module docstring as ``--help`` text: ````code```` becomes 'code', ``:func:`name``` becomes name."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc)
    return text.replace("``", "'")


def add_subcommands(sub: argparse._SubParsersAction, module_names: list[str]) -> None:
    """Call ``add_parser(sub)`` of every module in ``module_names`` (in order).

    A module that is not in this checkout is skipped; an import error *inside* a module is raised.
    """
    for mod_name in module_names:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name and mod_name.startswith(e.name):
                continue
            raise
        mod.add_parser(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from core.config import ConfigError, ProcessSettings
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
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
