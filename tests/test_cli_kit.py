"""Command-line flags made from config dataclasses: the default and help live in the config."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from codegen.measure import MeasureConfig
from dragon_dsl.cli_kit import UsageError, add_config_arguments, config_from_args, given_flags
from training.sampling import SamplingConfig


def _parser(config, **options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_config_arguments(parser, config, **options)
    return parser


def test_every_field_has_a_flag_with_its_help_and_default():
    parser = _parser(MeasureConfig)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    for f in dataclasses.fields(MeasureConfig):
        assert actions[f.name].default == f.default
        assert f.metadata["help"] in actions[f.name].help
    assert config_from_args(MeasureConfig, parser.parse_args([])) == MeasureConfig()


def test_flags_convert_to_the_field_types():
    parser = _parser(MeasureConfig, aliases={"run_timeout_s": ("--timeout",)})
    config = config_from_args(MeasureConfig, parser.parse_args(
        ["--repeat", "3", "--timeout", "2.5", "--no-flush-l2"]))
    assert config == MeasureConfig(repeat=3, run_timeout_s=2.5, flush_l2=False)


def test_only_selected_fields_and_choices():
    parser = _parser(SamplingConfig, only=("n", "backend"), aliases={"n": ("-n",)})
    args = parser.parse_args(["-n", "4", "--backend", "outlines"])
    assert config_from_args(SamplingConfig, args) == SamplingConfig(n=4, backend="outlines")
    assert not hasattr(args, "temperature")
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(["--backend", "nosuch"])


def test_a_value_the_config_refuses_is_a_usage_error():
    args = _parser(SamplingConfig).parse_args(["--temperature", "0"])
    with pytest.raises(UsageError, match="temperature"):
        config_from_args(SamplingConfig, args)


def test_nested_configs_make_flags_under_their_own_names():
    from training.evaluate import EvalConfig

    parser = _parser(EvalConfig, aliases={"attempts": ("-k",)})
    assert config_from_args(EvalConfig, parser.parse_args([])) == EvalConfig()
    args = parser.parse_args(["--temperature", "0.5", "--repeat", "2", "-k", "3",
                              "--kinds", "refinement", "--no-metaschedule"])
    config = config_from_args(EvalConfig, args)
    assert (config.sampling.temperature, config.sampling.top_p) == (0.5, 0.95)
    assert (config.measure.repeat, config.measure.min_repeat_ms) == (2, 10.0)
    assert (config.attempts, config.kinds, config.metaschedule) == (3, ("refinement",), False)
    assert config.settings()["temperature"] == 0.5 and "sampling" not in config.settings()
    assert "--build-timeout-s" not in parser.format_help()  # not in the nested field's flags


def test_given_only_tells_a_flag_given_from_its_default():
    parser = _parser(MeasureConfig, only=("repeat", "warmup"), given_only=True)
    args = parser.parse_args(["--repeat", "3"])
    assert given_flags(MeasureConfig, args) == {"repeat": 3}
    assert config_from_args(MeasureConfig, args) == MeasureConfig(repeat=3)


def test_a_command_with_defaults_of_its_own_shows_and_parses_them():
    own = MeasureConfig(limit_factor=10.0)
    parser = _parser(MeasureConfig, defaults=own)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    assert "(default: 10.0)" in actions["limit_factor"].help
    assert config_from_args(MeasureConfig, parser.parse_args([])) == own
    off = parser.parse_args(["--limit-factor", "0"])
    assert config_from_args(MeasureConfig, off) == MeasureConfig()


def test_dragon_optimize_stops_far_slower_scripts_early_and_datagen_does_not():
    from dragon_dsl.cli import build_parser
    from training.cli.common import measure_from_args
    from training.optimize.kernel import MEASURE

    parser = build_parser()
    optimize = parser.parse_args(["optimize", "matmul(m=8,n=8,k=8)"])
    assert measure_from_args(optimize) == MEASURE and MEASURE.limit_factor == 10.0
    assert MEASURE.build_limit_factor == 3.0
    builds = parser.parse_args(["optimize", "matmul(m=8,n=8,k=8)", "--build-limit-factor", "5"])
    assert measure_from_args(builds).build_limit_factor == 5.0
    off = parser.parse_args(["optimize", "matmul(m=8,n=8,k=8)", "--limit-factor", "0"])
    assert measure_from_args(off).limit_factor == 0.0
    datagen = parser.parse_args(["datagen", "--out", "x"])
    assert measure_from_args(datagen).limit_factor == 0.0
    assert measure_from_args(datagen).build_limit_factor is None
