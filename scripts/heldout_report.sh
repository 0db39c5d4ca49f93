#!/usr/bin/env bash
# The held-out report of a finished run (scripts/train.sh's stage 3): the base model, the warm start (when there
# is one) and SAVE_PATH/final answer held-out questions greedily, closed book and with the passage, then `rlfh
# compare` judges the trained model by the recipe's gate against the base model, and cluster.heldout_summary prints
# the before/after tables, each metric's verdict against the base model and against the warm start (RL's share),
# and how the run ended.
#
#   bash scripts/heldout_report.sh BASE_MODEL [WARM_MODEL]   # the environment's settings (RECIPE=, SAVE_PATH=...)
#   RECIPE=grounded SAVE_PATH=runs/g bash scripts/heldout_report.sh smollm2-135m-instruct
#
# WARM_MODEL: the warm start's folder RL trained from (train.sh passes its WARM_DIR); its answers are cached like the
# base model's, and it is compared with the trained model, not gated on.
#
# Asked and graded as in training: the recipe's SYSTEM_PROMPT, GENERATE_MAX_LEN and GRADE_SCOPE. Its own settings
# are HELDOUT_DATA, HELDOUT_LIMIT (closed book), HELDOUT_EVIDENCE_LIMIT (with the passage; either may be 0 to skip
# that half), HELDOUT_GATE and HELDOUT_STRICT (`rlfh config` documents them). Answers are re-used where the weights
# and settings are unchanged.
# Exit status: 0 once the report is written (its verdict line says whether the gate was met); 3 for a gate not met
# with HELDOUT_STRICT on (only then does the summary word it FAILED); 1 without a final model; 2 on a bad setting or
# a WARM_MODEL that is no model folder.
set -euo pipefail
# The body is one brace group, which bash reads whole before running it: a checkout or an edit of this file
# while a run is going does not change the running script.
{
cd "$(dirname "$0")/.."
RLFH=.venv/bin/rlfh
PY=.venv/bin/python
if [[ $# -lt 1 || $# -gt 2 || "$1" == -* ]]; then
  echo "usage: bash scripts/heldout_report.sh BASE_MODEL [WARM_MODEL]   (the model the run started from: a path or" \
       "the embedded name; the warm start's folder RL trained from, when there was one)" >&2
  exit 2
fi
BASE_MODEL=$1
WARM_MODEL=${2:-}
if [[ -n "$WARM_MODEL" && ! -f "$WARM_MODEL/config.json" ]]; then
  echo "[heldout] WARM_MODEL $WARM_MODEL is no model folder (no config.json): pass the warm start's folder" >&2
  exit 2
fi
if ! current=$("$RLFH" config --format env); then
  echo "[heldout] bad configuration (see above)" >&2
  exit 2
fi
setting() { sed -n "s/^$1=//p" <<<"$current" | head -n 1; }
SAVE_PATH=$(setting SAVE_PATH)
cache=$(setting RLFH_CACHE_DIR); cache=${cache:-$HOME/.cache/rlfh}
HELDOUT_DATA=$(setting HELDOUT_DATA) HELDOUT_LIMIT=$(setting HELDOUT_LIMIT)
HELDOUT_EVIDENCE_LIMIT=$(setting HELDOUT_EVIDENCE_LIMIT)
# asked and graded as in training: the recipe's system prompt (a named one; `rlfh eval --system` takes names),
# its answer length and what the gold grader reads
system=$(setting SYSTEM_PROMPT)
case "$system" in
  default|may-abstain|grounded|grounded-may-abstain) ;;
  *) echo "[heldout] SYSTEM_PROMPT is a literal text: the held-out report asks with the default prompt" >&2
     system=default ;;
esac
ask=(--system "$system" --max-new-tokens "$(setting GENERATE_MAX_LEN)" --grade-scope "$(setting GRADE_SCOPE)")
TRAINED="$SAVE_PATH/final"
if [[ ! -f "$TRAINED/config.json" ]]; then
  echo "[heldout] no final model at $TRAINED: no held-out report" >&2
  exit 1
fi
specs=("base|$BASE_MODEL")
# the warm start's row: what RL added is the trained model against it (named warm-start: cluster.heldout_summary
# compares it and leaves it out of the gate)
[[ -n "$WARM_MODEL" ]] && specs+=("warm-start|$WARM_MODEL")
specs+=("trained|$TRAINED")
echo "[heldout] base${WARM_MODEL:+, warm start} vs trained, greedy, questions of $HELDOUT_DATA the run never" \
     "trained on: $HELDOUT_LIMIT closed book, $HELDOUT_EVIDENCE_LIMIT with the passage"
RUNS=()
for mode in closed evidence; do
  limit=$HELDOUT_LIMIT
  [[ "$mode" == "evidence" ]] && limit=$HELDOUT_EVIDENCE_LIMIT
  (( limit > 0 )) || continue     # HELDOUT_LIMIT=0 / HELDOUT_EVIDENCE_LIMIT=0: that half is skipped
  for spec in "${specs[@]}"; do
    IFS='|' read -r name model <<<"$spec"
    out="$SAVE_PATH/heldout/${name}_${mode}"
    # the base model's and the warm start's answers do not change between runs: cached (`rlfh eval --reuse` checks
    # weights + settings; it reads greedy answers from $RLFH_CACHE_DIR/answers, or for the embedded model at these
    # settings the shipped ones in evaluation/shipped/, which PROBE_RECOMPUTE=1 makes again)
    reuse=--reuse
    if [[ "$name" != "trained" ]]; then
      out="$cache/heldout/$(basename "$model")-${HELDOUT_DATA//:/-}-${limit}-${mode}"
      [[ "$system" != default ]] && out="$out-$system"
      [[ "$(setting PROBE_RECOMPUTE)" == "true" ]] && reuse=
    fi
    echo "[heldout]     $name, $mode: $model"
    "$RLFH" --log-level WARNING eval --model "$model" --data "$HELDOUT_DATA" --mode "$mode" --name "$name" \
      --limit "$limit" --confidence off "${ask[@]}" --out "$out" $reuse >/dev/null   # its progress bar: stderr
    RUNS+=("$out")
  done
done
rc=0   # 3: the gate was not met (rlfh compare --expect)
gate=$(setting HELDOUT_GATE) gated=closed
[[ "$gate" == "grounded" ]] && gated=evidence
strict=()   # HELDOUT_STRICT: a gate not met fails the job, and only then does the summary word it FAILED
[[ "$(setting HELDOUT_STRICT)" == "true" ]] && strict=(--strict)
# the gate is judged against the base model only: the warm start is compared (RL's share), not gated on
title="RLFH: base${WARM_MODEL:+, warm start} vs RL-trained on held-out questions ($HELDOUT_LIMIT closed book,"
title="$title $HELDOUT_EVIDENCE_LIMIT with the passage)"
"$RLFH" --log-level WARNING compare "${RUNS[@]}" --out "$SAVE_PATH/heldout/report" --run "$SAVE_PATH" --title "$title" \
  --expect trained --expect-against base --gate "$gate" --expect-mode "$gated" || rc=$?
"$PY" -m cluster.heldout_summary "$SAVE_PATH/heldout/report/report.json" --gate "$gate" ${strict[@]+"${strict[@]}"} \
  || true
echo "[heldout] report: $SAVE_PATH/heldout/report/report.md  curves: $SAVE_PATH/training_curves.png"
if [[ $rc -eq 3 && "$(setting HELDOUT_STRICT)" != "true" ]]; then
  # the job ran to its end: the verdict above says the gate was not met; HELDOUT_STRICT makes that an exit status
  echo "[heldout] done; the held-out gate was not met (the verdict above); with HELDOUT_STRICT on, it exits 3"
  rc=0
fi
exit $rc
}
