#!/usr/bin/env bash
# Reproduces the README results tables: every method and ablation on MeetingQA and the LongMemEval_S dev split
# (cross-validated), and LongMemEval grown to 2,500 sessions per question (seeded 60-question subset, and all questions
# for the paired comparisons: AssoMem against BM25 (and flat-dense), each ablation against AssoMem), and importance on
# the paper's signals alone (README, "Where importance helps").
# Writes benchmarks/results/*.json and benchmarks/results/plots/*/*.png. Needs ../shared/data; LoCoMo with LOCOMO set.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results
MQA=meetingqa:../shared/data/meetingqa/meeting_qa_raw.json
LME=longmemeval:../shared/data/longmemeval/longmemeval_s_dev.json.gz
METHODS=flat-dense,bm25,session-flat,session-utterance,session-summary,topic-grouping,assomem
RANKS=$(mktemp -d)  # the ranking exports the comparisons read (not kept)
trap 'rm -rf "$RANKS"' EXIT
run() { python -m assomem_gpu.eval --quiet "$@"; }
compare() {  # compare SET A B DATASET-OPTIONS...: B against A, question by question
  local set=$1 a=$2 b=$3
  shift 3
  python -m assomem_gpu.eval.compare "$@" "$RANKS/$set.$a.jsonl" "$RANKS/$set.$b.jsonl" \
      --output "$OUT/compare_${set}_${a}_vs_${b}.json" > /dev/null
}
# the paper's signals (relevance, importance, temporal) and BM25's, without the ones this project added
PAPER=(--no-context --no-session --no-lexical-context --no-reply --no-user-relevance)
importance_in_paper_signals() {  # importance_in_paper_signals SET PREFIX DATASET-OPTIONS...: them with and without
  local set=$1 prefix=$2  # importance; results in $OUT/PREFIX_*.json, the comparison in compare_SET_*.json
  shift 2
  run "$@" --method assomem "${PAPER[@]}" --output "$OUT/${prefix}_paper-signals.json" \
      --rankings "$RANKS/$set.paper-signals.jsonl"
  run "$@" --method assomem "${PAPER[@]}" --no-importance --output "$OUT/${prefix}_paper-signals_no-importance.json" \
      --rankings "$RANKS/$set.paper-signals_no-importance.jsonl"
  compare "$set" paper-signals paper-signals_no-importance "$@"
}
for pair in "meetingqa $MQA" "longmemeval_s $LME"; do
  set -- $pair
  run --dataset "$2" --method "$METHODS" --output "$OUT/$1_methods.json" --plot "$OUT/plots/$1" \
      --rankings "$RANKS/$1.jsonl"
  for ablation in no-temporal no-importance no-lexical no-context no-session no-lexical-context no-user-relevance \
      no-reply no-clues fixed-weights no-sentences no-signal-selection; do
    run --dataset "$2" --method assomem "--$ablation" --output "$OUT/$1_$ablation.json" \
        --rankings "$RANKS/$1.$ablation.jsonl"
    compare "$1" assomem "$ablation" --dataset "$2"
  done
  compare "$1" bm25 assomem --dataset "$2"
  importance_in_paper_signals "$1" "$1" --dataset "$2"
  run --dataset "$2" --method assomem --lexical-pool 0 --output "$OUT/$1_no-lexical-pool.json"
  run --dataset "$2" --method assomem --dense-pool 0 --output "$OUT/$1_no-dense-pool.json"
  run --dataset "$2" --method assomem --clue-merge components --output "$OUT/$1_components.json"
done
run --dataset "$LME" --haystack-sessions 2500 --limit 60 --method flat-dense,bm25,session-utterance,topic-grouping,assomem \
    --output "$OUT/longmemeval_l2500_methods.json"
for ablation in "lexical-pool 0:no-lexical-pool" "dense-pool 0:no-dense-pool" "clue-merge components:components" \
    "no-clues:no-clues" "no-session:no-session" "no-sentences:no-sentences" "no-lexical-context:no-lexical-context"; do
  run --dataset "$LME" --haystack-sessions 2500 --limit 60 --method assomem --${ablation%%:*} \
      --output "$OUT/longmemeval_l2500_${ablation##*:}.json"
done
# all questions at 2,500 sessions, for the paired comparisons (about 20 minutes for the methods)
L2500=(--dataset "$LME" --haystack-sessions 2500)
run "${L2500[@]}" --method assomem,bm25,flat-dense --rankings "$RANKS/l2500_all.jsonl" \
    --output "$OUT/longmemeval_l2500_all_methods.json"
compare l2500_all bm25 assomem "${L2500[@]}"
compare l2500_all flat-dense assomem "${L2500[@]}"
for ablation in no-clues no-importance no-temporal no-context no-user-relevance no-signal-selection; do  # ~10 min each
  run "${L2500[@]}" --method assomem "--$ablation" --rankings "$RANKS/l2500_all.$ablation.jsonl" \
      --output "$OUT/longmemeval_l2500_all_$ablation.json"
  compare l2500_all assomem "$ablation" "${L2500[@]}"
done
importance_in_paper_signals l2500_all longmemeval_l2500_all "${L2500[@]}"
# LoCoMo, a set nothing was tuned on (LOCOMO=path/to/locomo10.json, the public file of github.com/snap-research/locomo,
# data/): the methods, and each ablation against AssoMem (about a minute each)
if [ -n "${LOCOMO:-}" ]; then
  LC=locomo:$LOCOMO
  run --dataset "$LC" --method assomem,bm25,flat-dense --rankings "$RANKS/locomo10.jsonl" \
      --output "$OUT/locomo10_methods.json"
  compare locomo10 bm25 assomem --dataset "$LC"
  compare locomo10 flat-dense assomem --dataset "$LC"
  for ablation in no-temporal no-importance no-lexical no-context no-session no-lexical-context no-user-relevance \
      no-reply no-sentences no-clues no-signal-selection; do
    run --dataset "$LC" --method assomem "--$ablation" --rankings "$RANKS/locomo10.$ablation.jsonl" \
        --output "$OUT/locomo10_$ablation.json"
    compare locomo10 assomem "$ablation" --dataset "$LC"
  done
  importance_in_paper_signals locomo10 locomo10 --dataset "$LC"
  for signals in "no-context no-session" "no-context" "no-session"; do  # which signals carry what importance does
    name=${signals// /_}
    [ -f "$RANKS/locomo10.$name.jsonl" ] || run --dataset "$LC" --method assomem ${signals//no-/--no-} \
        --output "$OUT/locomo10_$name.json" --rankings "$RANKS/locomo10.$name.jsonl"  # (a single ablation's is run)
    run --dataset "$LC" --method assomem ${signals//no-/--no-} --no-importance \
        --output "$OUT/locomo10_${name}_no-importance.json" --rankings "$RANKS/locomo10.${name}_no-importance.jsonl"
    compare locomo10 "$name" "${name}_no-importance" --dataset "$LC"
  done
fi
# the shipped fusion weights (assomem_gpu/weights/README.md) applied to MeetingQA, which they never saw
run --dataset "$MQA" --method assomem --weights assomem_gpu/weights/default.json \
    --output "$OUT/meetingqa_assomem_shipped_weights.json"
