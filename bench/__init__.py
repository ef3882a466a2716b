"""jobgate's benchmark harness: jobgate side by side with PgQueuer and procrastinate.

`python -m bench` (or `jobgate bench --all` from a source checkout) runs every measurement
against one PostgreSQL server, writes the raw results to bench/results/ and regenerates
docs/benchmarks.md and its ratios chart. Machines are noisy: every figure that matters is a
ratio against peers measured in the same run. Never imported by jobgate itself or its tests,
except the one smoke test that keeps the harness from rotting.
"""
