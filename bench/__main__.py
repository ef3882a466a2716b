"""`python -m bench`: the whole benchmark (`jobgate bench --all`); options as `jobgate bench`."""

from jobgate.cli.bench import bench

bench.main(prog_name="python -m bench", default_map={"everything": True})
