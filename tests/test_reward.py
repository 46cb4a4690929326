"""``train.reward``: rewards measured by the Evaluator against a baseline of the same session.
A deliberately wrong kernel scores below every correct one, a faster correct kernel above a
slower one, a refinement that returns its start earns no bonus, and one outlier is clipped."""

from __future__ import annotations

import math

import pytest

from codegen.measure import MeasureConfig, Outcome, Status
from training.train.reward import RewardConfig, Rewarder, score

LLVM = {"kind": "llvm", "num-cores": 2}
SPEC = "matmul(m=128,n=128,k=128)"
# The unscheduled kernel, written as a script: no transformation at all.
NOOP = 'block "C" -> b0\n'
# The accumulator kept in int8 (a real schedule primitive, used unsafely): wrong outputs.
WRONG = 'block "C" -> b0\ncache_write b0 0 "local" -> b1\n@UnsafeSetDType(b0; 0, "int8")\n'


@pytest.fixture(scope="module")
def fast_script(llvm2_evaluator):
    """The fastest of 8 MetaSchedule samples (parallel, vectorized), as a canonical script,
    chosen by the session's Evaluator on LLVM (conftest); the rewards measure it again."""
    import dragon_dsl
    from codegen.search import sample_traces
    from codegen.workloads import workload

    wl = workload(SPEC)
    traces = sample_traces(wl.mod, LLVM, "llvm", 8, seed=3)
    scripts = [dragon_dsl.from_trace(t, postproc="auto", postproc_set="llvm", workload=wl,
                                     target=LLVM) for t in traces]
    outcomes = llvm2_evaluator.evaluate(wl, scripts)
    best = min((o.latency_s, s) for o, s in zip(outcomes, scripts, strict=True) if o.ok)
    return best[1]


@pytest.fixture(scope="module")
def rewarder():
    with Rewarder(LLVM, cache=False, builders=1,
                  measure=MeasureConfig(repeat=5, min_repeat_ms=10)) as r:
        yield r


def test_levels_by_stage():
    config = RewardConfig()
    assert score(Outcome(Status.PARSE_ERROR), 1.0).reward == config.malformed
    assert score(Outcome(Status.APPLY_ERROR), 1.0).reward == config.malformed
    for status in (Status.BUILD_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT):
        assert score(Outcome(status), 1.0).reward == config.broken
    assert score(Outcome(Status.INCORRECT), 1.0).reward == config.incorrect
    with pytest.raises(ValueError, match="needs a device"):
        score(Outcome(Status.BUILT), 1.0)


def test_bonus_is_a_clipped_log_speedup():
    twice, half = (score(Outcome(Status.CORRECT, latency_s=t), 2.0).reward for t in (1.0, 4.0))
    assert twice - 0.5 == pytest.approx(0.5 - half)           # symmetric in log speedup
    assert twice == pytest.approx(0.5 + 0.5 * math.log(2) / math.log(16))
    outlier = score(Outcome(Status.CORRECT, latency_s=1e-6), 1.0)
    assert outlier.reward == 1.0 and outlier.speedup == pytest.approx(1e6)
    slowest = score(Outcome(Status.CORRECT, latency_s=1e6), 1.0)
    assert slowest.reward == 0.0 > RewardConfig().incorrect     # still above any incorrect
    assert score(Outcome(Status.CORRECT, latency_s=1.0), None).reward == 0.5


def test_a_config_where_a_slow_correct_kernel_ties_an_incorrect_one_is_refused():
    with pytest.raises(ValueError, match="every correct kernel outranks"):
        RewardConfig(incorrect=0.0)


def test_measured_rewards_rank_wrong_slow_and_fast_kernels(rewarder, fast_script):
    from codegen.workloads import workload

    report = rewarder.score_group(workload(SPEC), [WRONG, NOOP, fast_script, "not a script"])
    wrong, slow, fast, garbage = report.scored
    assert wrong.outcome.status is Status.INCORRECT and wrong.reward == -0.5
    assert garbage.reward == -1.0
    assert slow.outcome.ok and fast.outcome.ok
    # MetaSchedule's best sample beats the unscheduled kernel (by 1.17x to 4x here, with other
    # work on the cores: any margin above 1 is the claim, the ranking below is the proof).
    assert fast.speedup > 1.0, "MetaSchedule's best sample beats the unscheduled kernel"
    assert fast.reward > slow.reward > wrong.reward > garbage.reward
    assert report.reference_s and report.noise is not None
    assert report.shares() == {"apply": 0.75, "build": 0.75, "correct": 0.5}


def test_refinement_is_measured_against_the_start_in_this_session(rewarder, fast_script):
    from codegen.workloads import workload

    wl = workload(SPEC)
    respaced = 'block   "C"  ->  b0\n'  # the start, written differently
    report = rewarder.score_group(wl, [fast_script, NOOP, respaced], start_script=NOOP)
    faster, same, again = report.scored
    assert faster.reward > 0.5 and faster.speedup > 1.0
    for returned in (same, again):
        assert returned.same_as_start and returned.reward == 0.5, "the start earns no bonus"
    # The reference is the start measured now, not a latency from the prompt.
    assert report.reference_s and report.reference_status == "correct"


