"""Clean up after a trainer that was killed outright (SIGKILL, the OOM killer): ``python -m core.reaper PID``.

A trainer that exits normally, or on Ctrl-C / SIGTERM, shuts its embedded Ray down itself. One that is
SIGKILLed cannot: Ray's GCS and raylet share its fate and the workers follow the raylet, but the dashboard
agent and the runtime-env agent outlive it (they try to report the raylet's death to a GCS that is gone),
re-parented to PID 1, holding ports and memory. ``rlfh train`` therefore starts this small watcher in its
own session: while the trainer lives it records the trainer's descendants (PID and start time, so a reused
PID is never touched); once the trainer is gone it gives them ``GRACE_S`` to exit on their own, then
SIGTERMs and finally SIGKILLs whatever of *those* processes is left, and exits. It touches nothing else.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

POLL_S = 2.0
#: Seconds the dead trainer's processes get to exit on their own before SIGTERM (then 5 s more before SIGKILL).
#: Ray's workers exit on their own once the raylet is gone; the dashboard and runtime-env agents do not (they
#: retry a GCS that is gone), so a longer grace only keeps their ports and memory held longer.
GRACE_S = 3.0


def _gone(p) -> bool:
    import psutil
    try:
        return (not p.is_running()) or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def watch(pid: int, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> list[int]:
    """Record ``pid``'s descendants until it is gone, then end the ones still running. Returns the PIDs ended."""
    import psutil
    me = os.getpid()
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return []
    seen: dict[int, float] = {}
    while not _gone(parent):
        try:
            for c in parent.children(recursive=True):
                if c.pid != me and c.pid not in seen:
                    try:
                        seen[c.pid] = c.create_time()
                    except psutil.NoSuchProcess:
                        pass
        except psutil.NoSuchProcess:
            break
        time.sleep(poll_s)

    def survivors() -> list:
        out = []
        for p, t in seen.items():
            try:
                proc = psutil.Process(p)
                if proc.create_time() == t and not _gone(proc):
                    out.append(proc)
            except psutil.NoSuchProcess:
                pass
        return out

    deadline = time.monotonic() + grace_s
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.5)
    left = survivors()
    for proc in left:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(left, timeout=5)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return [p.pid for p in left]


def start_for_this_process() -> subprocess.Popen | None:
    """Start the watcher for this process (in its own session: Ctrl-C to the trainer's terminal spares it)."""
    try:
        return subprocess.Popen([sys.executable, "-m", "core.reaper", str(os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:   # pragma: no cover - best effort
        return None


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: python -m core.reaper PID")
    watch(int(sys.argv[1]))
