"""Prompts for the two tasks, defined once for dataset building, RL rollouts and evaluation.

*Construction* shows an unoptimized kernel; *refinement* shows a kernel, a script for it and
the script's measured latency. Plain-text prompts (for models trained from scratch) read::

    Dragon construction, target llvm          Dragon refinement, target cuda
    kernel:                                   kernel:
    <kernel description>                      <kernel description>
    script:                                   script (latency 12.35 us):
                                              <current script>
                                              <end>
                                              improved script:

The prompt ends with a newline right where the model's script begins, and a completion is the
script followed by ``SCRIPT_END`` (``"\\n<end>\\n"``): ``format_completion`` writes one for
training, the sampler stops at ``STOP`` (``"<end>"``), and ``split_completion`` takes the
script back out. ``<end>`` cannot start a Dragon statement, so it never occurs in a script.
The kernel description is ``training.prompts.kernel_text.describe`` (or the module's TVMScript, per
``PromptConfig.kernel``).

Instruct models get ``chat_messages``: a system message, and the plain prompt as the user
message; ``apply_chat_template`` renders them with the tokenizer's chat template, or, for a
tokenizer without one, gives back the plain prompt.

Prompts are deterministic (the same workload, target and script give the same bytes).
``PROMPT_VERSION`` names the format: any change to the text of a prompt, including the kernel
description, needs a new version, so that data built with one format is never mixed with
another (``tests/test_prompts.py`` pins the version-1 text).
"""

from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codegen.targets import as_target
from dragon_dsl.errors import DragonError
from dragon_dsl.printer import expand_ranges
from training.prompts.kernel_text import describe, tvmscript

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["KERNEL_FORMATS", "PROMPT_KEY", "PROMPT_VERSION", "SCRIPT_END", "STOP",
           "SYSTEM_PROMPT", "TILE_ORDERS", "CompletionError", "PromptConfig",
           "apply_chat_template", "chat_messages", "construction_prompt", "flip_tiles",
           "format_completion", "mark_tokenizer", "prompt_config_of", "refinement_prompt",
           "reformat", "split_completion", "target_name"]

PROMPT_VERSION = 2
# Version 3 is version 2 with each tile's factors written innermost first (tile_order="inner").
INNER_FIRST_VERSION = 3
TILE_ORDERS = ("outer", "inner")
# In a model's tokenizer config: the prompt format it was trained on (absent: PROMPT_VERSION).
PROMPT_KEY = "dragon_prompt_version"
STOP = "<end>"
SCRIPT_END = f"\n{STOP}\n"
KERNEL_FORMATS = ("compact", "tvmscript")
SYSTEM_PROMPT = ("You optimize tensor programs for TVM by writing Dragon scripts: MetaSchedule "
                 "schedules, one statement per line. Answer with the script only, then a line "
                 f"{STOP}.")
_SHORT_TARGETS = ("llvm", "cuda")


class CompletionError(DragonError, ValueError):
    """A completion without the end marker (generation stopped early, e.g. at max tokens).

    ``text`` holds the completion.
    """

    def __init__(self, message: str, *, text: str) -> None:
        self.text = text
        super().__init__(message)


