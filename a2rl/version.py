"""a2rl's version, in this one place: pyproject.toml reads it (setuptools' dynamic version), `a2rl --version` prints
it and every sweep.json records which a2rl froze it. CHANGELOG.md says what each version can do."""

__version__ = "1.0.0"
