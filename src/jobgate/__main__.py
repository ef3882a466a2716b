"""`python -m jobgate`: the same command as the `jobgate` script (tests start processes this
way so that they run the interpreter and package under test)."""

from jobgate.cli import main

main()
