#!/usr/bin/env bash
# The onset corpus: labelled real-data runs (Fashion-MNIST from Debian's
# dataset-fashion-mnist) and the table of what each health rule set buys on
# them. Three families, a grid of learning rates and seeds each, all on the
# motivating protocol (classes 0-4 for 2 epochs, then 5-9 for 2, then all for
# 1; batch 64; every epoch cut to 120 batches, so a run is 600 steps):
#   cnn_sgd   the motivating case: SimpleCNN, LeakyReLU 0.01, SGD momentum 0.9
#   mlp_sgd   a 3-layer ReLU MLP (width 256), SGD momentum 0.9
#   mlp_adam  the same MLP with Adam
# A run's label is what it did, whatever the rules: failing (a non-finite
# step), recovering (finite, but its loss once stood 10x its trailing median
# or above 10 x ln(classes)), or healthy. Runs go 2 at a time on 1 thread each;
# a run whose trace is already there is not run again, so a rerun only scores.
# Rule sets: bench/onset/*.json (config files; their "health" sections).
# FAMILY=gpt is the transformer corpus: configs/gpt.json (the tiny GPT on the
# fortunes text, AdamW, 200 steps) in two groups. Healthy twins: warm-up 20
# then cosine, peak lr 0.003 / 0.03 / 0.1 / 0.3 with qk-layernorm and 0.003 /
# 0.01 without, seeds 0 and 1. Diverging runs: a 100-step warm-up to a peak lr
# past the stable range (1 and 2), with and without qk-layernorm, seeds 0 and
# 1, and bf16 at lr 1: they train, then diverge. A run fails at its first
# non-finite step or the first step whose loss is past twice the lowest loss
# before it (onset_eval --diverged 2). Runs without qk-layernorm at lr 0.03 to
# 0.3 and warm-up 20 are in neither group: their attention logits grow past
# 1e3 (the instability Wortsman et al. describe, which the defaults flag on
# purpose) while their loss does not diverge within 200 steps, so the loss
# criterion cannot label them. Rule sets: bench/onset_gpt/*.json
# (calibrated_per_tensor.json is what `spikehunt calibrate` derives from the
# plain defaults on healthy runs of this GPT, calibrated.json the same with
# --model-wide); default corpus folder results/onset-corpus-gpt.
# Both families also score the anchors (onset_eval --anchors): Megatron's 10x
# loss, OLMo's 6 sigma over 128 steps, Lightning's SpikeDetection, ZClip, and
# the first non-finite step, as their projects run them.
# Usage: bench/onset_corpus.sh [CORPUS_DIR]   (default results/onset-corpus)
#        LATE=NAME lists the failing runs rule set NAME warns < 5 steps ahead (default: defaults)
#        EXTRA="--set K=V ..." adds flags to every run (e.g. --set health.grad_spike_limit=5000,
#        so the traces hold the statistics that only an enabled rule computes)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
family=${FAMILY:-cnn}
case $family in cnn | gpt) ;; *) echo "error: FAMILY=$family is not cnn or gpt" >&2; exit 2 ;; esac
if [ "$family" = gpt ]; then dir=${1:-$root/results/onset-corpus-gpt}; else dir=${1:-$root/results/onset-corpus}; fi
bin="$root/build/spikehunt"
eval_bin="$root/build/bench/onset_eval"
[ -x "$bin" ] && [ -x "$eval_bin" ] || "$root/scripts/build.sh" > /dev/null
mkdir -p "$dir"

common=(--config "$root/configs/motivating_a_then_b.json" --set max_batches_per_epoch=120
        --set protocol.epochs_per_phase=2 --set protocol.relaxation_epochs=1 --set threads=1
        --set health.stop_at=non_finite)
