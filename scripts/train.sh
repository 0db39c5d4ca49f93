#!/usr/bin/env bash
# RLFH training launch, driven by environment variables (the RLFH paper's names).
#
#   bash scripts/train.sh                      # the embedded default: SmolLM2-135M-Instruct on HaluEval-QA
#                                              # (train split), evidence verifier behind the Ray Serve reward
#                                              # service, one replica per group on CPU, an embedded local Ray
#   MODEL_PATH=/models/qwen SAVE_PATH=runs/q ACTOR_NUM_GPUS_PER_NODE=4 VLLM_NUM_ENGINES=2 bash scripts/train.sh
#   bash scripts/train.sh --max-steps 5        # extra arguments go to `rlfh train` (flags beat the environment)
#
# Every setting is an environment variable; the ones RLFH's own train script uses:
#   MODEL_PATH  SAVE_PATH  CKPT_PATH  PROMPT_DATA  PROMPT_MODE  MAX_SAMPLES  GENERATE_MAX_LEN
#   GRANULARITY  REWARD_PLACEMENT  VERIFICATION_MAP  INFORMATIVE_MAP  INFO_WEIGHT  TRUTH_WEIGHT  REWARD_CLIP
#   VERIFIER_BACKEND  MODEL_URL  ANNOTATE_MODEL  REWARD_URL  REDIS_URL
#   ACTOR_LR  CRITIC_LR  KL_COEF  ADVANTAGE_ESTIMATOR  NUM_EPISODES  MAX_STEPS  MAX_EPOCHS
#   ROLLOUT_BATCH_SIZE  N_SAMPLES_PER_PROMPT  TRAIN_BATCH_SIZE  MICRO_TRAIN_BATCH_SIZE  MICRO_ROLLOUT_BATCH_SIZE
#   ACTOR_NUM_NODES  ACTOR_NUM_GPUS_PER_NODE  CRITIC_NUM_NODES  CRITIC_NUM_GPUS_PER_NODE
#   REF_NUM_NODES  REF_NUM_GPUS_PER_NODE  VLLM_NUM_ENGINES  VLLM_TENSOR_PARALLEL_SIZE  COLOCATE_ALL_MODELS
#   SAVE_STEP  MAX_CKPT_NUM  USE_TENSORBOARD  RAY_ADDRESS  DASHBOARD_PORT  SERVE_PORT
# `rlfh config` lists all of them with their meaning; a bad value stops here with the variable named.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh clone: build the environment (pinned dependencies, embedded model and data) first.
if [[ ! -x .venv/bin/rlfh ]]; then
  echo "[train.sh] .venv is missing: running 'make setup' first"
  make setup
fi
RLFH=.venv/bin/rlfh
PY=.venv/bin/python

# Local embedded Ray: every port on loopback, Ray token auth on (Ray 2.60's default: the token is created once in
# ~/.ray/auth_token; RAY_AUTH_MODE=disabled turns it off, which lets any local user submit jobs), no usage stats;
# CPU DeepSpeed when there is no GPU.
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"
export TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
if ! command -v nvidia-smi >/dev/null 2>&1; then export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"; fi