def test_trl_reward_function_signature(rewarder):
    rewards = rewarder(prompts=["p", "p", "q"], completions=[NOOP + "<end>\n", WRONG, NOOP],
                       workload=[SPEC, SPEC, "matmul(m=16,n=16,k=16)"])
    assert len(rewards) == 3 and rewards[1] == -0.5 and rewards[0] > -0.5 and rewards[2] > -0.5


class _Fixed:
    """An evaluator that answers each script with the outcome given for it (no measuring): the
    re-timing logic on its own, with latencies that differ by construction."""

    target = "llvm"

    def __init__(self, latencies: dict[str, float]):
        self.latencies = latencies

    def evaluate(self, workload, scripts):
        return [Outcome(Status.CORRECT, latency_s=self.latencies[s], repeats=[self.latencies[s]])
                for s in scripts]

    def evaluate_modules(self, workload, modules):
        return {name: Outcome(Status.CORRECT, latency_s=8.0, repeats=[8.0]) for name in modules}


@pytest.mark.parametrize("first,again", [(1.0, 2.0), (2.0, 1.0)])
def test_the_best_is_retimed_and_the_slower_timing_stands(first, again):
    from codegen.workloads import workload

    rewarder = Rewarder(evaluator=_Fixed({"a": first, "b": 4.0}), timer=_Fixed({"a": again}))
    report = rewarder.score_group(workload("matmul(m=8,n=8,k=8)"), ["a", "b"])
    best, other = report.scored
    assert best.outcome.latency_s == max(first, again)  # never the faster of the two
    assert best.speedup == pytest.approx(8.0 / max(first, again))
    assert other.outcome.latency_s == 4.0
    assert report.noise == pytest.approx(abs(again - first) / first)


def _max_at_k_by_enumeration(rewards, k):
    """Each reward's value by brute force: the mean best of every k-subset that holds it."""
    import itertools

    out = []
    for i in range(len(rewards)):
        subsets = [s for s in itertools.combinations(range(len(rewards)), k) if i in s]
        out.append(sum(max(rewards[j] for j in s) for s in subsets) / len(subsets))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_max_at_k_is_the_mean_best_of_the_subsets_that_hold_each_completion(seed):
    import random

    from training.train.reward import max_at_k

    rng = random.Random(seed)
    n = rng.randint(1, 9)
    k = rng.randint(1, n)
    # repeated values too: ties must not change a value
    rewards = [rng.choice([-1.0, -0.5, 0.5, rng.uniform(0, 1)]) for _ in range(n)]
    assert max_at_k(rewards, k) == pytest.approx(_max_at_k_by_enumeration(rewards, k))


def test_max_at_k_pays_a_risky_group_more_than_a_safe_one():
    """The reason for best_of: a safe completion (always 0.6) against a risky one (0.9 or 0.3,
    the same mean): under the mean both are worth 0.6; under the best of 4, the risky kind's
    completions are worth more than the safe kind's."""
    from training.train.reward import max_at_k

    rewards = [0.6, 0.6, 0.6, 0.6, 0.9, 0.3, 0.9, 0.3]
    values = max_at_k(rewards, 4)
    safe, risky = values[:4], values[4:]
    assert sum(safe) / 4 < sum(risky) / 4
    assert max_at_k(rewards, 1) == rewards
    with pytest.raises(ValueError, match="k=9"):
        max_at_k(rewards, 9)


def test_best_of_replaces_the_groups_rewards():
    from codegen.workloads import workload

    spec = "matmul(m=8,n=8,k=8)"
    latencies = {"a\n": 1.0, "b\n": 4.0, "c\n": 2.0, "d\n": 8.0}  # as split_completion ends
    plain = Rewarder(evaluator=_Fixed(latencies), config=RewardConfig(retime_best=False))
    best2 = Rewarder(evaluator=_Fixed(latencies),
                     config=RewardConfig(retime_best=False, best_of=2))
    args = dict(prompts=["p"] * 4, completions=list("abcd"), workload=[workload(spec)] * 4)
    mean_rewards, best_rewards = plain(**args), best2(**args)
    assert best_rewards == pytest.approx(_max_at_k_by_enumeration(mean_rewards, 2))
    assert best_rewards[0] == pytest.approx(mean_rewards[0])  # the group's best keeps its own
    with pytest.raises(ValueError, match="best_of"):
        RewardConfig(best_of=0)


def test_a_format_3_policys_completions_are_scored_in_dragons_order():
    """A policy of prompt format 3 writes its tiles innermost first: the reward measures the
    script in Dragon's order (``Rewarder.prompt_config``, set from the policy's tokenizer)."""
    from codegen.workloads import workload
    from training.prompts.templates import PromptConfig

    dragon = "tile i [4, 2] -> i0, i1\n"
    rewarder = Rewarder(evaluator=_Fixed({dragon: 1.0}), config=RewardConfig(retime_best=False))
    rewarder.prompt_config = PromptConfig(tile_order="inner")
    args = dict(prompts=["p"], workload=[workload("matmul(m=8,n=8,k=8)")])
    assert rewarder(completions=["tile i [2, 4] -> i0, i1\n<end>\n"], **args)[0] > 0
    with pytest.raises(KeyError):  # as written, not the script measured
        Rewarder(evaluator=_Fixed({dragon: 1.0}), config=RewardConfig(retime_best=False))(
            completions=["tile i [2, 4] -> i0, i1\n<end>\n"], **args)
