#!/usr/bin/env bash
# RLFH training launch: a recipe (a file of settings in recipes/), then environment variables and flags on top.
#
#   bash scripts/train.sh                      # recipe main (`make train`): the embedded SmolLM2-135M-Instruct on
#                                              # HaluEval-QA (train split), on CPU with an embedded local Ray
#   bash scripts/train.sh abstain-closed-book  # a recipe by name (recipes/NAME.toml) or a path to a .toml file
#   RECIPE=main bash scripts/train.sh          # the same, from the environment (the first argument beats it)
#   MODEL_PATH=/models/qwen SAVE_PATH=runs/q ACTOR_NUM_GPUS_PER_NODE=4 VLLM_NUM_ENGINES=2 bash scripts/train.sh
#                                              # another model / GPUs / a Ray cluster: no recipe unless one is named
#   bash scripts/train.sh main --max-steps 5   # further arguments go to `rlfh train` (flags beat the environment)
#
# Precedence: a flag > an environment variable > the recipe > the config's default. This script sets no setting
# itself: `rlfh config --recipe NAME` prints each value and where it came from, and a bad value stops here with the
# variable named. Every setting is an environment variable (RLFH's own train script's names: MODEL_PATH,
# PROMPT_DATA, ACTOR_LR, ...; `rlfh config` lists them all).
#
# With no recipe named, the recipe is main when MODEL_PATH is the embedded model, no GPU is asked for and no Ray
# cluster is joined (what main is sized for), and none (every setting at its default) otherwise.
#
# The stages: 1. a warm start (WARM_START: an abstention SFT of the base model, cached per model and settings);
# 2. RL (`rlfh train`); 3. a held-out report (HELDOUT_REPORT: base and warm start vs trained on test questions the
# run never saw: the gate against the base model, RL's share against the warm start).
# Stages 1 and 3 read train.sh's own settings (WARM_START*, PROBE_RECOMPUTE, HELDOUT_*), typed and checked in
# core/config.py (LauncherSettings) like the others, and set by recipes like the others. The only things this
# script decides itself are launcher mechanics: the environment of the local embedded Ray (below), the warm start's
# cache folder and its generation batch sizes, and where the held-out answers are written.
set -euo pipefail
# The body is one brace group, which bash reads whole before running it: a checkout or an edit of this file
# while a run is going does not change the running script.
{
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

# The recipe: the first argument (unless it is a flag), else RECIPE, else main for the embedded model on this machine
BASE_MODEL="${MODEL_PATH:-smollm2-135m-instruct}"
if [[ $# -gt 0 && "$1" != -* ]]; then
  RECIPE=$1
  shift
elif [[ -z "${RECIPE:-}" ]]; then
  if [[ "$BASE_MODEL" == "smollm2-135m-instruct" && "${ACTOR_NUM_GPUS_PER_NODE:-0}" == "0" \
        && -z "${RAY_ADDRESS:-}" ]]; then
    RECIPE=main
  else
    RECIPE=none
    echo "[train.sh] no recipe named: every setting at its default unless set (recipe main is sized for the" \
         "embedded model on CPU; name a recipe as the first argument to use one)"
  fi
fi
export RECIPE
for arg in "$@"; do
  if [[ "$arg" == --recipe || "$arg" == --recipe=* ]]; then
    echo "[train.sh] give the recipe as train.sh's first argument (or RECIPE=...), not as --recipe: train.sh's" \
         "own stages read it too" >&2
    exit 2
  fi
done

# The effective configuration: every setting whose value differs from its default. A bad value stops here, train.sh's
# own settings (WARM_START*, PROBE_RECOMPUTE, HELDOUT_*) included: `rlfh config` checks and documents them all.
if ! current=$("$RLFH" config --format env); then
  echo "[train.sh] bad configuration (see above); \`rlfh config --recipe $RECIPE\` lists every setting, its value" \
       "and where it came from" >&2
  exit 2
fi
defaults=$(env -i PATH="$PATH" HOME="$HOME" "$RLFH" config --format env)
changed=$(diff <(echo "$defaults") <(echo "$current") | sed -n 's/^> /  /p' \
  | sed -E 's/^(  (REWARD_API_TOKEN|MODEL_API_KEY)=).+/\1***/' || true)
echo "[train.sh] recipe $RECIPE; effective configuration (settings that differ from the defaults; where each" \
     "came from: rlfh config --recipe $RECIPE):"
echo "${changed:-  (none: every setting at its default)}"
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
# The CPU's name says little (both kinds of AMD EPYC measured here are "AMD EPYC"); native bf16 shortens the run
# (docs/PERFORMANCE.md): the trainer computes in bf16 autocast there and in fp32 elsewhere (TRAIN_AUTOCAST,
# ROLLOUT_DTYPE: auto), by the rule in actors.base.cpu_has_fast_bf16, asked here too
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | xargs || true)
isa=$("$PY" -c "from actors.base import cpu_has_fast_bf16 as f; print('native bf16' if f() else 'no native bf16: fp32')" \
      2>/dev/null || echo "bf16 support unknown")
WARM_DIR=""   # the warm start's folder (stage 1), when there is one: RL trains from it, the report compares with it
if [[ "$WARM_START" != "none" ]]; then
  # cached per model and settings: a second run re-uses the folder (rlfh baseline warmstart checks the settings)
  # the warm start uses the RL's own prompts, seed, sampling temperature and abstention price
  share="s$(setting WARM_START_SHARE)" where=random
  [[ "$WARM_START" == "graded" ]] && where=wrong
  # probed: k sampled answers per question decide; declining where answering does not pay at ABSTAIN_OUTCOME_REWARD
  [[ "$WARM_START" == "probed" ]] && where=probed share="p$(setting ABSTAIN_OUTCOME_REWARD)"
  # grounded: no abstention; the model's own answers to passage questions, each followed by the passage's sentence
  support=()
  if [[ "$WARM_START" == "grounded" ]]; then
    answers=$(setting WARM_START_ANSWERS)
    share=s0 support=(--support --support-answers "$answers" --abstain-share 0)
    [[ "$answers" != "own" ]] && share="s0-a$answers"   # own: no tag, so the folders cached before it still match
  fi
  questions=$(setting WARM_START_QUESTIONS) epochs=$(setting WARM_START_EPOCHS) trained=$(setting WARM_START_TRAIN_LAYERS)
  layers=""   # every layer trained (0): no tag, so the folders cached before WARM_START_TRAIN_LAYERS existed still match
  if [[ "$trained" != 0 ]]; then layers="-l$trained"; fi
  types=$(setting WARM_START_TYPE_BALANCE); types=${types:-$(setting TYPE_BALANCE)}
  evidence=$(setting EVIDENCE_SHARE) seed=$(setting SEED)
  WARM_DIR=$(setting WARM_START_DIR)
  WARM_DIR=${WARM_DIR:-$cache/warmstart/$(basename "$BASE_MODEL")-$WARM_START-q$questions-$share-t$types-ep$epochs$layers-e$evidence-seed$seed}
  what="$WARM_START -> \"I don't know.\""
  [[ "$WARM_START" == "grounded" ]] && what="grounded: $answers answers, each with its passage sentence"
  echo "[train.sh] 1/3 warm start ($what) -> $WARM_DIR"
  echo "[train.sh]     built once per model and settings, then cached"
  if [[ "$RECIPE" == "main" && "$BASE_MODEL" == "smollm2-135m-instruct" ]]; then
    # make train's time on a 2-core AMD EPYC (AVX2 only, fp32), with nothing cached / with the warm start cached:
    # docs/PERFORMANCE.md, "The embedded default, end to end"; not timed on a CPU with native bf16
    [[ -f "$WARM_DIR/config.json" ]] && minutes=14 || minutes=21
    echo "[train.sh]     make train took $minutes min on 2 cores of an AVX2-only CPU in fp32 (this one: $isa)"
  fi
  "$RLFH" --log-level WARNING baseline warmstart --model "$BASE_MODEL" --data "$(setting PROMPT_DATA)" \
    --limit "$questions" --type-share "$types" --epochs "$epochs" --mode "$(setting PROMPT_MODE)" \
    --evidence-share "$evidence" --abstain-share "$(setting WARM_START_SHARE)" --seed "$seed" \
    --abstain-where "$where" --abstain-price "$(setting ABSTAIN_OUTCOME_REWARD)" --probe-temperature "$(setting TEMPERATURE)" \
    --gen-batch-size 32 --micro-batch-size 8 --train-layers "$trained" --out "$WARM_DIR" \
    --system "$(setting SYSTEM_PROMPT)" --max-new-tokens "$(setting GENERATE_MAX_LEN)" "${support[@]}" \
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

echo "[train.sh] 3/3 held-out report: scripts/heldout_report.sh $BASE_MODEL${WARM_DIR:+ $WARM_DIR}"
rc=0
bash scripts/heldout_report.sh "$BASE_MODEL" ${WARM_DIR:+"$WARM_DIR"} || rc=$?
stage_times+=("held-out report $((SECONDS - stage_start)) s")
echo "[train.sh] time: $(IFS=,; echo "${stage_times[*]}" | sed 's/,/, /g'); total $SECONDS s on $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN) cores" \
     "(${cpu:-CPU}, $isa)"
exit $rc
}
