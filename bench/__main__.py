"""`python -m bench`: the whole benchmark; `--help` lists the options (bench/command.py)."""

from bench.command import bench

bench.main(prog_name="python -m bench")
