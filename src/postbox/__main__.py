"""`python -m postbox …`: the CLI without relying on the console script being on PATH."""

from postbox.console import main

main()
