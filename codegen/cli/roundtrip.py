"""``dragon roundtrip``: a workload, a MetaSchedule trace, its script, the decoded trace, and the
checks that the round trip is exact."""

from __future__ import annotations

import sys
import time

from dragon_dsl.cli_kit import ExitCode, UsageError, examples

from ..targets import RULE_SETS, default_rules, schedule_of

__all__ = ["register", "run_roundtrip"]


def _say(text: str = "") -> None:
    print(text, flush=True)


def run_roundtrip(spec: str, target: str, rules: str, seed: int) -> int:
    import tvm_ffi

    import dragon_dsl

    from ..search import sample_traces
    from ..targets import postproc_set
    from ..workloads import workload

    wl = workload(spec)
    _say(f"== workload: {wl.spec}")
    _say(wl.mod.script())
    _say(f"== MetaSchedule: design space and a sampled trace ({rules} rules on {target}); "
         "the first design-space generation in a process takes 15-25 s ...")
    start = time.time()
    traces = sample_traces(wl.mod, target, rules, 1, seed=seed)
    if not traces:
        _say("no trace survived the postprocessors; try another --seed")
        return ExitCode.FINDINGS
    trace = traces[0]
    python_form = "\n".join(trace.as_python())
    _say(f"   ({time.time() - start:.1f} s)")
    _say("== TVM's Python form of the trace")
    _say(python_form)
    script = dragon_dsl.from_trace(trace, postproc="auto", postproc_set=postproc_set(rules),
                                   workload=wl)
    _say("== the Dragon script (postprocessing elided: `postproc auto`)")
    _say(script)
    decoded = dragon_dsl.to_trace(script, workload=wl, target=target)
    same_json = dragon_dsl.trace_json(decoded) == dragon_dsl.trace_json(trace)
    a, b = schedule_of(wl), schedule_of(wl)
    trace.apply_to_schedule(a, remove_postproc=False)
    decoded.apply_to_schedule(b, remove_postproc=False)
    same_ir = tvm_ffi.structural_equal(a.mod, b.mod)
    _say("== decoded back to a TVM trace")
    _say(f"   instructions: {len(trace.insts)} original, {len(decoded.insts)} decoded")
    _say(f"   identical trace JSON (kinds, wiring, typed attrs, decisions): {same_json}")
    _say(f"   structurally equal scheduled modules: {same_ir}")
    try:
        import bpe_openai

        enc = bpe_openai.get_encoding("cl100k_base")
        n_script, n_python = len(enc.encode(script)), len(enc.encode(python_form))
        _say(f"   cl100k tokens: script {n_script}, Python form {n_python} "
             f"({n_script / n_python:.0%})")
    except ImportError:
        pass
    return ExitCode.OK if same_json and same_ir else ExitCode.FINDINGS


def cmd_roundtrip(args) -> int:
    from ..targets import as_target
    from .workloads import cli_workload

    cli_workload(args.workload)
    try:  # bad flags are usage errors before the long part starts
        rules = args.rules or default_rules(as_target(args.target))
    except ValueError as exc:  # WorkloadError, TargetError
        raise UsageError(str(exc)) from None
    if args.seed < 0:
        raise UsageError(f"Expected --seed >= 0 but got --seed {args.seed}")
    return run_roundtrip(args.workload, args.target, rules, args.seed)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "roundtrip",
        help="show a workload, a MetaSchedule trace, its script and the exact round trip",
        description="Sample a MetaSchedule trace for a workload, encode it as a script, decode "
                    "it back and check that the round trip is exact (about 30 s on 2 cores).",
        **examples("dragon roundtrip",
                   "dragon roundtrip --workload 'conv2d(h=14,w=14,ci=16,co=16)' "
                   "--target cuda --rules cuda-tensorcore"))
    p.add_argument("--workload", default="matmul(m=128,n=128,k=128)",
                   help="a workload spec (default: matmul(m=128,n=128,k=128))")
    p.add_argument("--target", default="llvm", help="'llvm' or 'cuda' (H100 tag)")
    p.add_argument("--rules", default=None, choices=sorted(RULE_SETS),
                   help="rule set (default: from the target)")
    p.add_argument("--seed", type=int, default=1, help="seed of the trace sampling (default: 1)")
    p.set_defaults(func=cmd_roundtrip)


if __name__ == "__main__":
    sys.exit(run_roundtrip("matmul(m=128,n=128,k=128)", "llvm", "llvm", 1))
