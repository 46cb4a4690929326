"""The untrained model and tokenizer that schedule-aware decoding's tests sample from
(test_schedule_aware, test_live_worker): a tokenizer trained on two workloads' MetaSchedule
traces and a tiny Llama over it, seeded."""

from __future__ import annotations

import torch

from training.models.tokenizer import TokenizerConfig, build_tokenizer, tiny_model


def small_tokenizer():
    return build_tokenizer(TokenizerConfig(
        workloads=("matmul(m=64,n=64,k=64)", "softmax(m=32,n=64)"), targets=("llvm",),
        traces_per_workload=2))


def small_model(tokenizer):
    torch.manual_seed(0)
    return tiny_model(tokenizer).eval()
