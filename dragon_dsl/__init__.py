"""Dragon: a compact, lossless script language for TVM MetaSchedule traces.

>>> from dragon_dsl import parse, format
>>> format('loops C->i, j')
'loops C -> i, j\\n'
"""

from .api import (
    Diagnostic,
    Encoded,
    check,
    encode,
    format,
    from_trace,
    to_schedule,
    to_trace,
    to_tvm_json,
)
from .ast import Program, Stmt
from .errors import (
    DragonError,
    DslSemanticError,
    DslSyntaxError,
    GrammarError,
    TraceError,
    UnsupportedError,
)
from .limits import DEFAULT_LIMITS, Limits
from .parser import parse
from .tvm_bridge import trace_json, tvm_json

__all__ = [
    "DEFAULT_LIMITS",
    "Diagnostic",
    "DragonError",
    "DslSemanticError",
    "DslSyntaxError",
    "Encoded",
    "GrammarError",
    "Limits",
    "Program",
    "Stmt",
    "TraceError",
    "UnsupportedError",
    "check",
    "encode",
    "format",
    "from_trace",
    "parse",
    "to_schedule",
    "to_trace",
    "to_tvm_json",
    "trace_json",
    "tvm_json",
]
