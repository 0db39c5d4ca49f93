"""The settings read from the environment only, with no flag: every process's own (:class:`ProcessSettings`),
scripts/train.sh's (:class:`LauncherSettings`) and scripts/demo.sh's gate baseline (:class:`DemoSettings`)."""
from __future__ import annotations

from typing import Literal, Optional

from core.settings.base import Settings, setting


class ProcessSettings(Settings):
    """Settings every process reads from its own environment, wherever it runs (the trainer, a model actor, a
    service replica, ``rlfh eval``), with ``ProcessSettings.load().<name>``. They have no CLI flag: a flag would
    reach only the process it was given to. The trainer hands them on to its Ray workers and actors
    (``core.ray_bootstrap.worker_env``, ``actors.group.actor_env``); on Kubernetes they go in ``train.env``.
    A recipe cannot set them."""

    ROLE = "process"

    cache_dir: str = setting(
        "", "Folder where the embedded model and data are unpacked and converted (empty: ~/.cache/rlfh).",
        env="RLFH_CACHE_DIR", cli=False,
        doc="The container image sets /opt/rlfh/cache, filled at build time.")
    force_cpu: bool = setting(
        False, "Load models on CPU even where a GPU is visible.", env="RLFH_FORCE_CPU", cli=False,
        doc="The trainer also sets it itself in the environment of the actors it places on CPU.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = setting(
        "INFO", "Logging verbosity of every process (`rlfh --log-level` sets it for the command's own process "
        "only).", env="RLFH_LOG_LEVEL", cli=False)


class LauncherSettings(Settings):
    """What ``scripts/train.sh`` itself does around ``rlfh train``: build an abstention warm start first, and end
    with a before/after report on held-out questions. No CLI flag (``rlfh train`` does neither); train.sh reads the
    values ``rlfh config`` validated. A recipe sets them like any other setting (recipes/abstain-closed-book.toml:
    WARM_START=probed, HELDOUT_REPORT=true...)."""

    ROLE = "launcher"

    warm_start: Literal["probed", "graded", "random", "grounded", "none"] = setting(
        "none", "scripts/train.sh: SFT a warm start on the base model's own answers first and train from it: "
        "probed, graded, random, grounded or none (`rlfh baseline warmstart`).", env="WARM_START", cli=False,
        doc="'probed': \"I don't know.\" where a knowledge-boundary probe (8 samples a question) says answering does "
        "not pay at ABSTAIN_OUTCOME_REWARD; 'graded': in place of a WARM_START_SHARE of the gold grader's wrong "
        "answers; 'random': in place of a random WARM_START_SHARE of the closed-book targets; 'grounded': no "
        "abstention, each answer to a passage question followed by the passage sentence that shares the most words "
        "with it (the grounded reply format); 'none': RL from MODEL_PATH as it is. Cached per model and settings.")
    warm_start_share: float = setting(
        0.6, "WARM_START=graded: share of the wrong answers replaced by \"I don't know.\"; random: share of all "
        "closed-book targets; probed: unused.", env="WARM_START_SHARE", cli=False, ge=0.0, le=1.0)
    warm_start_answers: Literal["own", "right", "gold"] = setting(
        "own", "WARM_START=grounded: the answer each target starts with: 'own' (the base model's greedy answer), "
        "'right' (own, wrong ones dropped) or 'gold'.", env="WARM_START_ANSWERS", cli=False,
        doc="'own' reads no gold answer; 'right': the same, with the targets of answers the gold grader rejects "
        "dropped (fine-tuning on its own right answers); 'gold': the data set's right answer (supervised). The warm "
        "start alone is the row that shows what RL added on top.")
    warm_start_questions: int = setting(
        256, "Training questions the warm start answers and is fine-tuned on.", env="WARM_START_QUESTIONS",
        cli=False, ge=1)
    warm_start_type_balance: Optional[float] = setting(
        None, "The warm start's question-type mix (as TYPE_BALANCE; empty: TYPE_BALANCE's value).",
        env="WARM_START_TYPE_BALANCE", cli=False, ge=0.0, le=1.0)
    warm_start_epochs: int = setting(1, "SFT passes of the warm start over its targets.", env="WARM_START_EPOCHS",
                                     cli=False, ge=1)
    warm_start_train_layers: int = setting(
        0, "The warm start's SFT trains only the last N transformer layers (as CRITIC_TRAIN_LAYERS). 0: every "
        "parameter.", env="WARM_START_TRAIN_LAYERS", cli=False, ge=0,
        doc="The input embeddings (and an LM head tied to them) and the layers below stay frozen and the backward "
        "stops at the lowest trained layer (what it saves: docs/PERFORMANCE.md, \"The warm start's SFT by trained "
        "layers\").")
    warm_start_dir: str = setting(
        "", "Where the warm start is built and cached (empty: under RLFH_CACHE_DIR/warmstart/, named by the model "
        "and the settings above).", env="WARM_START_DIR", cli=False)
    probe_recompute: bool = setting(
        False, "Measure the base model again even where cached or shipped measurements match (warm start answers "
        "and probe, held-out report's base answers).", env="PROBE_RECOMPUTE", cli=False,
        doc="Shipped measurements (evaluation/shipped/) are the embedded model's on make train's questions. The "
        "warm start's greedy answers and (WARM_START=probed) probe are made again when the warm start is built (a "
        "cached warm start is re-used), and so are the held-out report's base-model answers.")
    heldout_report: bool = setting(
        False, "scripts/train.sh: after training, compare the base model, the warm start and the trained model on "
        "held-out questions and print the gate verdict.", env="HELDOUT_REPORT", cli=False,
        doc="Greedy answers, closed book and with the passage; the tables, each metric's verdict against base and "
        "warm start (when there is one), and the gate verdict (a gate not met ends the job normally unless "
        "HELDOUT_STRICT).")
    heldout_gate: Literal["selective", "grounded"] = setting(
        "selective", "scripts/train.sh: the held-out report's gate: selective (closed book, fewer wrong answers) or "
        "grounded (with the passage, more right and fewer wrong).", env="HELDOUT_GATE", cli=False,
        doc="selective: closed book, significantly fewer wrong answers without fewer right ones, better than "
        "declining at random (the abstention recipe); grounded: with the passage, more right answers and fewer "
        "wrong ones by set margins, and a higher fact precision with no fewer supported statements per answer (the "
        "grounded recipe; `rlfh compare --gate`).")
    heldout_strict: bool = setting(
        False, "scripts/train.sh: exit with status 3 when the held-out report's gate fails (scripts/demo.sh always "
        "does).", env="HELDOUT_STRICT", cli=False,
        doc="Off: a job that ran to the end exits 0 and its verdict line says whether the gate passed.")
    heldout_data: str = setting(
        "halueval:test", "The held-out report's questions: 'halueval:train|dev|test' or a JSONL file with question, "
        "knowledge and right_answer per line (never the training data).", env="HELDOUT_DATA", cli=False)
    heldout_limit: int = setting(
        300, "Closed-book questions of the held-out report (the selective gate's size). 0 skips the closed-book "
        "half.", env="HELDOUT_LIMIT", cli=False, ge=0,
        doc="docs/EVALUATION.md says how small a size the gate can judge. HELDOUT_GATE=grounded reads only the "
        "passage mode.")
    heldout_evidence_limit: int = setting(
        100, "Questions of the held-out report asked with their passage (the grounded gate's). 0 skips this half "
        "(not with HELDOUT_GATE=grounded).", env="HELDOUT_EVIDENCE_LIMIT", cli=False, ge=0,
        doc="For the selective gate these are the no-regression check; these prompts are several times longer than "
        "closed-book ones.")
    mkl_vendor_shim: Literal["auto", "on", "off"] = setting(
        "auto", "train.sh, demo.sh and run_tests.sh on an AMD CPU: make Intel MKL use its Intel kernels (auto: where "
        "torch uses MKL; on: error where it cannot; off).", env="MKL_VENDOR_SHIM", cli=False,
        doc="A one-function preloaded library makes Intel MKL (torch's fp32 matrix products) use the kernels it uses "
        "on Intel CPUs instead of its slower generic ones (what it buys on this CPU: `rlfh bench blas`; "
        "core/cpu_blas.py). auto: on an AMD CPU whose torch uses MKL, built once with the machine's C compiler "
        "(none: skipped with a note); on: the same, an error where it cannot apply; off: never.")


