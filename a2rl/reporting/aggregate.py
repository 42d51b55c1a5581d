"""The results tables (`a2rl aggregate SWEEP_DIR...`, same as `python -m a2rl.aggregate`), from one or several
sweep directories (one sweep per task or model is common): their runs merge by key; a run in two of them, or
runs of one cell or baselines of one (task, model, protocol) that disagree (budget, weights, evaluator), is an
error. Runs scored under different evaluation protocols are different experiments, never averaged together.

A cell is base model × task × agent × driver × prompt mode, over seeds (runs in different modes are different
experiments: never averaged together). A run's score is its best submission's, or the base model's (its
baseline) when it has no valid submission, as in the paper; improvement is score − baseline. Failed runs have
no score. Results and baselines that do not verify against their sweep's key are left out, and each is named
in `problems` (the command prints them to stderr).

Tables: the long table (one row per cell; the default); `--layout paper`, one Table-2 block per base model
(first row the base model, then one row per stack + driver [+ mode], a column per task; mean ± SEM over seeds,
with n when seeds are missing); `--by mode`, mode × task mean improvement (the heatmap); `--pass-at 1,3,5`;
`--scaling` (best score at budget fractions, token counts and submission counts); `--routes` (training of the best
submissions); `--failures` (by cause: infrastructure or agent); `--usage` (tokens and cost); `--submissions`
(per run); `--per-run` (a row per run). Where `a2rl calibrate` measured the evaluation noise, improvements within it
are marked `~`.

simple, github and latex show display strings ("59.50 ± 37.00", "—"); csv, json and parquet write each table's
tidy data (reporting/tables.py): numbers, empty where there is none, one table per file or JSON key. The runs
(reporting/sweeps.py), the cell tables (reporting/tables.py) and the breakdowns (reporting/breakdowns.py) are
re-exported here.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from tabulate import tabulate

from a2rl.errors import SpecError
from a2rl.reporting.breakdowns import (
    FRACTIONS,
    SUBMISSION_POINTS,
    TOKEN_POINTS,
    failures_table,
    flags_table,
    main_tables,
    routes_table,
    runs_table,
    scaling_table,
    submissions_table,
    tables,
    usage_table,
)
from a2rl.reporting.sweeps import (
    CELL,
    CONTROL,
    WITHIN_NOISE,
    Key,
    Run,
    Sweeps,
    expected_best_of,
    failure_cause,
    mean_sem,
    submitted_scores,
)
from a2rl.reporting.tables import (
    BASE_ROW,
    HEADERS,
    Row,
    Table,
    final_paper_tables,
    final_table,
    heatmap,
    long_table,
    mode_table,
    paper_tables,
    pass_at_table,
)
from a2rl.store.sweepdir import SweepDir

__all__ = [
    "BASE_ROW",
    "CELL",
    "CONTROL",
    "FORMATS",
    "FRACTIONS",
    "HEADERS",
    "SUBMISSION_POINTS",
    "TOKEN_POINTS",
    "WITHIN_NOISE",
    "Key",
    "Run",
    "Sweeps",
    "Table",
    "expected_best_of",
    "export",
    "failure_cause",
    "failures_table",
    "final_paper_tables",
    "final_table",
    "flags_table",
    "foreign_note",
    "format_tables",
    "heatmap",
    "long_table",
    "main_tables",
    "mean_sem",
    "mode_table",
    "paper_tables",
    "pass_at_table",
    "render",
    "routes_table",
    "rows",
    "runs_table",
    "scaling_table",
    "submissions_table",
    "submitted_scores",
    "tables",
    "tidy",
    "untrusted_note",
    "usage_table",
]

DISPLAY = ["simple", "github", "latex"]
TIDY = ["csv", "json", "parquet"]
FORMATS = DISPLAY + TIDY


def notes(sw: Sweeps) -> list[str]:
    """What every table of `sw` comes with: the noise mark, and the untrusted and foreign warnings."""
    marked = [f"{WITHIN_NOISE}: within the measured evaluation noise (a2rl calibrate)"] if sw.noise else []
    return marked + [n.removeprefix("\n# ") for n in (untrusted_note(sw.untrusted), foreign_note(sw.foreign)) if n]


def tidy(ts: list[Table]) -> dict[str, list[Row]]:
    """The tables' tidy data by name, in order; tables of one name (Table 2's blocks) are one table."""
    out: dict[str, list[Row]] = {}
    for t in ts:
        out.setdefault(t.name, []).extend(t.data)
    return out


def _columns(data: list[Row]) -> list[str]:
    return list(dict.fromkeys(c for row in data for c in row))


def _csv(data: list[Row]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, _columns(data), lineterminator="\n")  # a missing value is left empty
    w.writeheader()
    w.writerows(data)
    return buf.getvalue()


def _parquet(data: list[Row], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SpecError(["--format parquet needs pyarrow: pip install pyarrow, or use --format csv or json"]) from None
    pq.write_table(pa.Table.from_pylist(data), path)


def export(sw: Sweeps, ts: list[Table], fmt: str, out: Path | None = None) -> str:
    """The tidy data of `ts` as csv, json or parquet. With `out` (a directory, created), each table goes to
    out/<name>.<fmt> and the files written are returned, one a line; without it, json is one document (a key
    per table) and csv one table (SpecError for several, or for parquet, naming --out)."""
    by_name = tidy(ts)
    if out is None:
        if fmt == "json":
            doc = {"tables": by_name, "notes": notes(sw), "untrusted": sw.untrusted, "foreign": sw.foreign}
            return json.dumps(doc, indent=1)
        if fmt == "csv" and len(by_name) == 1:
            return _csv(next(iter(by_name.values()))).rstrip("\n")
        what = f"{len(by_name)} tables ({', '.join(by_name)})" if fmt == "csv" else "parquet"
        raise SpecError([f"--format {fmt}: {what} need --out DIR (one file per table, DIR/<table>.{fmt})"])
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in by_name.items():
        path = out / f"{name}.{fmt}"
        if fmt == "parquet":
            _parquet(data, path)
        else:
            path.write_text(_csv(data) if fmt == "csv" else json.dumps(data, indent=1) + "\n")
        written.append(str(path))
    return "\n".join(written)


def format_tables(sw: Sweeps, ts: list[Table], fmt: str) -> str:
    """`ts` in a display format (simple, github, latex), their notes under them; the tidy formats go to export."""
    if fmt in TIDY:
        return export(sw, ts, fmt)
    parts = []
    for t in ts:
        head = [f"# {t.title}"] if len(ts) > 1 else []
        body = tabulate(t.rows, headers=t.headers, tablefmt=fmt, disable_numparse=True)
        parts.append("\n".join(head + [body] + ([f"# {n}" for n in t.notes] if len(ts) > 1 else [])))
    return "\n\n".join(parts) + "".join(f"\n# {n}" for n in notes(sw))


def rows(sweep: SweepDir, problems: list[str]) -> list[list[str]]:
    sw = Sweeps([sweep])
    problems += sw.problems
    return long_table(sw).rows


def render(sweep: SweepDir, fmt: str, problems: list[str]) -> str:
    """The long table of one sweep (what `launch --wait` prints at the end)."""
    sw = Sweeps([sweep])
    problems += sw.problems
    return format_tables(sw, main_tables(sw), fmt)


def untrusted_note(untrusted: bool) -> str:
    """Agents run without a sandbox could read held-out data and other runs: say so under every table."""
    return "\n# UNTRUSTED: isolation: none (agents ran unisolated; scores may use held-out data)" if untrusted else ""


def foreign_note(foreign: dict[str, list[int]]) -> str:
    """Runs that submitted a model not plausibly trained from the base (grader.foreign: flag scores it): say so
    under every table, naming them, since their scores may not be the agent's training."""
    if not foreign:
        return ""
    named = "; ".join(f"{run} (submission {', '.join(map(str, seqs))})" for run, seqs in sorted(foreign.items()))
    return f"\n# FOREIGN: {len(foreign)} run(s) submitted models not plausibly trained from the base model: {named}"