# The embedded default (SmolLM2-135M on CPU, local Ray) runs the abstention recipe (docs/DEMO.md: what it is,
# how it was found, what each attempt gave, and how it did on held-out questions). On a 2-core AMD EPYC
# (docs/DEMO.md "Sessions 23-31"), with AVX512-BF16 / with AVX2 only (fp32): the warm start once (cached) 10 / 12
# min (the 3-epoch SFT; the base model's probe and greedy answers ship in evaluation/shipped/, making them again
# takes 10 / 13 min), RL 60 / 105 s a step plus about 15 / 26 s per dev evaluation, 6 steps when it stops early,
# the held-out report 2 / 3.1 min (the base model's answers ship too): about 21 / 29 min from a fresh clone
# (W32's stages projected / W48 measured), 10 / 17 min once the warm start is cached:
#   1. warm start (cached): a knowledge-boundary probe samples 8 answers per training question and grades them
#      (shipped for this model and these questions; PROBE_RECOMPUTE=1 samples it again);
#      SFT (3 epochs) on the model's own greedy answers, with "I don't know." as the target exactly where fewer
#      than (1 + OUTCOME_ABSTAIN) / 2 of the samples were right (where answering does not pay under the reward
#      below); its question mix leans on yes/no and two-option questions (WARM_START_TYPE_BALANCE), so the
#      model sees both answers and declines of every type;
#   2. RL: RLOO on its own samples plus one "I don't know." candidate per group, TruthRL's ternary outcome reward
#      (right +1, declined -0.6, wrong -1; judged against the gold answer), a KL anchor to the warm start, 15% of
#      the questions with their passage; greedy answers to 64 closed-book dev questions every DEV_EVAL_STEP steps,
#      and the final model is the dev step with the most right answers among those with at most 25% wrong
#      (FINAL_MODEL=best, DEV_SELECT_MAX_INCORRECT); training stops at the first dev evaluation that ranks below
#      it (EARLY_STOP_PATIENCE);
#   3. held-out report: base vs trained, greedy, on test questions the run never saw, HELDOUT_LIMIT (300) closed
#      book and HELDOUT_EVIDENCE_LIMIT (100) with the passage: correct / incorrect / declined, accuracy on
#      attempted, the random-abstention row, paired tests and the gate verdict (the base model's answers to
#      them ship in evaluation/shipped/ too).
# Only when MODEL_PATH is the embedded model and no GPU or remote cluster is asked for; a value set in the
# environment (or a flag) always wins. Other models get the same steps with WARM_START=probed HELDOUT_REPORT=1.
BASE_MODEL="${MODEL_PATH:-smollm2-135m-instruct}"
recipe=none
if [[ "$BASE_MODEL" == "smollm2-135m-instruct" && "${ACTOR_NUM_GPUS_PER_NODE:-0}" == "0" \
      && -z "${RAY_ADDRESS:-}" ]]; then
  recipe=embedded
  export PROMPT_DATA="${PROMPT_DATA:-halueval:train}"
  export PROMPT_MODE="${PROMPT_MODE:-mixed}" EVIDENCE_SHARE="${EVIDENCE_SHARE:-0.15}" TYPE_BALANCE="${TYPE_BALANCE:-0.25}"
  export ADVANTAGE_ESTIMATOR="${ADVANTAGE_ESTIMATOR:-rloo}" KL_COEF="${KL_COEF:-0.1}" TEMPERATURE="${TEMPERATURE:-0.7}"
  export OUTCOME_REWARD="${OUTCOME_REWARD:-ternary}" OUTCOME_JUDGE="${OUTCOME_JUDGE:-gold}"
  export OUTCOME_ABSTAIN="${OUTCOME_ABSTAIN:--0.6}" TOKEN_REWARD_WEIGHT="${TOKEN_REWARD_WEIGHT:-0}"
  export ABSTAIN_SAMPLES="${ABSTAIN_SAMPLES:-1}"
  export ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-16}" N_SAMPLES_PER_PROMPT="${N_SAMPLES_PER_PROMPT:-4}"
  export TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-64}" MICRO_TRAIN_BATCH_SIZE="${MICRO_TRAIN_BATCH_SIZE:-8}"
  export ACTOR_LR="${ACTOR_LR:-5e-6}" MAX_STEPS="${MAX_STEPS:-12}" GENERATE_MAX_LEN="${GENERATE_MAX_LEN:-40}"
  export DEV_EVAL_STEP="${DEV_EVAL_STEP:-2}" DEV_EVAL_SIZE="${DEV_EVAL_SIZE:-64}" DEV_EVAL_TYPE_SHARE="${DEV_EVAL_TYPE_SHARE:-0.25}"
  # closed book only: the kept step is chosen on closed-book dev answers, and the passage half (prompts about five
  # times longer) took 55 of each evaluation's 85 s on an AVX2 CPU; for W38 / W36 / W37 (seeds 42, 7, 1) it keeps
  # and stops at the same steps as closed+evidence did (docs/DEMO.md "Session 27"); set closed+evidence to watch both
  export DEV_EVAL_MODES="${DEV_EVAL_MODES:-closed}" FINAL_MODEL="${FINAL_MODEL:-best}"
  export DEV_SELECT_MAX_INCORRECT="${DEV_SELECT_MAX_INCORRECT-0.25}"   # empty: by the ternary dev score
  # stop at the first dev evaluation below the best (a tie does not count): replayed on the dev logs of W41 / W36 /
  # W37 (seeds 42, 7, 1) it stops at steps 6 / 6 / 10 and keeps steps 4 / 4 / 8, the steps patience 2 kept at steps
  # 8 / 8 / 12 (docs/DEMO.md "Session 28"): the same models, two RL steps and a dev evaluation sooner
  export EARLY_STOP_PATIENCE="${EARLY_STOP_PATIENCE:-1}"
  # train.sh's own steps (core/config.py, LauncherSettings): the warm start this recipe trains from, the report
  export WARM_START="${WARM_START:-probed}" WARM_START_TYPE_BALANCE="${WARM_START_TYPE_BALANCE:-0.4}"
  export WARM_START_EPOCHS="${WARM_START_EPOCHS:-3}" HELDOUT_REPORT="${HELDOUT_REPORT:-1}"
