"""`python -m a2rl.launch` (see a2rl.cli.launch)."""

from a2rl.cli.launch import main

if __name__ == "__main__":
    raise SystemExit(main())
