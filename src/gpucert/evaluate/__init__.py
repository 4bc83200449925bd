"""Evaluation: every suite test's decision over evidence, spec and baselines. Pure rules live in rules/, robust
statistics in stats.py; nothing here talks to a cluster or a GPU."""
