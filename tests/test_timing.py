"""``time_kernel`` against a stand-in for TVM's time evaluator that counts the kernel's runs:
how many runs a timing costs, and when the cutoff stops it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from codegen.measure import MeasureConfig
from codegen.measure.timing import time_kernel


class FakeKernel:
    """A kernel taking ``seconds`` a run; each evaluator call runs it once untimed first, as
    TVM's does, then ``number`` x ``repeat`` timed runs."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.runs, self.calls = seconds, 0, []
        self.entry_name = "main"

    def time_evaluator(self, entry, dev, number=1, repeat=1, min_repeat_ms=0, f_preproc=""):
        def call(*args):
            self.calls.append((number, repeat, f_preproc))
            self.runs += 1 + number * repeat
            return SimpleNamespace(mean=self.seconds, results=[self.seconds] * repeat)
        return call


DEV = SimpleNamespace(sync=lambda: None)
CONFIG = MeasureConfig(repeat=9, min_repeat_ms=20.0, warmup=1)


def test_a_slow_kernels_repeats_are_timed_in_one_call():
    kernel = FakeKernel(0.05)  # longer than a repeat: number 1
    times = time_kernel(kernel, DEV, [[]], CONFIG)
    assert times == [0.05] * 9
    # The calibrating call (its untimed run is the warm-up) and one call of nine repeats: 12
    # runs, where nine calls of their own would have made 20.
    assert kernel.calls == [(1, 1, ""), (1, 9, "")] and kernel.runs == 12


def test_a_fast_kernel_is_run_enough_times_to_last_a_repeat():
    kernel = FakeKernel(0.001)
    assert len(time_kernel(kernel, DEV, [[]], CONFIG)) == 9
    assert kernel.calls[-1] == (20, 9, "")


@pytest.mark.parametrize("seconds,cut", [(0.05, True), (0.01, False), (0.001, False)])
def test_the_cutoff_stops_only_a_kernel_past_it_whose_one_run_lasts_a_repeat(seconds, cut):
    # 0.01 s is past the 5 ms cutoff, but one run is shorter than a repeat (20 ms): a single
    # call of it is not trusted to decide, and it gets every repeat.
    kernel = FakeKernel(seconds)
    times = time_kernel(kernel, DEV, [[]], CONFIG, cutoff_s=0.005)
    if cut:  # the calibrating call's one timed run, and nothing after it
        assert times == [seconds] and kernel.runs == 2
    else:
        assert len(times) == 9


def test_rotated_inputs_or_a_flush_time_each_repeat_in_its_own_call():
    kernel = FakeKernel(0.05)
    assert len(time_kernel(kernel, DEV, [[], []], CONFIG)) == 9
    assert kernel.calls[1:] == [(1, 1, "")] * 9
    kernel = FakeKernel(0.05)
    time_kernel(kernel, DEV, [[]], CONFIG, preproc="l2_cache_flush_cuda")
    assert kernel.calls[1:] == [(1, 1, "l2_cache_flush_cuda")] * 9


def test_more_warmup_runs_before_the_calibration():
    kernel = FakeKernel(0.05)
    time_kernel(kernel, DEV, [[]], MeasureConfig(repeat=3, warmup=3))
    assert kernel.calls == [(1, 1, "")] * 3 + [(1, 3, "")]
