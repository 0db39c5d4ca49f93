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

# Local embedded Ray: every port on loopback, Ray token auth on (Ray 2.60's default: the token is created once in
# ~/.ray/auth_token; RAY_AUTH_MODE=disabled turns it off, which lets any local user submit jobs), no usage stats;
# CPU DeepSpeed when there is no GPU.
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"
export TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
if ! command -v nvidia-smi >/dev/null 2>&1; then export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"; fi

# The embedded default (SmolLM2-135M on CPU, local Ray) gets sizes that finish in under 20 minutes on a 2-core
# machine: 16 steps of 8 prompts x 2 samples x <= 48 new tokens. Only when MODEL_PATH is the embedded model and
# no GPU or remote cluster is asked for; a value set in the environment (or a flag) always wins.
if [[ "${MODEL_PATH:-smollm2-135m-instruct}" == "smollm2-135m-instruct" && "${ACTOR_NUM_GPUS_PER_NODE:-0}" == "0" \
      && -z "${RAY_ADDRESS:-}" ]]; then
  export MAX_STEPS="${MAX_STEPS:-16}"
  export GENERATE_MAX_LEN="${GENERATE_MAX_LEN:-48}"
fi

# The effective configuration: every setting whose value differs from its default. A bad value stops here.
if ! current=$("$RLFH" config --format env); then
  echo "[train.sh] bad configuration (see above); \`rlfh config\` lists every setting and what it accepts" >&2
  exit 2
fi
defaults=$(env -i PATH="$PATH" HOME="$HOME" "$RLFH" config --format env)
changed=$(diff <(echo "$defaults") <(echo "$current") | sed -n 's/^> /  /p' \
  | sed -E 's/^(  (REWARD_API_TOKEN|MODEL_API_KEY)=).+/\1***/' || true)
echo "[train.sh] effective configuration (settings that differ from the defaults):"
echo "${changed:-  (none: the embedded default)}"

exec "$RLFH" train "$@"
