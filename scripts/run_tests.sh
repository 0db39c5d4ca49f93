#!/usr/bin/env bash
# Runs the test suite against a real redis-server.
# REDIS_URL set: use that server. Unset: start redis-server on a free loopback
# port (installing Debian's redis-server if missing) and stop it afterwards.
set -euo pipefail
# The body is one brace group, which bash reads whole before running it: a checkout or an edit of this file
# while a run is going does not change the running script.
{
cd "$(dirname "$0")/.."
BIN=.venv/bin

if [[ -z "${REDIS_URL:-}" ]]; then
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "[tests] redis-server not found: installing Debian's redis-server"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq redis-server >/dev/null
  fi
  PORT=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  REDIS_DIR=$(mktemp -d)
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$REDIS_DIR" --daemonize yes \
    --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log"
  # stop it and wait until it is gone before removing its folder: a server still shutting down writes its log
  # there again, and the removal (which decides nothing about the tests) must not fail the run
  stop_redis() {
    local pid; pid=$(cat "$REDIS_DIR/redis.pid" 2>/dev/null) || pid=""
    if [[ -n "$pid" ]]; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$REDIS_DIR" 2>/dev/null || true
  }
  trap stop_redis EXIT
  for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export REDIS_URL="redis://127.0.0.1:$PORT/0"
  # Tests that stop and restart Redis need to know how it was started.
  export RLFH_TEST_REDIS_MANAGED=1
  echo "[tests] redis-server on $REDIS_URL"
fi

# Tests write checkpoints under TMPDIR. Since the mechanics tests moved to the tiny random Llama, only
# tests/test_learning.py writes one of the real 135M model (fp32 weights + AdamW state + the HF folder: about
# 2 GB), and a passed test's temp dir is deleted when it ends (pyproject: tmp_path_retention_policy = "failed");
# a failed test's is kept, so a red run needs a few GB more. Say so up front rather than fail mid-suite with ENOSPC.
TMP_ROOT="${TMPDIR:-/tmp}"
FREE_GB=$(df -Pk "$TMP_ROOT" | awk 'NR==2 {printf "%d", $4 / 1048576}')
NEED_GB="${RLFH_TEST_MIN_FREE_GB:-8}"
echo "[tests] $FREE_GB GB free under $TMP_ROOT"
if (( FREE_GB < NEED_GB )); then
  echo "[tests] error: the suite needs about $NEED_GB GB free under $TMP_ROOT (TMPDIR) for checkpoints; found $FREE_GB GB." >&2
  echo "[tests] fix: free space (old pytest temp dirs live in $TMP_ROOT/pytest-of-$(id -un)), point TMPDIR at a larger disk," >&2
  echo "[tests]      or set RLFH_TEST_MIN_FREE_GB=0 to run anyway." >&2
  exit 1
fi

# project tools installed in the venv (hadolint, helm) must be found by the tests
export PATH="$PWD/.venv/bin:$PATH"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 DS_ACCELERATOR=cpu TOKENIZERS_PARALLELISM=false
# The 25 slowest tests are printed at the end; every test's time (setup + call + teardown) goes to
# .pytest-durations.json, slowest first (tests/conftest.py writes it), for whoever keeps the suite fast.
# RLFH_TEST_WORKERS=N runs the suite on N pytest-xdist workers, a module at a time (--dist loadfile: a module's
# fixtures start once); every test that starts Ray, Serve or Redis does so on free ports, so two run side by side.
# Default: 2 workers where there are 2 cores or more, each with ONE OpenMP thread (OMP_NUM_THREADS=1 unless set):
# the suite leaves a core idle half the time (Ray start-up, HTTP, subprocesses), and one thread per worker keeps
# two model tests from stalling each other (two OpenMP threads descheduled in turn wait at every op; the suite's
# times, and what two threads per worker cost: docs/PERFORMANCE.md, "The test suites").
# RLFH_TEST_WORKERS=0: one process, torch's default thread count.
# the launchers' MKL_VENDOR_SHIM (core/cpu_blas.py): on an AMD CPU the suite runs the products as train.sh does
preload=$($BIN/python -m core.cpu_blas preload 2> >(sed 's/^/[tests] /' >&2)) || exit 2
if [[ -n "$preload" ]]; then export LD_PRELOAD="$preload"; fi
CORES=$(nproc)   # before OMP_NUM_THREADS is exported below: GNU nproc reports OMP_NUM_THREADS when it is set
if (( CORES >= 2 )); then DEFAULT_WORKERS=2; else DEFAULT_WORKERS=0; fi
WORKERS="${RLFH_TEST_WORKERS:-$DEFAULT_WORKERS}"
XDIST=()
if [[ "$WORKERS" != "0" ]]; then XDIST=(-n "$WORKERS" --dist loadfile); export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi
echo "[tests] $CORES cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $WORKERS xdist workers"
set +e
$BIN/python -m pytest "${XDIST[@]}" --durations=25 --durations-file=.pytest-durations.json "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "[tests] pytest collected no tests"; exit 1; fi
exit $rc
}