@dataclass(frozen=True)
class PromptConfig:
    """How prompts are written; the defaults are the format of ``PROMPT_VERSION``.

    >>> PromptConfig(kernel="tvmscript").kernel
    'tvmscript'
    """

    kernel: str = field(default="compact", metadata={
        "help": "how the kernel is shown: 'compact' (training.prompts.kernel_text.describe) or "
                "'tvmscript' (the module's TVMScript, several times longer)"})
    include_target: bool = field(default=True, metadata={
        "help": "name the target (llvm, cuda) in the header line"})
    latency_digits: int = field(default=4, metadata={
        "help": "significant digits of the latency shown in refinement prompts"})
    system_prompt: str = field(default=SYSTEM_PROMPT, metadata={
        "help": "the system message of chat_messages (instruct models only)"})
    tile_order: str = field(default="outer", metadata={
        "help": "how the model writes a tile's factors: 'outer' (outermost first, as Dragon "
                "does) or 'inner' (innermost first, prompt format 3: the factor written last "
                "takes what is left of the loop, and it is the outermost; flip_tiles)"})

    def __post_init__(self) -> None:
        if self.kernel not in KERNEL_FORMATS:
            raise ValueError(f"Expected one of {', '.join(KERNEL_FORMATS)} but got "
                             f"kernel={self.kernel!r}")
        if self.tile_order not in TILE_ORDERS:
            raise ValueError(f"Expected one of {', '.join(TILE_ORDERS)} but got "
                             f"tile_order={self.tile_order!r}")
        if not isinstance(self.latency_digits, int) or not 1 <= self.latency_digits <= 17:
            raise ValueError(f"Expected an int in 1..17 but got "
                             f"latency_digits={self.latency_digits!r}")

    @property
    def version(self) -> int:
        """The prompt format's version: ``PROMPT_VERSION``, or 3 for innermost-first tiles."""
        return INNER_FIRST_VERSION if self.tile_order == "inner" else PROMPT_VERSION

    @classmethod
    def of_version(cls, version: int) -> PromptConfig:
        """The config of a dataset row's ``prompt_version``."""
        if version == PROMPT_VERSION:
            return cls()
        if version == INNER_FIRST_VERSION:
            return cls(tile_order="inner")
        raise ValueError(f"Expected prompt format {PROMPT_VERSION} or {INNER_FIRST_VERSION} "
                         f"but got prompt_version={version!r}")


_DEFAULT = PromptConfig()


def construction_prompt(workload: WorkloadLike, target: TargetLike,
                        config: PromptConfig | None = None) -> str:
    """The plain-text prompt to write a script for an unoptimized kernel.

    >>> print(construction_prompt("matmul(m=8,n=8,k=4)", "llvm"), end="")
    Dragon construction, target llvm
    kernel:
    input A float32[8, 4]
    input B float32[4, 8]
    output C float32[8, 8]
    block "C"
      loops i 8 S, j 8 S, k 4 R
      reads A, B; writes C
      init C[i, j] = 0
      C[i, j] += A[i, k] * B[k, j]
    script:
    """
    config = config or _DEFAULT
    return f"{_header('construction', target, config)}{_kernel(workload, config)}script:\n"


def refinement_prompt(workload: WorkloadLike, target: TargetLike, script: str, latency_s: float,
                      config: PromptConfig | None = None) -> str:
    """The plain-text prompt to improve ``script``, which runs the kernel in ``latency_s``.

    >>> text = refinement_prompt("matmul(m=8,n=8,k=4)", "cuda", "annotate root x=1\\n", 2.5e-6)
    >>> print(text[text.index("script ("):], end="")
    script (latency 2.5 us):
    annotate root x=1
    <end>
    improved script:
    """
    config = config or _DEFAULT
    if not isinstance(script, str):
        raise TypeError(f"Expected the current script as a str but got "
                        f"script={type(script).__name__}")
    latency = _latency_text(latency_s, config.latency_digits)
    return (f"{_header('refinement', target, config)}{_kernel(workload, config)}"
            f"script (latency {latency}):\n{format_completion(script, config)}"
            f"improved script:\n")


def format_completion(script: str, config: PromptConfig | None = None) -> str:
    """A script as the model writes it: the script with its name ranges written out
    (``dragon_dsl.printer.expand_ranges``: ``i0..i3`` as ``i0, i1, i2, i3``, the only form the
    sampling grammars admit, so that a model never learns a form its decoder forbids), then
    ``SCRIPT_END``.  Formatting the script gives the ranges back.

    >>> format_completion("annotate root x=1\\n")
    'annotate root x=1\\n<end>\\n'
    >>> format_completion("tile i [2, 4] -> i0, i1\\nloops C -> l0..l2\\n")
    'tile i [2, 4] -> i0, i1\\nloops C -> l0, l1, l2\\n<end>\\n'

    With ``config.tile_order == "inner"`` each tile's factors are written innermost first
    (``flip_tiles``).
    """
    text = expand_ranges(script.rstrip("\n"))
    if config is not None and config.tile_order == "inner":
        text = flip_tiles(text)
    return text + SCRIPT_END


