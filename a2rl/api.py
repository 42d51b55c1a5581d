"""The Python API, re-exported by `import a2rl` (docs/analyses.md "From Python"): a sweep's runs, submissions and
cells as pandas DataFrames (the `analysis` extra), and validate and launch returning objects. Each goes through the
command line's own code (cli/aggregate.py, cli/validate.py, scheduling/launcher.py); errors are exceptions
(SpecError, with one line per problem), not exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.cli.aggregate import open_sweeps
from a2rl.cli.validate import Validation, check
from a2rl.errors import SpecError
from a2rl.reporting.aggregate import Sweeps, long_table, runs_table, submissions_table, tables, tidy
from a2rl.reporting.tables import Row
from a2rl.scheduling.launcher import Launch, Launcher

if TYPE_CHECKING:
    import pandas

__all__ = ["Launch", "Sweep", "Validation", "launch", "open_sweep", "validate"]


def _frame(data: list[Row]) -> pandas.DataFrame:
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("a2rl's DataFrames need pandas: pip install 'a2rl[analysis]' (or pandas)") from None
    frame = pd.DataFrame.from_records(data)
    # a column with no value at all reads as float NaN, as `pd.read_csv` reads the same table's empty column
    empty = [c for c in frame.columns if frame[c].dtype == object and frame[c].isna().all()]
    return frame.astype(dict.fromkeys(empty, "float64"))


class Sweep:
    """One or several sweep directories merged by cell, as `a2rl aggregate` reads them; each method returns the
    tidy table of the same name in `aggregate --format csv` (columns in docs/analyses.md "Tidy exports")."""

    def __init__(self, sweeps: Sweeps) -> None:
        self.data = sweeps

    @property
    def problems(self) -> list[str]:
        """Results and baselines left out because they do not verify against their sweep's key."""
        return self.data.problems

    def cells(self) -> pandas.DataFrame:
        """A row per cell (base model × task × agent × driver × mode × protocol): baseline, mean, sem, n,
        improvement, submissions, valid and the runs' counts."""
        return _frame(long_table(self.data).data)

    def runs(self) -> pandas.DataFrame:
        """A row per run: status, score, baseline, improvement, final, selection_gap, submissions, tokens, cost."""
        return _frame(runs_table(self.data).data)

    def submissions(self) -> pandas.DataFrame:
        """A row per graded submission: its run, order, score (None: invalid) and when it was made."""
        return _frame(submissions_table(self.data).data)

    def tables(self, **options) -> dict[str, pandas.DataFrame]:
        """Any of `a2rl aggregate`'s tables by name, options as its flags (layout="paper", by="mode",
        pass_at=[1, 3], scaling=True, routes, failures, usage, submissions, per_run, flags)."""
        return {name: _frame(data) for name, data in tidy(tables(self.data, **options)).items()}


def open_sweep(*paths: str | Path) -> Sweep:
    """The sweep directory at each path, merged (SpecError: not a sweep, or sweeps that conflict)."""
    if not paths:
        raise SpecError(["open_sweep needs at least one sweep directory"])
    return Sweep(open_sweeps([Path(p) for p in paths]))


def validate(path: str | Path, *, elsewhere: bool = False) -> Validation:
    """`a2rl validate PATH` as an object: `.ok`, `.errors`, `.refused` (what launch refuses on this machine),
    `.runs`, `.spec`; nothing printed or written."""
    return check(Path(path), elsewhere=elsewhere)


def launch(
    path: str | Path,
    *,
    sweep_dir: str | Path | None = None,
    executor: str | None = None,
    retry_failed: bool = False,
    allow_leaks: bool = False,
    wait: bool = False,
    progress_s: float = 30.0,
) -> Launch:
    """`a2rl launch PATH` as an object (`.sweep`, `.runs`, `.launcher`, `.audit`, `.finished`); `wait`: follow the
    sweep until every run has finished (progress on stdout). SpecError where launch refuses it."""
    done = Launcher.launch(
        Path(path),
        sweep_dir=None if sweep_dir is None else Path(sweep_dir),
        executor=executor,
        retry_failed=retry_failed,
        allow_leaks=allow_leaks,
        follow=wait,
    )
    if done.refused:
        raise SpecError(
            [
                f"the audit found a path to held-out data under isolation: {done.audit.isolation}; use a sandbox, "
                "or launch with allow_leaks=True"
            ]
        )
    if wait:
        done.launcher.follow(progress_s=progress_s)
    return done
