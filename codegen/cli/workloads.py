"""``dragon workloads``: list the operator families, show a workload, sample realistic specs.

- ``dragon workloads list [--json]``: one line per family, with its parameters and defaults.
- ``dragon workloads show SPEC_OR_PATH [--json] [--no-script]``: the TVMScript and a summary
  (identity, FLOPs, buffers, blocks with their loops, extents and spatial/reduce kinds);
  ``-`` reads TVMScript from standard input.
- ``dragon workloads sample [-n N] [--seed S] [--family F ...] [--json]``: canonical specs
  drawn from real-model shapes, one per line.

Exit codes (``ExitCode``): 0 ok, 2 a bad spec or bad usage (one line on stderr).  Also runs
standalone: ``python -m codegen.cli.workloads list``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dragon_dsl.cli_kit import ExitCode, UsageError, examples, read_source

from ..workloads.families import FAMILIES, WorkloadError

__all__ = ["MAX_SCRIPT_BYTES", "cli_workload", "main", "register", "summarize"]

# A TVMScript workload file is read whole and parsed by TVM: the command line refuses more.
MAX_SCRIPT_BYTES = 4 * 2**20


def cli_workload(spec: str):
    """``codegen.workloads.workload(spec)`` for a command-line flag: a TVMScript file must be a
    regular file of at most ``MAX_SCRIPT_BYTES`` (``file(path=/dev/zero)`` would be read without
    end); any problem is a UsageError."""
    from pathlib import Path

    from ..workloads import parse_spec, workload

    path = None
    try:
        family, kwargs = parse_spec(spec)
        if family == "file":
            path = Path(str(kwargs.get("path", "")))
    except (WorkloadError, ValueError):
        if Path(spec).exists():
            path = Path(spec)
    if path is not None and path.exists():
        if not path.is_file():
            raise UsageError(f"cannot read {path}: not a regular file")
        if path.stat().st_size > MAX_SCRIPT_BYTES:
            raise UsageError(f"cannot read {path}: larger than {MAX_SCRIPT_BYTES} bytes")
    try:
        return workload(spec)
    except ValueError as exc:  # WorkloadError
        raise UsageError(str(exc)) from None



# ---- list ----------------------------------------------------------------------------------

def _family_line(name: str) -> str:
    family = FAMILIES[name]
    params = ",".join(f'{k}="{v}"' if isinstance(v, str) and "," in v else f"{k}={v}"
                      for k, v in family.params.items())
    dtypes = f"  dtypes={'|'.join(family.dtypes)}" if "dtype" in family.params else ""
    return f"{name}({params}){dtypes}  # {family.doc}"


_MODEL_DOC = ("A tuning task of a real model (imported through Relax; tasks in the order the "
              "model calls them); batch= and seq= are optional.")


def _model_entry() -> dict[str, Any]:
    """The ``model(...)`` workloads: not an operator family, but listed with them."""
    from ..workloads.model_zoo import MODELS

    presets = sorted({p for entry in MODELS.values() for p in entry.presets})
    return {"family": "model", "params": {"name": next(iter(MODELS)), "preset": "tiny",
                                          "task": 0},
            "dtypes": [], "choices": {"name": list(MODELS), "preset": presets},
            "doc": _MODEL_DOC}


def cmd_list(args) -> int:
    model = _model_entry()
    if args.json:
        print(json.dumps([{"family": name, "params": dict(f.params),
                           "dtypes": list(f.dtypes) if "dtype" in f.params else [],
                           "choices": {k: list(v) for k, v in f.choices.items()},
                           "doc": f.doc} for name, f in FAMILIES.items()] + [model], indent=2))
    else:
        for name in FAMILIES:
            print(_family_line(name))
        params = ",".join(f"{k}={v}" for k, v in model["params"].items())
        print(f"model({params})  names={'|'.join(model['choices']['name'])}  "
              f"presets={'|'.join(model['choices']['preset'])}  # {model['doc']}")
    return ExitCode.OK


# ---- show ----------------------------------------------------------------------------------

def summarize(wl) -> dict[str, Any]:
    """A compact description of a workload's PrimFunc, for people and tools.

    >>> from codegen.workloads import workload
    >>> summarize(workload("matmul(m=8,n=8,k=4)"))["blocks"][0]["loops"]
    [['i', 8, 'spatial'], ['j', 8, 'spatial'], ['k', 4, 'reduce']]
    """
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..workloads.inspect import blocks, main_func, root_block

    func = main_func(wl)
    found = blocks(wl)
    written = {str(w.name) for b in found for w in b.writes}
    rows = [{"name": b.name,
             "loops": [[lp.name, lp.extent, "reduce" if lp.kind == "R" else "spatial"]
                       for lp in b.loops],
             "reads": [str(r.name) for r in b.reads], "writes": [str(w.name) for w in b.writes]}
            for b in found]
    root = root_block(wl)
    buffers = [{"name": p.name, "dtype": str(p.dtype), "shape": [int(d) for d in p.shape],
                "role": "out" if p.name in written else "in"} for p in func.params]
    buffers += [{"name": b.name, "dtype": str(b.dtype), "shape": [int(d) for d in b.shape],
                 "role": "tmp"} for b in (root.alloc_buffers if root is not None else [])]
    try:
        flops: float | None = float(estimate_tir_flops(wl.mod))
    except Exception:  # noqa: BLE001  an estimate only; some functions have none
        flops = None
    return {"spec": wl.spec, "canonical": _canonical(wl.spec), "identity": wl.identity,
            "flops": flops, "buffers": buffers, "blocks": rows}


def _canonical(spec: str) -> str | None:
    from ..workloads import canonical_spec

    try:
        return canonical_spec(spec)
    except (WorkloadError, ImportError):
        return None


def _flops_text(flops: float | None) -> str:
    return "unknown" if flops is None else f"{flops:,.0f}"


def cmd_show(args) -> int:
    from ..workloads import script_workload

    wl = script_workload(read_source("-", max_bytes=MAX_SCRIPT_BYTES)) if args.workload == "-" \
        else cli_workload(args.workload)
    info = summarize(wl)
    if args.json:
        print(json.dumps({**info, "script": wl.mod.script()}, indent=2))
        return ExitCode.OK
    if not args.no_script:
        print(wl.mod.script())
    print(f"spec:      {info['spec']}")
    if info["canonical"] and info["canonical"] != info["spec"]:
        print(f"canonical: {info['canonical']}")
    print(f"identity:  {info['identity']}")
    print(f"flops:     {_flops_text(info['flops'])}")
    print("buffers:")
    for b in info["buffers"]:
        print(f"  {b['role']:<4} {b['name']}: {b['dtype']}{b['shape']}")
    print("blocks:")
    for b in info["blocks"]:
        loops = " ".join(f"{n}:{e}{'(R)' if k == 'reduce' else ''}" for n, e, k in b["loops"])
        print(f"  {b['name']}: {loops}  reads {','.join(b['reads'])} -> {','.join(b['writes'])}")
    return ExitCode.OK


# ---- sample --------------------------------------------------------------------------------

def cmd_sample(args) -> int:
    from ..workloads import sample_workloads

    specs = sample_workloads(args.n, seed=args.seed, families=args.family)
    if args.json:
        print(json.dumps([{"spec": s, "family": s[:s.index("(")]} for s in specs], indent=2))
    else:
        for spec in specs:
            print(spec)
    return ExitCode.OK


# ---- wiring --------------------------------------------------------------------------------

def _guarded(command):
    def run(args) -> int:
        try:
            return command(args)
        except WorkloadError as exc:
            raise UsageError(str(exc)) from None
    return run


def _add_subcommands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="workloads_command", metavar="SUBCOMMAND")
    p = sub.add_parser("list", help="the operator families, their parameters and defaults",
                       **examples("dragon workloads list", "dragon workloads list --json"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guarded(cmd_list))

    p = sub.add_parser("show", help="a workload's TVMScript and a summary of its loops",
                       **examples("dragon workloads show 'matmul(m=64,n=64,k=64)'",
                                   "dragon workloads show 'model(name=bert,preset=tiny,task=3)' "
                                   "--no-script", "dragon workloads show kernel.py --json"))
    p.add_argument("workload", metavar="SPEC_OR_PATH",
                   help="a spec such as 'matmul(m=64,n=64,k=64)', a TVMScript .py file, "
                   "or - (TVMScript on stdin)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-script", action="store_true", help="print only the summary")
    p.set_defaults(func=_guarded(cmd_show))

    p = sub.add_parser("sample", help="distinct canonical specs from real-model shapes",
                       **examples("dragon workloads sample -n 20 --seed 1",
                                   "dragon workloads sample -n 5 --family conv2d --json"))
    p.add_argument("-n", type=int, default=10, help="how many (default 10)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--family", action="append", metavar="F",
                   help="only this family (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guarded(cmd_sample))

    def usage(_args) -> int:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE

    parser.set_defaults(func=usage)


def register(subparsers) -> None:
    """Add ``dragon workloads`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser("workloads", help="list, show and sample workloads",
                              description="List the operator families, show a workload, "
                                          "sample realistic specs.",
                              **examples("dragon workloads list",
                                          "dragon workloads show 'conv2d(h=56,w=56,ci=64,co=64)'",
                                          "dragon workloads sample -n 10"))
    _add_subcommands(p)


def main(argv: list[str] | None = None) -> int:
    """``dragon workloads`` on its own: ``main(["sample", "-n", "3"])``."""
    from dragon_dsl.cli import main as dragon

    return dragon(["workloads", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