def split_completion(text: str, *, require_end: bool = True,
                     config: PromptConfig | None = None) -> str:
    """The script of a completion: the text before ``STOP``, ending with one newline (or ``""``).

    Without ``STOP`` the completion was cut off and ``CompletionError`` is raised, unless
    ``require_end=False`` (for a sampler that strips the stop string it stopped at).  A model
    of ``config.tile_order == "inner"`` wrote its tiles innermost first; they come back in
    Dragon's order.

    >>> split_completion("tile i [8, 8] -> i0..i1\\n<end>\\n")
    'tile i [8, 8] -> i0..i1\\n'
    """
    index = text.find(STOP)
    if index < 0:
        if require_end:
            tail = text[-60:]
            raise CompletionError(f"Expected a completion ending with {STOP!r} but got "
                                  f"{len(text)} characters ending {tail!r} (cut off?)",
                                  text=text)
        index = len(text)
    script = text[:index].rstrip("\n")
    if config is not None and config.tile_order == "inner":
        script = flip_tiles(script)
    return script + "\n" if script.strip() else ""


_TILE_FACTORS = re.compile(r"^([ \t]*tile [^\s\[]+ \[)([^\]\n]*)\]", re.MULTILINE)


def flip_tiles(text: str) -> str:
    """``text`` with the factors of each ``tile`` statement in the opposite order: Dragon's
    outermost-first lists as a format-3 model writes them, innermost first, and back (the
    function is its own inverse).  Only ``tile`` lines change (not ``sample_tile``,
    ``partitioned_tile`` or ``split``).

    Why: a model writing outermost first learned the outer factors' usual small sizes, and the
    innermost factor took whatever was left of a long loop (``tile j [16, 2, 2, 800]`` of
    51,200 against MetaSchedule's ``[160, 32, 2, 5]``); innermost first, the last factor
    written, the outermost, takes it.

    >>> flip_tiles("tile j [160, 32, 2, 5] -> j0, j1, j2, j3\\nsplit k [none, 4] -> k0, k1\\n")
    'tile j [5, 2, 32, 160] -> j0, j1, j2, j3\\nsplit k [none, 4] -> k0, k1\\n'
    """
    def flip(m: re.Match) -> str:
        factors = [f.strip() for f in m.group(2).split(",")]
        return f"{m.group(1)}{', '.join(reversed(factors))}]"

    return _TILE_FACTORS.sub(flip, text)


def reformat(prompt: str, completion: str, config: PromptConfig) -> tuple[str, str]:
    """An example written in the default format (a dataset row's ``prompt`` and
    ``completion``) as ``config`` writes it: the script a refinement prompt shows and the
    completion's, with their tiles in ``config.tile_order``.

    >>> inner = PromptConfig(tile_order="inner")
    >>> reformat("kernel:\\nscript (latency 1 us):\\ntile i [4, 2] -> i0, i1\\n",
    ...          "tile i [8, 1] -> i0, i1\\n", inner)
    ('kernel:\\nscript (latency 1 us):\\ntile i [2, 4] -> i0, i1\\n', 'tile i [1, 8] -> i0, i1\\n')
    """
    if config.tile_order == "outer":
        return prompt, completion
    at = prompt.find("\nscript (latency ")
    if at >= 0:
        prompt = prompt[:at] + flip_tiles(prompt[at:])
    return prompt, flip_tiles(completion)


