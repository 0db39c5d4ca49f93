"""`rlfh bench ...`: benchmarks that print tables. Each bench module registers itself."""
from __future__ import annotations

import argparse

from cluster.cli import add_subcommands

BENCHES = ["bench.verifier", "bench.grader", "bench.informativeness", "bench.reward_order", "bench.judge_speed",
           "bench.rewards", "bench.train", "bench.abstain", "bench.drift", "bench.peer", "bench.scaling", "bench.gen",
           "bench.sft", "bench.blas"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="Benchmarks: verifier accuracy, reward-service throughput, train step time.",
                       description="Benchmarks that print tables. Speed and accuracy goals are measured here.")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH")
    add_subcommands(bsub, BENCHES)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
