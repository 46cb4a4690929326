#!/bin/bash
# After the construction run: 60 refinement tasks (seed 0), SFT against RL (scale_rewards=batch).
cd /work/main
while pgrep -f "runs/s36/eval.sh" > /dev/null; do sleep 10; done
FAM="conv1d conv2d conv3d dense matmul batch_matmul depthwise_conv2d gemv softmax layer_norm rms_norm elementwise pool2d"
.venv/bin/dragon eval --model sft=training/models/dragon-tiny --model rl=runs/s35/rl/final \
  --data corpus/llvm --out runs/s36/eval-refinement -k 4 --kinds refinement --no-metaschedule \
  --min-unscheduled-us 50 --sample-tasks 60 --families $FAM > runs/s36/eval-refinement.log 2>&1
