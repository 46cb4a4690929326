#!/bin/bash
# RL continued on refinement prompts only, from the scale-batch run's model (which beat SFT on construction).
cd /work/main
.venv/bin/dragon rl --preset tiny --model runs/s35/rl/final --data corpus/llvm --tasks refinement \
  --num-generations 8 --best-of 4 --learning-rate 5e-5 --beta 0.025 --scale-rewards batch \
  --max-steps 60 --max-kernel-ms 20 --seed 1 --out runs/s37/rl-ref > runs/s37/rl-ref.log 2>&1
