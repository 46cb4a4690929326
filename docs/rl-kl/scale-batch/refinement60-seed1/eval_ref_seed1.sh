#!/bin/bash
# Held-out refinement, 60 tasks drawn with --seed 1: SFT against the scale-batch RL model.
cd /work/main
FAM="conv1d conv2d conv3d dense matmul batch_matmul depthwise_conv2d gemv softmax layer_norm rms_norm elementwise pool2d"
.venv/bin/dragon eval --model sft=training/models/dragon-tiny --model rl=runs/s35/rl/final \
  --data corpus/llvm --out runs/s37/eval-refinement60-seed1 -k 4 --kinds refinement --no-metaschedule \
  --min-unscheduled-us 50 --sample-tasks 60 --seed 1 --families $FAM > runs/s37/eval-refinement60-seed1.log 2>&1
