"""`python -m jobgate.cli`."""

from jobgate.cli import main

main()
