"""How a model writes its attempts for ``run_eval``: one small interface, one implementation per
way a model is served, chosen once from the ``--model`` value.

- ``LocalModel``: a local model or SFT/RL run directory, sampled by schedule-aware decoding
  (``training.sampling.schedule_aware``): every statement is applied as it is written.
- ``HttpModel`` (``http_model``): an OpenAI-compatible endpoint (``http://host:port/v1#model``),
  sampled by the server, under our grammar where the server takes one; its attempts are
  measured as they come.

Each returns the attempts of one prompt as sample dicts: ``script`` (what is measured),
``finish_reason`` ("end" or "length") and what the way of sampling knows besides.

>>> is_http("rl=http://localhost:8000/v1#rl".partition("=")[2])
True
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from training.evaluate.errors import EvalError
from training.evaluate.http_model import HttpModel
from training.prompts.templates import PromptConfig, prompt_config_of
from training.sampling import load
from training.sampling.schedule_aware import sample_schedule_aware
from training.train.run_dir import model_dir

if TYPE_CHECKING:
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["Generator", "LocalModel", "create", "is_http"]


class Generator(Protocol):
    """A model that writes attempts; ``source`` is what the evaluation's manifest records."""

    name: str
    source: str
    prompt_config: PromptConfig  # the prompt format the model reads and writes

    def generate(self, prompt: str, workload: WorkloadLike, target: TargetLike, config: Any,
                 seed: int) -> list[dict[str, Any]]:
        """``config.attempts`` samples for ``prompt`` (``config``: an ``EvalConfig``)."""
        ...

    def close(self) -> None:
        """Free what generating held (a model in memory)."""
        ...


def is_http(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


def create(name: str, spec: str) -> Generator:
    """The generator for ``--model NAME=SPEC``: an HTTP endpoint or a local directory; a spec
    that cannot be used raises (``EvalError``, ``RunError``) before anything is measured."""
    if is_http(spec):
        return HttpModel(name, spec)
    return LocalModel(name, spec)


class LocalModel:
    """A local model or run directory (its ``final/``), loaded on first use."""

    def __init__(self, name: str, path: str) -> None:
        self.name, self.source = name, str(model_dir(path))
        try:
            self.prompt_config = prompt_config_of(self.source)
        except ValueError as exc:
            raise EvalError(f"model {self.name!r}: {exc}") from None
        self._loaded: tuple[Any, Any] | None = None

    def generate(self, prompt: str, workload: WorkloadLike, target: TargetLike, config: Any,
                 seed: int) -> list[dict[str, Any]]:
        if self._loaded is None:
            self._loaded = self._load()
        model, tokenizer = self._loaded
        samples = sample_schedule_aware(model, tokenizer, prompt, workload, target,
                                        config.attempt_sampling(seed))
        return [{"script": s.text, "finish_reason": s.finish_reason, "tokens": s.n_tokens,
                 "applies_live": s.applies, "resampled": s.resampled} for s in samples]

    def _load(self) -> tuple[Any, Any]:
        try:
            return load(self.source)
        except Exception as exc:  # noqa: BLE001  transformers, safetensors and torch all raise
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                         type(exc).__name__)
            raise EvalError(f"model {self.name!r}: cannot load {_culprit(Path(self.source))}: "
                            f"{first[:300]}") from None

    def close(self) -> None:
        self._loaded = None


def _culprit(folder: Path) -> Path:
    """The first file of a model folder that does not read (a cut weights file, an edited
    config), else the folder."""
    import json

    from safetensors import safe_open

    for file in [folder / "config.json", *sorted(folder.glob("tokenizer*.json"))]:
        try:
            json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, RecursionError):
            return file
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), "pt") as weights:
                for key in weights.keys():  # noqa: SIM118  (safe_open is not a mapping)
                    weights.get_slice(key)
        except Exception:  # noqa: BLE001  safetensors' errors for a cut or foreign file
            return file
    return folder
