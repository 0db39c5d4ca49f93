"""Real processes by PID, for the tests that kill them: a command's process tree, what of it is still alive, and
cleaning up only what a test started."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psutil


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every process below it (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def left_after(procs: list[psutil.Process], timeout_s: float) -> list[tuple[int, str]]:
    """(pid, name) of ``procs`` still alive after waiting up to ``timeout_s`` for them to go."""
    deadline = time.monotonic() + timeout_s
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [(p.pid, p.name()) for p in alive(procs)]


def kill_started(proc: subprocess.Popen, started: list[psutil.Process]) -> None:
    """Kill the command and whatever it started that is still alive (only what this test started)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    for p in alive(started):
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file a run is still writing (none when it does not exist yet)."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