class DemoSettings(Settings):
    """The gate baseline of ``scripts/demo.sh`` (``DEMO_RECIPE=gate``, recipes/gate.toml): an R-Tuning gate trained
    on the base model and its threshold chosen on dev questions. No CLI flag; demo.sh reads the values ``rlfh config
    --recipe gate`` validated."""

    ROLE = "demo"

    gate_questions: int = setting(
        320, "scripts/demo.sh's gate baseline: closed-book training questions of the R-Tuning gate (`rlfh baseline "
        "rtuning --limit`).", env="GATE_QUESTIONS", cli=False, ge=1)
    gate_type_share: float = setting(
        0.3, "scripts/demo.sh's gate baseline: yes/no and two-option questions are at least this share each of the "
        "gate's (`rlfh baseline rtuning --type-share`).", env="GATE_TYPE_SHARE", cli=False, ge=0, lt=0.5)
    gate_lr: float = setting(3e-5, "scripts/demo.sh's gate baseline: the gate's learning rate.", env="GATE_LR",
                             cli=False, gt=0)
    gate_epochs: int = setting(1, "scripts/demo.sh's gate baseline: the gate's SFT epochs.", env="GATE_EPOCHS",
                               cli=False, ge=1)
    gate_select_data: str = setting(
        "halueval:dev", "scripts/demo.sh's gate baseline: questions the gate's threshold is chosen on (`rlfh select "
        "--abstain-sweep`; never the test split).", env="GATE_SELECT_DATA", cli=False, min_length=1)
    gate_select_limit: int = setting(
        200, "scripts/demo.sh's gate baseline: how many of GATE_SELECT_DATA's questions choose the threshold.",
        env="GATE_SELECT_LIMIT", cli=False, ge=1)
