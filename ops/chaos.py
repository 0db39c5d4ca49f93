"""`rlfh chaos`: inject a real fault into a running `rlfh train` / `rlfh serve`, by PID.

    rlfh chaos list --pid 12345                         # the processes of that run, by role
    rlfh chaos kill policy --pid 12345                  # SIGKILL the policy actor's worker process
    rlfh chaos kill rollout --pid 12345 --signal STOP   # freeze the rollout engine (the driver's timeout fires)
    rlfh chaos kill trainer --pid 12345 --after-step 3 --save-path runs/rlfh   # once step 3 is logged
    rlfh chaos kill node --pid 12345 --node rlfh_rollout   # the node offering that resource: raylet + workers
    rlfh chaos soak --minutes 30 --every 120            # train on a local 4-node cluster under random faults

``--pid`` is the trainer's (or ``rlfh serve``'s) process; the roles are found among its descendants by the
process titles Ray gives actors (``ray::PolicyActor``...). Roles: trainer (the process itself), policy,
rollout, critic, reference (with the colocated layout, policy and rollout are one process), reward-service
(Serve's HTTP proxy and the reward replica), verifier (the verifier replica), redis (a redis-server given by
``--redis-pid``), node (one Ray node of a cluster started under ``--pid``, e.g. by ``ray.cluster_utils`` or
``rlfh chaos soak``: its raylet and every process under it, as when a machine is lost; ``--node`` names it by a
custom resource it offers or by its node id). ``--after-step N`` waits until SAVE_PATH/metrics.jsonl has logged
step N first.

Prints one JSON line: the role, the signal, the PIDs hit, the last step logged then, and the time. Only
processes of the given run are touched (never anything found by name alone). tests/test_faults.py drives
its probes through this command.
"""
from __future__ import annotations

import argparse
import json
import sys

from core.config import ConfigError
from core.help_text import plain_doc
from ops import soak
from ops.faults import (ALL_ROLES, ROLES, SIGNALS, inject, last_step, node_processes,  # noqa: F401 (re-exported)
                         raylet_flags, raylet_is, role_processes)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chaos", help="Inject a real fault (SIGKILL / SIGSTOP by PID) into a running train or "
                                     "serve: the trainer, an actor, the reward service, Redis.",
                       description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = p.add_subparsers(dest="chaos_command", metavar="ACTION", required=True)
    ls = csub.add_parser("list", help="The processes of a run, by role (JSON).")
    ls.add_argument("--pid", type=int, required=True, help="PID of the rlfh train / rlfh serve process.")
    ls.set_defaults(func=_cmd_list)
    k = csub.add_parser("kill", help="Signal a role's processes (SIGKILL unless --signal says otherwise).")
    k.add_argument("role", choices=ALL_ROLES)
    k.add_argument("--pid", type=int, required=True, help="PID of the rlfh train / rlfh serve process.")
    k.add_argument("--signal", default="KILL", choices=list(SIGNALS), help="Signal to send (default KILL).")
    k.add_argument("--after-step", type=int, default=0, help="Wait until this step is in metrics.jsonl first.")
    k.add_argument("--save-path", default="", help="The run's SAVE_PATH (for --after-step).")
    k.add_argument("--redis-pid", type=int, default=None, help="PID of the redis-server (role redis).")
    k.add_argument("--node", default="", help="Role node: a custom resource the node offers (e.g. rlfh_rollout) "
                                              "or its node id.")
    k.add_argument("--wait-s", type=float, default=600.0, help="Give up waiting after this long (default 600).")
    k.set_defaults(func=_cmd_kill)
    so = csub.add_parser("soak", help="Train for a set time on a local multi-node cluster while killing a random "
                                      "actor, replica, Redis or node every N seconds; print what it cost.",
                         description=plain_doc(soak.__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    soak.add_arguments(so)
    so.set_defaults(func=_cmd_soak)


def _cmd_soak(args: argparse.Namespace) -> int:
    try:
        soak.soak(args)
    except (ValueError, ConfigError) as e:
        print(f"rlfh chaos soak: {e}", file=sys.stderr)
        return 2
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    out = {role: [p.pid for p in role_processes(args.pid, role)] for role in ("trainer", *ROLES)}
    print(json.dumps(out))
    return 0


def _cmd_kill(args: argparse.Namespace) -> int:
    try:
        done = inject(args.pid, args.role, args.signal, args.after_step, args.save_path, args.redis_pid, args.wait_s,
                      args.node)
    except (ValueError, LookupError, TimeoutError) as e:
        print(f"rlfh chaos: {e}", file=sys.stderr)
        return 1
    print(json.dumps(done), flush=True)
    return 0 if done["pids"] else 1
