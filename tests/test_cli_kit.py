"""Command-line flags made from config dataclasses: the default and help live in the config."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from codegen.measure import MeasureConfig
from dragon_dsl.cli_kit import UsageError, add_config_arguments, config_from_args
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
