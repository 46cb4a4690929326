"""The memory a training run needs, estimated from the model's config before any weight is
made, against the memory this machine has: a run that cannot fit is refused at once rather
than after allocating gigabytes (``dragon sft --hidden-size 65536``).

The estimate counts the parameters of the model built on PyTorch's ``meta`` device (shapes,
no storage) and what training keeps per parameter: full training 16 bytes (fp32 weights,
gradients and Adam's two moments; bf16 mixed precision keeps fp32 masters too), LoRA the
frozen weights alone (2 bytes in bf16, else 4).  Activations come on top: the estimate is a
floor, so only what cannot fit even then is refused.  Under DeepSpeed the states are sharded
or offloaded and nothing is refused here.

>>> human(17 * 2**30)
'17.0 GiB'
"""

from __future__ import annotations

import os
from typing import Any

from training.train.run_dir import RunError

__all__ = ["ModelTooLarge", "available_bytes", "check_memory", "human", "parameter_count",
           "training_bytes"]


class ModelTooLarge(RunError):
    """A model whose training would not fit in this machine's memory."""


def parameter_count(model_config: Any) -> int:
    """The parameters of a causal LM of ``model_config`` (a transformers ``PretrainedConfig``),
    counted on the ``meta`` device, which allocates nothing."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config)
    return sum(p.numel() for p in model.parameters())


def training_bytes(params: int, *, full: bool, bf16: bool) -> int:
    """The least memory training ``params`` parameters keeps (see the module's note)."""
    return params * (16 if full else 2 if bf16 else 4)


def available_bytes() -> tuple[int, str]:
    """The memory a run here can use and where: the first GPU's free memory when there is
    one, else the host's available memory (``MemAvailable``)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.mem_get_info()[0], "free on cuda:0"
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available"
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), "free"


def check_memory(model_config: Any, *, full: bool, bf16: bool, deepspeed: bool,
                 what: str = "the model") -> int:
    """The estimated bytes of training ``model_config``; ``ModelTooLarge`` with the estimate
    when they exceed the memory available (not checked under DeepSpeed)."""
    params = parameter_count(model_config)
    need = training_bytes(params, full=full, bf16=bf16)
    if deepspeed:
        return need
    have, where = available_bytes()
    if need > have:
        raise ModelTooLarge(
            f"{what} has {params:,} parameters: training it needs at least {human(need)} "
            f"({'weights, gradients and Adam states' if full else 'frozen weights'}), more "
            f"than the {human(have)} {where}; choose a smaller model")
    return need


def human(n: float) -> str:
    """Bytes in GiB (or MiB below one GiB), one decimal."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