mlp=(--set model.kind=mlp --set model.mlp_depth=3 --set model.mlp_width=256 --set activation.kind=relu)
jobs=()
# shellcheck disable=SC2206
extra=(${EXTRA:-})
if [ "$family" = gpt ]; then
  common=(--config "$root/configs/gpt.json" --set threads=1 --set health.stop_at=non_finite)
  for seed in 0 1; do
    for lr in 0.003 0.03 0.1 0.3; do
      jobs+=("gpt_lr${lr}_qktrue_s${seed}|--set optimizer.lr=$lr --set model.gpt.qk_layernorm=true --set seed=$seed")
    done
    for lr in 0.003 0.01; do
      jobs+=("gpt_lr${lr}_qkfalse_s${seed}|--set optimizer.lr=$lr --set model.gpt.qk_layernorm=false --set seed=$seed")
    done
    for lr in 1 2; do
      for qk in false true; do
        jobs+=("gpt_ramp_lr${lr}_qk${qk}_s${seed}|--set optimizer.lr=$lr --set schedule.warmup_steps=100 --set model.gpt.qk_layernorm=$qk --set seed=$seed")
      done
    done
    jobs+=("gpt_ramp_lr1_qktrue_bf16_s${seed}|--set optimizer.lr=1 --set schedule.warmup_steps=100 --set model.gpt.qk_layernorm=true --set precision=bf16 --set seed=$seed")
  done
fi
[ "$family" = gpt ] || for lr in 0.01 0.02 0.05 0.1 0.2 0.3; do
  for seed in 0 1 2 3; do jobs+=("cnn_sgd_lr${lr}_s${seed}|--set optimizer.lr=$lr --set seed=$seed"); done
done
[ "$family" = gpt ] || for lr in 0.05 0.1 0.2 0.4; do
  for seed in 0 1 2; do jobs+=("mlp_sgd_lr${lr}_s${seed}|${mlp[*]} --set optimizer.lr=$lr --set seed=$seed"); done
done
[ "$family" = gpt ] || for lr in 0.001 0.01 0.03 0.1; do
  for seed in 0 1 2; do
    jobs+=("mlp_adam_lr${lr}_s${seed}|${mlp[*]} --set optimizer.kind=adam --set optimizer.lr=$lr --set seed=$seed")
  done
done

run_one() {  # NAME|FLAGS: runs unless its trace is there; exit 1 (a finding) is expected
  local name=${1%%|*} flags=${1#*|} out="$dir/${1%%|*}" rc=0
  if compgen -G "$out/*/trace.jsonl" > /dev/null; then return 0; fi
  rm -rf "$out"
  # shellcheck disable=SC2086
  "$bin" run "${common[@]}" $flags "${extra[@]}" --out "$out" > "$out.log" 2>&1 || rc=$?
  if [ "$rc" -gt 1 ]; then echo "error: $name exited $rc (see $out.log)" >&2; return 1; fi
  echo "ran $name: $(grep -m1 '^verdict' "$out.log")"
}
failed=0
for job in "${jobs[@]}"; do
  run_one "$job" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || failed=1; done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
[ "$failed" -eq 0 ] || { echo "error: some runs failed to run (see the .log files in $dir)" >&2; exit 1; }

if [ "$family" = gpt ]; then
  "$eval_bin" "$dir" "$root"/bench/onset_gpt/gpt.json "$root"/bench/onset_gpt/gpt_no_transformer_rules.json \
    "$root"/bench/onset_gpt/gpt_attention_1e4.json "$root"/bench/onset_gpt/defaults.json \
    "$root"/bench/onset_gpt/calibrated.json "$root"/bench/onset_gpt/calibrated_per_tensor.json \
    --diverged 2 --anchors \
    --late "${LATE:-gpt}"
  exit 0
fi
# today's rules and the defaults first, then the candidates
others=()
for f in "$root"/bench/onset/*.json; do
  case $(basename "$f") in today.json|defaults.json) ;; *) others+=("$f") ;; esac
done
"$eval_bin" "$dir" "$root/bench/onset/today.json" "$root/bench/onset/defaults.json" "${others[@]}" \
  --anchors --late "${LATE:-defaults}"
