"""Relax modules from files a user gives: ``tvm.ir.save_json`` output or TVMScript, prepared
(legalized and fused) as the zoo's models are, so ``models.module_tasks`` splits them into tasks.
"""

from __future__ import annotations

__all__ = ["load_module_file"]


def load_module_file(path: str):
    """A Relax IRModule from a file, prepared (``prepare_module``): ``tvm.ir.save_json``
    output (``.json``) or TVMScript source defining one ``@I.ir_module`` class (``.py``).
    Raises ValueError naming the file and what is wrong with it.

    >>> load_module_file("bert.json")  # doctest: +SKIP
    """
    import tvm
    from tvm import relax

    from ..targets import tvm_message
    from .models import prepare_module
    from .specs import _script_segment

    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the Relax module {path}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    source = text if path.endswith(".json") else _script_segment(text, path)
    try:
        mod = tvm.ir.load_json(source) if path.endswith(".json") else \
            tvm.script.from_source(source)
    except Exception as exc:  # noqa: BLE001  TVM's parsers raise many kinds
        kind = "TVM's JSON" if path.endswith(".json") else "TVMScript"
        raise ValueError(f"{path}: not a Relax module in {kind}: {tvm_message(exc)}") from None
    if not isinstance(mod, tvm.IRModule) or not any(
            isinstance(f, relax.Function) for f in mod.functions.values()):
        raise ValueError(f"{path}: expected an IRModule with a Relax function but got "
                         f"{type(mod).__name__}")
    if "main" not in {gv.name_hint for gv in mod.get_global_vars()}:
        raise ValueError(f"{path}: expected a Relax function named 'main' in the module")
    return prepare_module(mod)
