"""What each of schedule-aware decoding's speed-ups buys (``training.sampling.schedule_aware``).

The built-in model writes ``--n`` construction scripts for each workload four ways, each adding
one change to the one before:

- ``before``: torch's own threads for the forward passes (every core), a ``DynamicCache`` that
  concatenates the whole cache every step, each row's statement grammar built anew;
- ``one thread``: ``ScheduleAwareConfig.torch_threads=1`` (the default), the other core left to
  the workers applying statements beside the forward pass;
- ``+ cache in place``: the cache's layers append in place into room that doubles;
- ``+ grammars shared``: rows of one workload in the same state (the same statements applied)
  share one statement grammar (the default decoder: all three).

The four alternate, ``--repeats`` times, after one warm-up each.  Prints the median seconds of
each, each one's ratio to ``before``, and whether every way wrote the same scripts as
``before`` (the same seed; the changes move no distribution, but a different thread count may
round a logit differently).

    python benchmarks/bench_decode_speed.py [--n 32] [--repeats 3] [--busy 1]

``--busy N`` runs N processes that keep a core busy beside every run, as a shared machine, or
dragon's own measuring workers, would.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import sys
import time
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WORKLOADS = ["conv2d(n=1,h=28,w=28,ci=48,co=64,kh=3,kw=3,stride=1,pad=1)",
             "matmul(m=256,n=256,k=256)", "softmax(m=256,n=1024)"]
WAYS = ["before", "one thread", "+ cache in place", "+ grammars shared"]


class _Forgetful(OrderedDict):
    """A grammar memo that keeps nothing: every row's grammar is built anew."""

    def __setitem__(self, key, value) -> None:
        pass


@contextlib.contextmanager
def _way(name: str):
    """The decoder as it is with the changes up to ``name`` (the later ones undone)."""
    from training.sampling import schedule_aware as sa

    growing, init = sa._growing_cache, sa._Decoder.__init__

    def forgetful_init(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self.grammars = _Forgetful()

    at = WAYS.index(name)
    if at < 2:
        sa._growing_cache = lambda cache_class: cache_class()
    if at < 3:
        sa._Decoder.__init__ = forgetful_init
    try:
        yield sa.ScheduleAwareConfig(torch_threads=0 if at == 0 else 1)
    finally:
        sa._growing_cache, sa._Decoder.__init__ = growing, init


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=WORKLOADS)
    parser.add_argument("--busy", type=int, default=0,
                        help="Processes keeping a core busy beside the runs (0: none).")
    args = parser.parse_args()
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.busy)]
    for burner in burners:
        burner.start()
    try:
        _compare(args)
    finally:
        for burner in burners:
            burner.terminate()


def _burn() -> None:
    """One core kept busy (pure Python: one thread)."""
    while True:
        sum(i * i for i in range(100_000))


def _compare(args: argparse.Namespace) -> None:
    import torch

    from codegen.workloads import workload
    from training.models.builtin import DEFAULT_MODEL
    from training.optimize.propose import prompt_for
    from training.sampling.config import SamplingConfig
    from training.sampling.generate import load
    from training.sampling.schedule_aware import sample_schedule_aware

    model, tokenizer = load(str(DEFAULT_MODEL))
    print(f"torch threads: {torch.get_num_threads()}; {args.n} scripts a run, median of "
          f"{args.repeats}; {args.busy} busy process(es) beside")
    print(f"{'workload':<58} " + " ".join(f"{w:>17}" for w in WAYS))
    for spec in args.workloads:
        wl = workload(spec)
        prompt = prompt_for(wl, "llvm")

        def run(way: str, n: int, seed: int = 0) -> tuple[float, list[str]]:
            with _way(way) as aware:
                start = time.perf_counter()
                samples = sample_schedule_aware(model, tokenizer, prompt, wl, "llvm",
                                                SamplingConfig(n=n, seed=seed), aware=aware)
                return time.perf_counter() - start, [s.text for s in samples]

        for way in WAYS:
            run(way, 2, seed=9)  # start the workers, compile the whole-script grammar
        seconds: dict[str, list[float]] = {w: [] for w in WAYS}
        texts: dict[str, list[str]] = {}
        for _ in range(args.repeats):
            for way in WAYS:
                took, texts[way] = run(way, args.n)
                seconds[way].append(took)
        medians = {w: statistics.median(s) for w, s in seconds.items()}
        cells = [f"{medians[w]:6.1f} s {medians['before'] / medians[w]:5.2f}x"
                 + (" " if texts[w] == texts["before"] else "*") for w in WAYS]
        print(f"{spec:<58} " + " ".join(f"{c:>17}" for c in cells))
    print("x: before's seconds over the way's; *: its scripts differ from before's")


if __name__ == "__main__":
    main()
