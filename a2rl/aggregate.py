"""`python -m a2rl.aggregate` (see a2rl.cli.aggregate)."""

from a2rl.cli.aggregate import main

if __name__ == "__main__":
    raise SystemExit(main())
