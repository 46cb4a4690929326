"""``dragon grammar``: the grammar a sampler constrains by, for a server to constrain by it.

    dragon grammar --format lark > dragon.lark              # vLLM's guidance backend
    dragon grammar --format gbnf --workload 'matmul(m=512,n=512,k=512)' --out matmul.gbnf

The sampling grammar (``training.grammars.constraints.sampling_grammar``: canonical layout, no name
ranges, keywords kept out of names), or with ``--workload`` the grammar narrowed to that
kernel's blocks, loop extents and MetaSchedule's categorical candidates on ``--target``; its
scripts may end with the end marker (``<end>``) unless ``--no-end-marker``.  ``--format lark``
writes llguidance's Lark (vLLM ``structured_outputs.grammar`` with the guidance backend),
``--format gbnf`` GBNF (``grammars.gbnf``: XGrammar, llama.cpp).  Exit codes: 0 written, 2 usage
errors (a bad format, workload or target, an --out that cannot be written).
"""

from __future__ import annotations

import os
import sys

from codegen.cli.workloads import cli_workload
from codegen.targets import RULE_SETS
from dragon_dsl.cli_kit import ExitCode, UsageError, examples, parse_target
from dragon_dsl.files import write_atomic

__all__ = ["register"]


def cmd_grammar(args) -> int:
    from training.grammars.gbnf import sampling_grammar_as

    target = parse_target(args.target)
    if args.rules is not None and args.rules not in RULE_SETS:
        raise UsageError(f"Expected --rules among {', '.join(RULE_SETS)} but got {args.rules!r}")
    if args.out is not None:
        folder = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(folder) or os.path.isdir(args.out):
            raise UsageError(f"--out {args.out}: not a file in an existing directory")
    wl = None
    if args.workload is not None:
        wl = cli_workload(args.workload)
    text = sampling_grammar_as(args.format, wl, target, args.rules,
                               end_marker=not args.no_end_marker)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_atomic(args.out, text)
        print(f"wrote {args.out} ({len(text)} bytes, {args.format})", file=sys.stderr)
    return ExitCode.OK


def register(subparsers) -> None:
    """Add ``dragon grammar`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "grammar", help="export the sampling grammar as Lark or GBNF, for a server",
        description="Write the grammar a sampler constrains by (canonical layout, no name "
                    "ranges, keywords kept out of names; with --workload narrowed to the "
                    "kernel) as llguidance Lark, which vLLM's guidance backend reads, or as "
                    "GBNF, which XGrammar and llama.cpp read.",
        **examples("dragon grammar --format lark > dragon.lark",
                   "dragon grammar --format gbnf --workload 'matmul(m=512,n=512,k=512)' "
                   "--target llvm --out matmul.gbnf"))
    p.add_argument("--format", required=True, choices=("lark", "gbnf"), help="lark or gbnf")
    p.add_argument("--workload", default=None,
                   help="narrow the grammar to this workload (a spec or TVMScript file)")
    p.add_argument("--target", default="llvm",
                   help="with --workload: whose MetaSchedule candidates (default llvm)")
    p.add_argument("--rules", default=None,
                   help="with --workload: the MetaSchedule rule set (default: the target's)")
    p.add_argument("--no-end-marker", action="store_true",
                   help="scripts only, without the optional <end> line after them")
    p.add_argument("--out", default=None, help="write to this file (default: stdout)")
    p.set_defaults(func=cmd_grammar)
