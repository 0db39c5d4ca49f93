"""`rlfh bench ...`: benchmarks that print tables. Each bench module registers itself (``add_parser``); they are
imported here, one plain import each, so the import graph sees the command reach every bench."""
from __future__ import annotations

import argparse

from bench import (abstain, blas, copying, drift, gen, grader, informativeness, judge_speed, peer, reward_order,
                   rewards, scaling, sft, train, verifier)

#: The bench modules, in --help order.
BENCHES = [verifier, grader, informativeness, reward_order, judge_speed, rewards, train, abstain, drift, peer, scaling,
           gen, sft, blas, copying]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="Benchmarks: verifier accuracy, reward-service throughput, train step time.",
                       description="Benchmarks that print tables. Speed and accuracy goals are measured here.")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH")
    for module in BENCHES:
        module.add_parser(bsub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
