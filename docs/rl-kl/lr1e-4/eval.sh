#!/bin/bash
# After the RL run: the whole held-out construction split, then 60 refinement tasks (seed 0),
# the built-in SFT model against it; the commands of docs/rl-kl/scale-batch/eval*.sh.
cd /work/main
while pgrep -f "runs/s39/rl.sh" > /dev/null; do sleep 10; done
FAM="conv1d conv2d conv3d dense matmul batch_matmul depthwise_conv2d gemv softmax layer_norm rms_norm elementwise pool2d"
.venv/bin/dragon eval --model sft=training/models/dragon-tiny --model rl=runs/s39/rl/final \
  --data corpus/llvm --out runs/s39/eval-construction -k 4 --kinds construction --no-metaschedule \
  --min-unscheduled-us 50 --families $FAM > runs/s39/eval-construction.log 2>&1
.venv/bin/dragon eval --model sft=training/models/dragon-tiny --model rl=runs/s39/rl/final \
  --data corpus/llvm --out runs/s39/eval-refinement -k 4 --kinds refinement --no-metaschedule \
  --min-unscheduled-us 50 --sample-tasks 60 --families $FAM > runs/s39/eval-refinement.log 2>&1