fi

# The effective configuration: every setting whose value differs from its default. A bad value stops here, train.sh's
# own settings (WARM_START*, PROBE_RECOMPUTE, HELDOUT_*) included: `rlfh config` checks and documents them all.
if ! current=$("$RLFH" config --format env); then
  echo "[train.sh] bad configuration (see above); \`rlfh config\` lists every setting and what it accepts" >&2
  exit 2
fi
defaults=$(env -i PATH="$PATH" HOME="$HOME" "$RLFH" config --format env)
changed=$(diff <(echo "$defaults") <(echo "$current") | sed -n 's/^> /  /p' \
  | sed -E 's/^(  (REWARD_API_TOKEN|MODEL_API_KEY)=).+/\1***/' || true)
echo "[train.sh] effective configuration (settings that differ from the defaults):"
echo "${changed:-  (none: the embedded default)}"
# a setting's validated value (its default where the environment does not set it): the defaults live in one place
setting() { sed -n "s/^$1=//p" <<<"$current" | head -n 1; }
WARM_START=$(setting WARM_START)
HELDOUT_REPORT=$(setting HELDOUT_REPORT)
SAVE_PATH=$(setting SAVE_PATH)
cache=$(setting RLFH_CACHE_DIR); cache=${cache:-$HOME/.cache/rlfh}
# On an AMD CPU, MKL's Intel kernels for torch's fp32 products (MKL_VENDOR_SHIM, core/cpu_blas.py): every stage
# below and the embedded Ray's actors inherit the preload
preload=$("$PY" -m core.cpu_blas preload --mode "$(setting MKL_VENDOR_SHIM)" 2> >(sed 's/^/[train.sh] /' >&2)) || exit 2
if [[ -n "$preload" ]]; then export LD_PRELOAD="$preload"; fi
stage_times=()   # "name seconds" of each stage, printed at the end (where a slow CPU spends the run)
stage_start=$SECONDS
# The CPU's name says little (both kinds of AMD EPYC measured here are "AMD EPYC"); native bf16 halves the run's
# time: the trainer computes in bf16 autocast there and in fp32 elsewhere (TRAIN_AUTOCAST, ROLLOUT_DTYPE: auto),
# by the rule in actors.base.cpu_has_fast_bf16, asked here too
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | xargs || true)
isa=$("$PY" -c "from actors.base import cpu_has_fast_bf16 as f; print('native bf16' if f() else 'no native bf16: fp32')" \
      2>/dev/null || echo "bf16 support unknown")
if [[ "$WARM_START" != "none" ]]; then
  # cached per model and settings: a second run re-uses the folder (rlfh baseline warmstart checks the settings)
  # the warm start uses the RL's own prompts, seed, sampling temperature and abstention price
  share="s$(setting WARM_START_SHARE)" where=random
  [[ "$WARM_START" == "graded" ]] && where=wrong
  # probed: k sampled answers per question decide; declining where answering does not pay at OUTCOME_ABSTAIN
  [[ "$WARM_START" == "probed" ]] && where=probed share="p$(setting OUTCOME_ABSTAIN)"
  questions=$(setting WARM_START_QUESTIONS) epochs=$(setting WARM_START_EPOCHS) trained=$(setting WARM_START_TRAIN_LAYERS)
  layers=""   # every layer trained (0): no tag, so the folders cached before WARM_START_TRAIN_LAYERS existed still match
  if [[ "$trained" != 0 ]]; then layers="-l$trained"; fi
  types=$(setting WARM_START_TYPE_BALANCE); types=${types:-$(setting TYPE_BALANCE)}
  evidence=$(setting EVIDENCE_SHARE) seed=$(setting SEED)
  WARM_DIR=$(setting WARM_START_DIR)
  WARM_DIR=${WARM_DIR:-$cache/warmstart/$(basename "$BASE_MODEL")-$WARM_START-q$questions-$share-t$types-ep$epochs$layers-e$evidence-seed$seed}
  echo "[train.sh] 1/3 warm start ($WARM_START -> \"I don't know.\") -> $WARM_DIR"
  echo "[train.sh]     built once per model and settings, then cached (the embedded default: 10-12 min on 2 cores)"
  if [[ "$recipe" == "embedded" ]]; then
    # a 2-core AMD EPYC, docs/PERFORMANCE.md "make train": W32 (native bf16, projected), W48 and W45-W47's hours (fp32)
    if [[ "$isa" == "native bf16" ]]; then fresh=20 cached=10; else fresh=26-31 cached=17; fi
    [[ -f "$WARM_DIR/config.json" ]] && minutes=$cached || minutes=$fresh
    echo "[train.sh]     the embedded default takes about $minutes min on 2 cores of a CPU like this one ($isa)"
  fi
  "$RLFH" --log-level WARNING baseline warmstart --model "$BASE_MODEL" --data "$(setting PROMPT_DATA)" \
    --limit "$questions" --type-share "$types" --epochs "$epochs" --mode "$(setting PROMPT_MODE)" \
    --evidence-share "$evidence" --abstain-share "$(setting WARM_START_SHARE)" --seed "$seed" \
    --abstain-where "$where" --abstain-price "$(setting OUTCOME_ABSTAIN)" --probe-temperature "$(setting TEMPERATURE)" \
    --gen-batch-size 32 --micro-batch-size 8 --train-layers "$trained" --out "$WARM_DIR" \
    $([[ "$(setting PROBE_RECOMPUTE)" == "true" ]] && echo --recompute-probe)   # progress bars: probe, answer, SFT
  export MODEL_PATH="$WARM_DIR"
  stage_times+=("warm start $((SECONDS - stage_start)) s"); stage_start=$SECONDS
