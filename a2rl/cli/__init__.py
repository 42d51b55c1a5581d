"""The command line: `a2rl ...`, `python -m a2rl.launch`, `python -m a2rl.aggregate`."""

from a2rl.cli.main import main

__all__ = ["main"]
