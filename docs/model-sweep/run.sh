#!/bin/bash
# The model-size sweep on the kept corpus (issue 26): three sizes of the tiny Llama, the same
# 200 steps of `dragon sft --preset tiny` on corpus/llvm's construction and refinement datasets,
# then what their construction scripts do on held-out workloads (benchmarks/model_tiling.py).
# Run from the repository root; resumable (a finished size is skipped).
set -u
OUT=${OUT:-runs/sweep}
mkdir -p "$OUT"
for size in "s 128 2 4" "m 256 4 4" "l 384 6 6"; do
  set -- $size
  [ -f "$OUT/$1/result.json" ] && continue
  start=$(date +%s)
  .venv/bin/dragon sft --preset tiny --data corpus/llvm --out "$OUT/$1" \
     --hidden-size "$2" --layers "$3" --heads "$4" --max-steps 200 --json -q \
     $( [ -f "$OUT/$1/config.yaml" ] && echo --resume ) > "$OUT/$1.json" 2> "$OUT/$1.err"
  echo "$1 rc=$? seconds=$(( $(date +%s) - start ))" >> "$OUT/times.txt"
done
.venv/bin/python benchmarks/model_tiling.py --model builtin=training/models/dragon-tiny \
    --model s="$OUT/s" --model m="$OUT/m" --model l="$OUT/l" -k 4 --out "$OUT/tiling.json"
