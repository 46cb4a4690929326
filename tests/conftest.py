"""Shared test set-up: Hypothesis profiles, and MetaSchedule search spaces kept for the whole
session (the first design-space generation in a process costs 15 to 25 s)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Profiles are chosen by DRAGON_HYPOTHESIS_PROFILE: "ci" (the default run), "thorough".
settings.register_profile(
    "ci", max_examples=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("DRAGON_HYPOTHESIS_PROFILE", "ci"))
