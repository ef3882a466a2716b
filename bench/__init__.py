"""jobgate's benchmark harness: jobgate side by side with PgQueuer and procrastinate.

`python -m bench` (from a source checkout; bench/command.py holds its options) runs every
measurement against one PostgreSQL server, writes the raw results to bench/results/ and
regenerates docs/benchmarks.md and its ratios chart. Machines are noisy: every figure that
matters is a ratio against peers measured in the same run. Never imported by jobgate itself;
the tests import it to keep the harness from rotting (tests/ops, tests/e2e/test_bench.py).
"""
