"""Checkpoint files: atomic writes, the latest pointer, rotation, RNG round trip, state round trip (the abstention
controller's typed values included, and trainer_state.json files as earlier versions wrote them).

The actor groups here are small in-process stand-ins that write what the real ranks write (a folder per
call); the real policy/critic round trip over Ray is in tests/test_e2e_train.py.
"""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from cluster.checkpoint import (LATEST, STATE_FILE, TrainerState, latest_checkpoint, list_checkpoints,
                                load_checkpoint, read_state, rotate, save_checkpoint)
from core.abstention import AbstainControl
from core.config import RLFHConfig


class FolderGroup:
    """Runs ``save_hf`` / ``save_checkpoint`` / ``load_checkpoint`` like a one-rank actor group, on files."""

    def __init__(self, role: str, fail_on: str = ""):
        self.role = role
        self.fail_on = fail_on
        self.loaded_from = None

    def run(self, method: str, path: str):
        if method == self.fail_on:
            raise RuntimeError(f"{self.role}.{method} failed (disk full)")
        if method == "save_hf":
            os.makedirs(path, exist_ok=True)
            open(os.path.join(path, "config.json"), "w").write("{}")
        elif method == "save_checkpoint":
            os.makedirs(os.path.join(path, self.role), exist_ok=True)
            open(os.path.join(path, self.role, "optim.bin"), "w").write(self.role)
        elif method == "load_checkpoint":
            if not os.path.isdir(os.path.join(path, self.role)):
                raise FileNotFoundError(path)
            self.loaded_from = path
        return [path]


class Groups:
    def __init__(self, critic: bool = True, fail_on: str = ""):
        self.policy = FolderGroup("policy", fail_on)
        self.critic = FolderGroup("critic") if critic else None


def test_save_writes_a_complete_checkpoint_and_points_latest_at_it(tmp_path):
    cfg = RLFHConfig.load(save_path=str(tmp_path))
    g = Groups()
    p = save_checkpoint(tmp_path / "ck", TrainerState(step=3, epoch=1, index=16, skipped_batches=2), g, cfg, 3)
    assert p.name == "global_step_00003"
    for rel in ("policy_hf/config.json", "critic_hf/config.json", "state/policy/optim.bin", "state/critic/optim.bin",
                "trainer_state.json", "rng_state.pt", "config.json"):
        assert (p / rel).exists(), rel
    assert (tmp_path / "ck" / LATEST).read_text().strip() == "global_step_00003"
    assert json.loads((p / "config.json").read_text())["save_path"] == str(tmp_path)
    st = read_state(p)
    assert (st.step, st.epoch, st.index, st.skipped_batches) == (3, 1, 16, 2)
    assert not [x for x in (tmp_path / "ck").iterdir() if x.name.startswith(".tmp")]


def test_a_failed_save_leaves_no_checkpoint_behind(tmp_path):
    cfg = RLFHConfig.load(save_path=str(tmp_path))
    root = tmp_path / "ck"
    save_checkpoint(root, TrainerState(step=1), Groups(), cfg, 3)
    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(root, TrainerState(step=2), Groups(fail_on="save_checkpoint"), cfg, 3)
    assert [p.name for p in list_checkpoints(root)] == ["global_step_00001"]
    assert latest_checkpoint(root).name == "global_step_00001"


def test_rotation_keeps_the_newest_max_ckpt_num(tmp_path):
    cfg = RLFHConfig.load(save_path=str(tmp_path))
    root = tmp_path / "ck"
    for step in (2, 4, 6, 8, 10):
        save_checkpoint(root, TrainerState(step=step), Groups(critic=False), cfg, max_keep=2)
    assert [p.name for p in list_checkpoints(root)] == ["global_step_00008", "global_step_00010"]
    assert latest_checkpoint(root).name == "global_step_00010"
    assert rotate(root, 1)[0].name == "global_step_00008"


