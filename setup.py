"""The wheel ships the task folders, the configs and the Slurm job set-up as package data (a2rl/share/), so an
installed a2rl finds them without A2RL_HOME (a2rl/spec/registry.py); everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHARED = ("tasks", "configs", "slurm")


class BuildWithShare(build_py):
    def run(self):
        super().run()
        share = Path(self.build_lib) / "a2rl" / "share"
        for name in SHARED:
            shutil.rmtree(share / name, ignore_errors=True)
            shutil.copytree(
                Path(__file__).parent / name, share / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )


setup(cmdclass={"build_py": BuildWithShare})
