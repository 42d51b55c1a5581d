"""The one place a2rl's version is written."""

__version__ = "1.0.0"
