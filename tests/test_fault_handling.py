"""The pieces of the fault handling that need no Ray cluster (the end-to-end probes are in tests/test_faults.py).

- :func:`actors.calls.is_actor_failure`: a dead / hung actor (restart the groups) vs an error of the called
  code (raised as it is: restarting would only repeat it).
- ``Trainer._rewind_logs``: metrics.jsonl and samples.jsonl lose exactly the lines of the steps after the
  checkpoint (and a line cut short by a kill); every other line stays byte for byte; nothing is rewritten when
  there is nothing to drop.
- :mod:`core.reaper`: a process SIGKILLed by PID; what it had started is ended, nothing else.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from ray import exceptions as rx

from actors import calls

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("exc, restart", [
    (rx.ActorDiedError(), True),
    (rx.ActorUnavailableError("unavailable", b"\0" * 16), True),
    (rx.GetTimeoutError("no answer"), True),
    (rx.OwnerDiedError.__new__(rx.OwnerDiedError), True),     # an object whose owner (an actor) died
    (ValueError("bad shapes"), False),
    (RuntimeError("CUDA error: device-side assert"), False),
])
def test_is_actor_failure(exc, restart):
    assert calls.is_actor_failure(exc) is restart


def test_an_error_raised_by_the_actors_code_is_not_a_failure_of_the_actor():
    try:
        raise ValueError("bad shapes")
    except ValueError as e:
        task_err = rx.RayTaskError("train_step", "Traceback ...", e)
    assert not calls.is_actor_failure(task_err)
    # ... but a task that failed because the actor it read from died is
    try:
        raise rx.ActorDiedError()
    except rx.ActorDiedError as e:
        wrapped = rx.RayTaskError("generate", "Traceback ...", e)
    assert calls.is_actor_failure(wrapped)
    outer = RuntimeError("sync failed")
    outer.__cause__ = rx.ActorDiedError()
    assert calls.is_actor_failure(outer)


def test_every_wait_takes_the_runs_timeout_and_the_setting_is_checked():
    from core.config import RLFHConfig
    assert calls.start_timeout_s(RLFHConfig.load({}, actor_timeout_s=900)) == 900.0
    with pytest.raises(ValueError, match="actor_timeout_s|ACTOR_TIMEOUT_S"):
        RLFHConfig.load({}, actor_timeout_s=0)
    err = calls._timeout_error("weight sync: policy.sync_meta", 12.0)
    assert "weight sync: policy.sync_meta" in str(err) and "12s" in str(err) and calls.is_actor_failure(err)


def _trainer(tmp_path):
    from cluster.driver import Trainer
    from core.config import RLFHConfig
    cfg = RLFHConfig.load(environ={}, save_path=str(tmp_path))
    return Trainer(cfg, reward_fn=lambda items: [], show_progress=False)


def test_rewind_logs_drops_exactly_the_steps_after_the_checkpoint(tmp_path):
    t = _trainer(tmp_path)
    metrics = tmp_path / "metrics.jsonl"
    samples = tmp_path / "samples.jsonl"
    rows = [{"step": s, "reward_mean": s / 10, "prompts": [s, s + 1]} for s in range(1, 6)]
    kept_text = "".join(json.dumps(r) + "\n" for r in rows[:3])
    metrics.write_text(kept_text + "".join(json.dumps(r) + "\n" for r in rows[3:]) + '{"step": 6, "rew')  # cut
    samples.write_text("".join(json.dumps({"step": s, "response": f"r{s}{k}"}) + "\n"
                               for s in range(1, 6) for k in range(2)))
    t._rewind_logs(3)
    assert metrics.read_text() == kept_text                         # byte for byte
    assert [r["step"] for r in t.history] == [1, 2, 3]
    assert sorted({json.loads(x)["step"] for x in samples.read_text().splitlines()}) == [1, 2, 3]
    assert not list(tmp_path.glob(".*.tmp-*"))                      # no temporary file left
    # nothing to drop: the file is not rewritten (a new run appends to it)
    ino, mtime = metrics.stat().st_ino, metrics.stat().st_mtime_ns
    t._rewind_logs(3)
    assert (metrics.stat().st_ino, metrics.stat().st_mtime_ns) == (ino, mtime)


def test_reaper_ends_what_a_sigkilled_process_started_and_nothing_else(tmp_path):
    from core.reaper import watch
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    # a "trainer" that starts a child in its own session (as Ray's agents are), then waits
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True); "
            "time.sleep(120)")
    trainer = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(trainer.pid).children():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        child = psutil.Process(trainer.pid).children()[0]
        ended: list[int] = []
        th = threading.Thread(target=lambda: ended.extend(watch(trainer.pid, poll_s=0.2, grace_s=1.0)))
        th.start()
        time.sleep(1.0)                                  # the watcher has seen the child
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=10)
        th.join(timeout=30)
        assert not th.is_alive()
        assert ended == [child.pid]
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert bystander.poll() is None, "the reaper must not touch processes the trainer did not start"
    finally:
        for p in (trainer, bystander):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_rlfh_chaos_kills_the_trainer_once_the_step_is_logged(tmp_path):
    rlfh = Path(sys.executable).with_name("rlfh")
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1}) + "\n")
    try:
        chaos = subprocess.Popen([str(rlfh), "chaos", "kill", "trainer", "--pid", str(trainer.pid), "--after-step",
                                  "2", "--save-path", str(tmp_path), "--wait-s", "60"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)
        assert trainer.poll() is None and chaos.poll() is None, "step 2 is not logged yet: nothing happens"
        with open(metrics, "a") as fh:
            fh.write(json.dumps({"step": 2}) + "\n" + '{"step": 3, "cut sho')
        out, err = chaos.communicate(timeout=60)
        assert chaos.returncode == 0, err
        done = json.loads(out.strip().splitlines()[-1])
        assert done["pids"] == [trainer.pid] and done["signal"] == "KILL" and done["step"] == 2, done
        assert trainer.wait(timeout=10) == -signal.SIGKILL
        # nothing of that role any more: a clear error, exit status 1
        gone = subprocess.run([str(rlfh), "chaos", "kill", "policy", "--pid", str(trainer.pid), "--wait-s", "1"],
                              capture_output=True, text=True, timeout=60)
        assert gone.returncode == 1 and "no policy process" in gone.stderr, gone
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(timeout=10)