def prompt_config_of(model: Any) -> PromptConfig:
    """The prompt format a model was trained on, read from its tokenizer (a tokenizer, or a
    model directory's ``tokenizer_config.json``), where ``mark_tokenizer`` wrote it; the
    default format when it names none (every model before format 3, and a hub model).

    >>> prompt_config_of(None).tile_order
    'outer'
    """
    if model is None:
        return _DEFAULT
    if isinstance(model, (str, Path)):
        path = Path(model) / "tokenizer_config.json"
        try:
            kwargs = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a JSON tokenizer config ({exc})") from exc
    else:
        kwargs = getattr(model, "init_kwargs", None) or {}
    version = kwargs.get(PROMPT_KEY, PROMPT_VERSION) if isinstance(kwargs, dict) else None
    try:
        return PromptConfig.of_version(version)
    except ValueError as exc:
        raise ValueError(f"the model's tokenizer names {PROMPT_KEY}={version!r}: {exc}") from exc


def mark_tokenizer(tokenizer: Any, config: PromptConfig) -> None:
    """Record in ``tokenizer`` (and so in every ``tokenizer_config.json`` saved from it, each
    checkpoint's and the final model's) the prompt format its model is trained on."""
    if config.version == PROMPT_VERSION:
        tokenizer.init_kwargs.pop(PROMPT_KEY, None)
    else:
        tokenizer.init_kwargs[PROMPT_KEY] = config.version


def chat_messages(workload: WorkloadLike, target: TargetLike, script: str | None = None,
                  latency_s: float | None = None,
                  config: PromptConfig | None = None) -> list[dict[str, str]]:
    """Messages for an instruct model: the system prompt, then the plain prompt as the user's.

    Refinement when ``script`` and ``latency_s`` are given, construction when neither is.

    >>> [m["role"] for m in chat_messages("matmul(m=8,n=8,k=4)", "llvm")]
    ['system', 'user']
    """
    config = config or _DEFAULT
    if (script is None) != (latency_s is None):
        raise ValueError(f"Expected both script and latency_s (refinement) or neither "
                         f"(construction) but got script={'None' if script is None else '...'}, "
                         f"latency_s={latency_s!r}")
    if script is None:
        user = construction_prompt(workload, target, config)
    else:
        user = refinement_prompt(workload, target, script, latency_s, config)
    return [{"role": "system", "content": config.system_prompt},
            {"role": "user", "content": user}]


def apply_chat_template(tokenizer: PreTrainedTokenizerBase | None,
                        messages: list[dict[str, str]]) -> str:
    """The text to generate from: the tokenizer's chat template with the generation prompt, or
    the plain prompt (the user messages' text) when the tokenizer has no template.

    >>> apply_chat_template(None, [{"role": "system", "content": "s"},
    ...                            {"role": "user", "content": "p\\nscript:\\n"}])
    'p\\nscript:\\n'
    """
    for message in messages:
        if not isinstance(message, dict) or {"role", "content"} - set(message):
            raise ValueError(f"Expected messages as dicts with 'role' and 'content' but got "
                             f"{message!r}")
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)
    return "".join(m["content"] for m in messages if m["role"] == "user")


def target_name(target: TargetLike) -> str:
    """The target's kind as prompts name it: ``llvm`` or ``cuda``.

    >>> target_name("nvidia/nvidia-h100")
    'cuda'
    """
    if isinstance(target, str) and target in _SHORT_TARGETS:
        return target

    return str(as_target(target).kind.name)


def _header(task: str, target: TargetLike, config: PromptConfig) -> str:
    where = f", target {target_name(target)}" if config.include_target else ""
    return f"Dragon {task}{where}\nkernel:\n"


def _kernel(workload: WorkloadLike, config: PromptConfig) -> str:
    return describe(workload) if config.kernel == "compact" else tvmscript(workload)


def _latency_text(seconds: Any, digits: int) -> str:
    """``seconds`` in s, ms or us, with ``digits`` significant digits."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or \
            not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"Expected a positive, finite latency in seconds but got "
                         f"latency_s={seconds!r}")
    unit, scale = next(((u, s) for u, s in (("s", 1.0), ("ms", 1e-3)) if seconds >= s),
                       ("us", 1e-6))
    return f"{seconds / scale:.{digits}g} {unit}"
