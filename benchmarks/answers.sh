#!/usr/bin/env bash
# Reproduces the README answer figures: the bundled SmolLM2-135M answering MeetingQA and the LongMemEval_S dev split
# from AssoMem's top 6 (judged by the same model), a short CPU LoRA run (§3.3) compared with the plain model on its
# held-out questions, and F1@k / R@k curves on a seeded sample of each (unjudged: this judge errs on every reply).
# The plain model is served by llama.cpp (llama-cpp-python's server: the GGUF as shipped, ~2x faster than transformers
# here); the tuned one runs in transformers (a merged float32 model), and the held-out side is also answered by the
# plain model in transformers, so that the two differ by the tuning alone. Replies are cached: a rerun costs nothing
# but reports ~0 s per prompt (the README gives the time of the first run). Needs ../shared/data and the test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results
TMP=${TMPDIR:-/tmp}/assomem_answers
mkdir -p "$TMP" "$OUT/plots"
MQA=meetingqa:../shared/data/meetingqa/meeting_qa_raw.json
LME=longmemeval:../shared/data/longmemeval/longmemeval_s_dev.json.gz
GGUF=$(python -c 'from assomem_gpu.llm import bundled_smollm2 as b; f, n = b(); print(f / n)')
python -m llama_cpp.server --model "$GGUF" --port 8765 --n_ctx 8192 --seed 0 > "$TMP/llama.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
until curl -sf localhost:8765/v1/models > /dev/null; do sleep 0.5; done
LLAMA="openai:http://127.0.0.1:8765/v1#smollm2"
answer() { python -m assomem_gpu.answer --dataset "$2" --from-rankings "$TMP/$1_rankings.jsonl" --quiet "${@:3}"; }
# name, dataset, held-out share, curve sample, training steps (LongMemEval's samples are 3x longer)
SETS=("meetingqa $MQA 0.2 30 30" "longmemeval_s $LME 0.1 20 15")
for pair in "${SETS[@]}"; do  # every question at k = 6
  set -- $pair
  python -m assomem_gpu.eval --dataset "$2" --method assomem --rankings "$TMP/$1_rankings.jsonl" --quiet
  answer "$1" "$2" --llm "$LLAMA" --judge same --output "$TMP/$1_answers.jsonl" --report "$OUT/answers_$1_k6.json"
done
for pair in "${SETS[@]}"; do  # a short LoRA run, then its held-out questions, plain and tuned
  set -- $pair
  python -m assomem_gpu.finetune --dataset "$2" --from-rankings "$TMP/$1_rankings.jsonl" --output "$TMP/$1_tuned" \
      --heldout "$3" --max-steps "$5" --quiet
  cp "$TMP/$1_tuned/train.json" "$OUT/finetune_$1_train.json"
  for model in smollm2 "hf:$TMP/$1_tuned/merged"; do
    name=$([ "$model" = smollm2 ] && echo plain || echo tuned)
    answer "$1" "$2" --questions "$TMP/$1_tuned/split.json" --llm "$model" --judge "$LLAMA" \
        --output "$TMP/$1_heldout_$name.jsonl" --report "$OUT/answers_$1_heldout_$name.json"
  done
done
for pair in "${SETS[@]}"; do  # answers at every k from 1 to 10 on a seeded sample; no judge (see the k = 6 runs)
  set -- $pair
  answer "$1" "$2" --llm "$LLAMA" --limit "$4" --curve --plot "$OUT/plots/answers_$1" \
      --output "$TMP/$1_curve.jsonl" --report "$OUT/answers_$1_curve.json"
done
