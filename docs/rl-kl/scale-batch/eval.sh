#!/bin/bash
# The scale_rewards=batch RL model (thirty-fifth session) against the built-in SFT model on the
# whole held-out construction split (not a sample), then 60 refinement tasks (seed 0).
set -x
cd /work/main
FAM="conv1d conv2d conv3d dense matmul batch_matmul depthwise_conv2d gemv softmax layer_norm rms_norm elementwise pool2d"
.venv/bin/dragon eval --model sft=training/models/dragon-tiny --model rl=runs/s35/rl/final \
  --data corpus/llvm --out runs/s36/eval-construction -k 4 --kinds construction --no-metaschedule \
  --min-unscheduled-us 50 --families $FAM > runs/s36/eval-construction.log 2>&1