def test_latest_falls_back_to_the_newest_complete_checkpoint(tmp_path):
    cfg = RLFHConfig.load(save_path=str(tmp_path))
    root = tmp_path / "ck"
    assert latest_checkpoint(root) is None
    save_checkpoint(root, TrainerState(step=5), Groups(), cfg, 3)
    save_checkpoint(root, TrainerState(step=7), Groups(), cfg, 3)
    (root / LATEST).write_text("global_step_00099\n")          # stale pointer
    (root / "global_step_00100").mkdir()                        # incomplete (no trainer_state.json)
    assert latest_checkpoint(root).name == "global_step_00007"


def test_load_restores_state_groups_and_rng(tmp_path):
    cfg = RLFHConfig.load(save_path=str(tmp_path))
    g = Groups()
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    p = save_checkpoint(tmp_path / "ck", TrainerState(step=4, epoch=0, index=32, samples_seen=64), g, cfg, 3)
    expect = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    g2 = Groups()
    st = load_checkpoint(p, g2)
    assert (st.step, st.index, st.samples_seen) == (4, 32, 64)
    assert g2.policy.loaded_from == str(p / "state") and g2.critic.loaded_from == str(p / "state")
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expect


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a checkpoint"):
        load_checkpoint(tmp_path, Groups())
    cfg = RLFHConfig.load(save_path=str(tmp_path))
    p = save_checkpoint(tmp_path / "ck", TrainerState(step=1), Groups(critic=False), cfg, 3)
    with pytest.raises(FileNotFoundError, match="no critic state.*ADVANTAGE_ESTIMATOR=gae"):
        load_checkpoint(p, Groups(critic=True))


def test_the_abstention_controller_round_trips_in_the_file_format_it_always_had(tmp_path):
    """The controller's values are a typed field of the state; trainer_state.json keeps them under "extra" by the
    keys it has used since the controller was added, so the files written before and after read the same."""
    cfg = RLFHConfig.load(save_path=str(tmp_path))
    state = TrainerState(step=3, epoch=1, index=8, samples_seen=48, wall_time_s=12.5,
                         abstain_control=AbstainControl(margin=0.45))
    p = save_checkpoint(tmp_path / "ck", state, Groups(critic=False), cfg, 3)
    # the bytes the untyped state wrote (dataclasses.asdict of step ... wall_time_s, extra)
    assert (p / STATE_FILE).read_text() == json.dumps(
        {"step": 3, "epoch": 1, "index": 8, "skipped_batches": 0, "samples_seen": 48, "wall_time_s": 12.5,
         "extra": {"abstain_margin": 0.45}}, indent=2)
    assert read_state(p) == state
    assert load_checkpoint(p, Groups(critic=False)).abstain_control == AbstainControl(margin=0.45)
    assert state.extra == {"abstain_margin": 0.45} and TrainerState().extra == {}


@pytest.mark.parametrize("extra, expect", [
    ({"abstain_price": -0.35}, AbstainControl(price=-0.35)),                  # fixed rule + ABSTAIN_TARGET_RATE
    ({"abstain_margin": 0.15}, AbstainControl(margin=0.15)),                  # answer-mean + ABSTAIN_TARGET_RATE
    ({"abstain_price": 0.9, "abstain_margin": -0.1}, AbstainControl(0.9, -0.1)),   # the rule changed on resume
    ({}, AbstainControl()),                                                   # no controller
    (None, AbstainControl()),                                                 # before the controller: no "extra"
])
def test_an_earlier_trainer_state_file_loads(tmp_path, extra, expect):
    d = {"step": 7, "epoch": 0, "index": 28, "skipped_batches": 1, "samples_seen": 112, "wall_time_s": 3.0}
    if extra is not None:
        d["extra"] = extra
    (tmp_path / STATE_FILE).write_text(json.dumps(d, indent=2))
    st = read_state(tmp_path)
    assert (st.step, st.index, st.skipped_batches, st.samples_seen, st.abstain_control) == (7, 28, 1, 112, expect)
    assert st.to_dict() == {**d, "extra": extra or {}}   # written back as it was read
