"""Test support: reference implementations and synthetic data that only tests and benchmarks use.

Imported as ``tests.support.<module>``: pytest puts the repository root on the path
(``pythonpath`` in pyproject.toml), and so does benchmarks/_common.py for the benchmark scripts.
"""
