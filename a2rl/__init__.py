"""a2rl: run Agent² RL-Bench sweeps locally or on Slurm.

The Python API (a2rl/api.py, docs/analyses.md "From Python"): `open_sweep`, `validate`, `launch`. It loads on first
use, so `import a2rl` stays cheap."""

from a2rl.version import __version__

API = ("Sweep", "open_sweep", "validate", "launch")
__all__ = ["__version__", *API]


def __getattr__(name: str):
    if name in API:
        from a2rl import api

        return getattr(api, name)
    raise AttributeError(f"module 'a2rl' has no attribute {name!r}")
