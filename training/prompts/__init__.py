"""Prompts: the compact kernel description (``kernel_text``) and the versioned prompts of the two
tasks, construction and refinement (``templates``).  Imports only ``codegen`` and ``dragon_dsl``.
"""

from training.prompts.kernel_text import describe, token_counts, tvmscript
from training.prompts.templates import (
    KERNEL_FORMATS,
    PROMPT_KEY,
    PROMPT_VERSION,
    SCRIPT_END,
    STOP,
    SYSTEM_PROMPT,
    TILE_ORDERS,
    CompletionError,
    PromptConfig,
    apply_chat_template,
    chat_messages,
    construction_prompt,
    flip_tiles,
    format_completion,
    mark_tokenizer,
    prompt_config_of,
    refinement_prompt,
    reformat,
    split_completion,
    target_name,
)

__all__ = ["KERNEL_FORMATS", "PROMPT_KEY", "PROMPT_VERSION", "SCRIPT_END", "STOP",
           "SYSTEM_PROMPT", "TILE_ORDERS", "CompletionError", "PromptConfig",
           "apply_chat_template", "chat_messages", "construction_prompt", "describe",
           "flip_tiles", "format_completion", "mark_tokenizer", "prompt_config_of",
           "refinement_prompt", "reformat", "split_completion", "target_name", "token_counts",
           "tvmscript"]
