#!/bin/bash
# The sixteenth session's RL configuration (lr 1e-4, KL 0.04: the one that moved the policy, KL
# 0.1), run again on today's decoder (dead ends removed in the twentieth session, after it).
cd /work/main
.venv/bin/dragon rl --preset tiny --model training/models/dragon-tiny --data corpus/llvm \
  --num-generations 8 --best-of 4 --learning-rate 1e-4 --beta 0.04 --max-steps 60 \
  --save-steps 10 --max-kernel-ms 20 --out runs/s39/rl > runs/s39/rl.log 2>&1
