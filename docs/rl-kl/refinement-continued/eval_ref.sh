#!/bin/bash
# Held-out refinement, the same 60-task sample (seed 0) as docs/rl-kl/scale-batch/refinement60: SFT against RL continued on refinement.
cd /work/main
FAM="conv1d conv2d conv3d dense matmul batch_matmul depthwise_conv2d gemv softmax layer_norm rms_norm elementwise pool2d"
.venv/bin/dragon eval --model sft=training/models/dragon-tiny --model rlref=runs/s37/rl-ref/checkpoints/checkpoint-40 \
  --data corpus/llvm --out runs/s37/eval-refinement60 -k 4 --kinds refinement --no-metaschedule \
  --min-unscheduled-us 50 --sample-tasks 60 --seed 0 --families $FAM > runs/s37/eval-refinement60.log 2>&1