fi

if [[ "$HELDOUT_REPORT" != "true" ]]; then
  exec "$RLFH" train "$@"   # nothing to do afterwards: the trainer replaces this shell (signals reach it directly)
fi
echo "[train.sh] 2/3 RL: rlfh train -> $SAVE_PATH"
"$RLFH" train "$@"
stage_times+=("RL $((SECONDS - stage_start)) s"); stage_start=$SECONDS

if [[ "$HELDOUT_REPORT" == "true" ]]; then
  HELDOUT_DATA=$(setting HELDOUT_DATA) HELDOUT_LIMIT=$(setting HELDOUT_LIMIT)
  HELDOUT_EVIDENCE_LIMIT=$(setting HELDOUT_EVIDENCE_LIMIT)
  TRAINED="$SAVE_PATH/final"
  if [[ ! -f "$TRAINED/config.json" ]]; then
    echo "[train.sh] no final model at $TRAINED: skipping the held-out report" >&2
    exit 1
  fi
  echo "[train.sh] 3/3 held-out report: base vs trained, greedy, questions of $HELDOUT_DATA the run never trained on:" \
       "$HELDOUT_LIMIT closed book, $HELDOUT_EVIDENCE_LIMIT with the passage"
  RUNS=()
  for mode in closed evidence; do
    limit=$HELDOUT_LIMIT
    [[ "$mode" == "evidence" ]] && limit=$HELDOUT_EVIDENCE_LIMIT
    for spec in "base|$BASE_MODEL" "trained|$TRAINED"; do
      IFS='|' read -r name model <<<"$spec"
      out="$SAVE_PATH/heldout/${name}_${mode}"
      # the base model's answers do not change between runs: cached (`rlfh eval --reuse` checks weights + settings;
      # it reads greedy answers from $RLFH_CACHE_DIR/answers, or for the embedded model at these settings the
      # shipped ones in evaluation/shipped/, which PROBE_RECOMPUTE=1 makes again)
      reuse=--reuse
      if [[ "$name" == "base" ]]; then
        out="$cache/heldout/$(basename "$BASE_MODEL")-${HELDOUT_DATA//:/-}-${limit}-${mode}"
        [[ "$(setting PROBE_RECOMPUTE)" == "true" ]] && reuse=
      fi
      echo "[train.sh]     $name, $mode: $model"
      "$RLFH" --log-level WARNING eval --model "$model" --data "$HELDOUT_DATA" --mode "$mode" --name "$name" \
        --limit "$limit" --confidence off --out "$out" $reuse >/dev/null   # its progress bar: stderr
      RUNS+=("$out")
    done
  done
  rc=0
  "$RLFH" --log-level WARNING compare "${RUNS[@]}" --out "$SAVE_PATH/heldout/report" --run "$SAVE_PATH" \
    --title "RLFH: base vs RL-trained on held-out questions ($HELDOUT_LIMIT closed book, $HELDOUT_EVIDENCE_LIMIT with the passage)" --expect trained --expect-mode closed \
    || rc=$?
  "$PY" -m cluster.heldout_summary "$SAVE_PATH/heldout/report/report.json" || true
  echo "[train.sh] report: $SAVE_PATH/heldout/report/report.md  curves: $SAVE_PATH/training_curves.png"
  stage_times+=("held-out report $((SECONDS - stage_start)) s")
  echo "[train.sh] time: $(IFS=,; echo "${stage_times[*]}" | sed 's/,/, /g'); total $SECONDS s on $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN) cores" \
       "(${cpu:-CPU}, $isa)"
  exit $rc
fi
