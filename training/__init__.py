"""Datasets, prompts, constrained sampling, SFT, RL and evaluation (later issues)."""
