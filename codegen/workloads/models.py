"""Real workloads from real models: a zoo model imported into Relax, split into MetaSchedule tasks.

A task's spec reads ``model(name=bert,preset=tiny,task=3)``, with ``batch=`` and ``seq=`` only
where they differ from the defaults (1, and the preset's). ``task`` indexes the model's tasks,
deduplicated by structural hash, in the order the Relax ``main`` first calls them. The models
and presets are in ``codegen.model_zoo``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..targets import as_target, native_log
from .model_zoo import MODELS, ModelEntry, Preset
from .workload import Workload

if TYPE_CHECKING:
    from ..targets import TargetLike

__all__ = ["MODELS", "ModelTask", "extract_tasks", "import_model", "model_spec",
           "model_workload", "module_tasks", "parse_model_spec", "prepare_module"]

# Legalization does not depend on the target, so neither do the tasks (a test checks it);
# the spec names no target, and this one is used to resolve it.
_EXTRACT_TARGET = {"kind": "llvm", "num-cores": 2}
_SPEC_KEYS = ("name", "preset", "task", "batch", "seq")


@dataclass(frozen=True)
class ModelTask:
    """One tuning task of a model: a PrimFunc as an IRModule whose one function is ``main``."""

    spec: str = field(metadata={"help": "model(name=...,preset=...,task=N)"})
    mod: Any = field(metadata={"help": "tvm.IRModule with the PrimFunc 'main'"})
    name: str = field(metadata={"help": "the fused function's name, e.g. fused_matmul_add"})
    weight: int = field(metadata={"help": "how many times the model calls it"})

    @property
    def workload(self):
        """The task as a ``codegen.workloads.Workload``."""
        return Workload(spec=self.spec, mod=self.mod)

    def __str__(self) -> str:
        return self.spec


# The most sequences (or images) a model spec may batch: its activations grow with it.
MAX_BATCH = 64


def _unknown_name(name: str) -> str:
    return (f"unknown model (the zoo, codegen.workloads.model_zoo): Expected one of "
            f"{sorted(MODELS)} but got name={name!r}")


def _lookup(name: str, preset: str) -> tuple[ModelEntry, Preset]:
    if name not in MODELS:
        raise ValueError(_unknown_name(name))
    presets = MODELS[name].presets
    if preset not in presets:
        raise ValueError(f"Expected one of {sorted(presets)} but got preset={preset!r}")
    return MODELS[name], presets[preset]


def _check_size(key: str, value: Any, limit: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Expected a positive int but got {key}={value!r}")
    if limit is not None and value > limit:
        raise ValueError(f"Expected {key} in 1..{limit} but got {key}={value}")


def _check_sizes(kwargs: dict[str, Any]) -> None:
    """``batch`` and ``seq`` of a spec whose model and preset exist, within what the model
    takes (``Preset.max_seq``, ``MAX_BATCH``): a longer sequence than the position table is
    an error deep in torch, a huge one an export that does not end."""
    _, chosen = _lookup(str(kwargs["name"]), str(kwargs["preset"]))
    limits = {"batch": MAX_BATCH, "seq": chosen.max_seq or chosen.seq}
    for key in ("batch", "seq"):
        if key in kwargs:
            _check_size(key, kwargs[key], limits[key])


def import_model(name: str, preset: str = "tiny", batch: int = 1, seq: int | None = None):
    """The model as a Relax IRModule, legalized and fused so that its PrimFuncs are the tasks.

    The weights are bound as constants, as for deployment (so weight transposes are folded).
    ``seq`` is tokens per sequence, or the image side for ``resnet``; None takes the preset's.

    >>> mod = import_model("resnet")  # doctest: +SKIP
    >>> "max_pool2d" in {gv.name_hint for gv in mod.get_global_vars()}  # doctest: +SKIP
    True
    """
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    entry, chosen = _lookup(name, preset)
    _check_size("batch", batch)
    seq = chosen.seq if seq is None else seq
    _check_size("seq", seq)
    module, inputs = entry.build(batch, seq, **chosen.config)
    with torch.no_grad():
        program = torch.export.export(module, inputs)
    mod = from_exported_program(program, custom_convert_map={"cumsum.default": _cumsum})
    return prepare_module(mod)


def prepare_module(mod):
    """A Relax module legalized and fused, as MetaSchedule tunes it: what
    ``relax.pipeline.static_shape_tuning_pipeline`` runs before tuning.  A module prepared
    already passes through unchanged."""
    import tvm
    from tvm import relax

    passes = tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ])
    with native_log():  # legalizing a gather (take) warns once per gather otherwise
        return passes(mod)


def _cumsum(node, importer):
    # TVM 0.27's importer keeps cumsum's input dtype; torch sums bools into int64. The bool
    # version breaks transformers' causal mask, whose `==` on bools LLVM then fails to verify.
    from tvm import relax

    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    dtype = str(node.meta["val"].dtype).removeprefix("torch.")
    return importer.block_builder.emit(relax.op.cumsum(importer.env[node.args[0]], dim, dtype))


def model_spec(name: str, preset: str, task: int, batch: int = 1, seq: int | None = None) -> str:
    """The canonical spec of a model task.

    >>> model_spec("bert", "tiny", 3, seq=16)
    'model(name=bert,preset=tiny,task=3)'
    """
    _, chosen = _lookup(name, preset)
    extra = "" if batch == 1 else f",batch={batch}"
    extra += "" if seq is None or seq == chosen.seq else f",seq={seq}"
    return f"model(name={name},preset={preset},task={task}{extra})"


def parse_model_spec(spec: str, task: bool = True) -> dict[str, Any]:
    """The keyword arguments of a model spec; ``task=False``: of a whole model, without
    ``task=`` (``model(name=bert,preset=tiny)``), name and preset checked.

    >>> parse_model_spec("model(name=gpt2,preset=base,task=0,seq=64)")
    {'name': 'gpt2', 'preset': 'base', 'task': 0, 'seq': 64}
    """
    match = re.fullmatch(r"\s*model\((.*)\)\s*", spec)
    if not match:
        raise ValueError(f"Expected a spec like 'model(name=bert,preset=tiny,task=0)' "
                         f"but got {spec!r}")
    kwargs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in match.group(1).split(","))):
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq or key not in _SPEC_KEYS:
            raise ValueError(f"Expected key=value with a key in {list(_SPEC_KEYS)} "
                             f"but got {part!r} in {spec!r}")
        kwargs[key] = int(value) if re.fullmatch(r"-?\d+", value) else value
    if "name" in kwargs and kwargs["name"] not in MODELS:  # before "preset is missing"
        raise ValueError(f"{_unknown_name(str(kwargs['name']))} in {spec!r}")
    required = ("name", "preset", "task") if task else ("name", "preset")
    missing = [k for k in required if k not in kwargs]
    if missing:
        raise ValueError(f"Expected keys {missing} in model spec {spec!r}")
    if not task:
        if "task" in kwargs:
            raise ValueError(f"Expected a whole model, without task=, but got {spec!r}")
        _check_sizes(kwargs)
    elif str(kwargs["preset"]) in MODELS[str(kwargs["name"])].presets:
        _check_sizes(kwargs)
    return kwargs


def extract_tasks(name: str, preset: str = "tiny", target: TargetLike = "llvm", batch: int = 1,
                  seq: int | None = None) -> list[ModelTask]:
    """The model's distinct tasks, as MetaSchedule's Relax integration extracts them for target.

    >>> [t.spec for t in extract_tasks("resnet")][:1]  # doctest: +SKIP
    ['model(name=resnet,preset=tiny,task=0)']
    """
    seq = _lookup(name, preset)[1].seq if seq is None else seq
    return module_tasks(_imported(name, preset, batch, seq), target,
                        lambda i: model_spec(name, preset, i, batch, seq))


def module_tasks(mod, target: TargetLike = "llvm", spec_of=None) -> list[ModelTask]:
    """The distinct tasks of a prepared Relax module (``prepare_module``), deduplicated by
    structural hash, in the order ``main`` first calls them; ``spec_of(i)`` names task ``i``
    (by default ``module(task=i)``)."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks as ms_extract

    spec_of = spec_of or (lambda i: f"module(task={i})")
    order = _call_order(mod)
    found: dict[int, tuple[str, Any, int]] = {}
    for task in ms_extract(mod, as_target(target)):
        task_mod = task.dispatched[0]
        key = tvm_ffi.structural_hash(task_mod)
        first, _, weight = found.get(key, (task.task_name, task_mod, 0))
        found[key] = (first, task_mod, weight + int(task.weight))
    ranked = sorted(found.values(), key=lambda t: (order.get(t[0], len(order)), t[0]))
    return [ModelTask(spec_of(i), task_mod, task_name, weight)
            for i, (task_name, task_mod, weight) in enumerate(ranked)]


# Importing costs seconds; extracting from the imported module costs milliseconds.
_imported = functools.lru_cache(maxsize=8)(import_model)


def _call_order(mod) -> dict[str, int]:
    """Each called PrimFunc's name -> the position of its first call in ``main``."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    order: dict[str, int] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                order.setdefault(value.args[0].name_hint, len(order))
    return order


def model_workload(spec: str):
    """The ``Workload`` of a model task spec (what ``codegen.workloads.workload`` delegates to).

    >>> model_workload("model(name=resnet,preset=tiny,task=0)").spec  # doctest: +SKIP
    'model(name=resnet,preset=tiny,task=0)'
    """
    kwargs = parse_model_spec(spec)
    task = kwargs.pop("task")
    tasks = extract_tasks(target=_EXTRACT_TARGET, **kwargs)
    if not isinstance(task, int) or not 0 <= task < len(tasks):
        raise ValueError(f"Expected task in 0..{len(tasks) - 1} but got task={task!r}")
    return tasks[task].workload
