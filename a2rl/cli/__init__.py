"""The command line: `a2rl COMMAND ...` (cli/main.py), one module per command; `python -m a2rl.launch` and
`python -m a2rl.aggregate` are shims for `a2rl launch` and `a2rl aggregate`."""

from a2rl.cli.main import main

__all__ = ["main"]
