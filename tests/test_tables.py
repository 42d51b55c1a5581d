"""The paper's tables (issue 14) on a synthetic sweep with known numbers (records only, no jobs): two tasks, two
prompt modes, three seeds; a failed run, a missing run (seed not finished), a failed baseline, and ledger
entries that say when (budget clock, tokens) each submission was made."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest

from a2rl.errors import SpecError
from a2rl.reporting.aggregate import (
    Sweeps,
    expected_best_of,
    failures_table,
    format_tables,
    heatmap,
    long_table,
    mode_table,
    paper_tables,
    pass_at_table,
    routes_table,
    scaling_table,
    submissions_table,
    usage_table,
)
from a2rl.reporting.metrics import RunMetrics
from a2rl.spec.grid import expand
from a2rl.spec.sweep import SweepSpec
from a2rl.store.baselines import BaselineRecord, baseline_path
from a2rl.store.noise import NoiseRecord, noise_path
from a2rl.store.results import AgentUsage, build_result
from a2rl.store.sweepdir import SweepDir
from conftest import a2rl
from fakes import ledger_entry


def make_sweep(
    root,
    seeds=(0, 1, 2),
    budget=100,
    tasks=("gsm8k", "humaneval"),
    protocols=("paper",),
    agents=("claude",),
    base_scores=(("gsm8k", 10.0), ("humaneval", None)),  # None: the baseline failed
) -> SweepDir:
    spec = SweepSpec.model_validate(
        {
            "name": "tables",
            "tasks": list(tasks),
            "agents": list(agents),
            "drivers": ["gpt-x"],
            "modes": ["free", "sft-only"],
            "models": ["builtin:tiny-llama"],
            "seeds": list(seeds),
            "budget": budget,
            "protocols": list(protocols),
            "executor": "local",
        }
    )
    sweep = SweepDir(root)
    sweep.create(spec, "", expand(spec))
    for task, score in base_scores:
        for protocol in protocols if task in tasks else ():
            score = score if protocol == "paper" or score is None else score / 2  # a2rl: 5
            write_baseline(sweep, task, protocol, score)
    return sweep


def write_baseline(sweep: SweepDir, task: str, protocol: str, score: float | None, **fields) -> None:
    """The base model's grading of `task` (score None: it failed); `fields`: BaselineRecord's others (part, ...)."""
    BaselineRecord(
        task=task,
        model="tiny-llama",
        model_path="builtin:tiny-llama",
        weights_hash="h",
        protocol=protocol,
        evaluator_version=1,
        status="ok" if score is not None else "failed",
        score=score,
        error=None if score is not None else "judge down",
        graded_at=0.0,
        **fields,
    ).sign(sweep.key).dump(baseline_path(sweep, task, "tiny-llama", protocol))


def write_noise(sweep: SweepDir, task: str) -> None:
    """Noise measured on `task`'s base model: 2 × sd = 2 × sqrt(32/3) = 6.5."""
    NoiseRecord(
        task=task,
        model="tiny-llama",
        protocol="paper",
        evaluator_version=1,
        repeats=4,
        scores={"baseline": [10.0, 14.0, 6.0, 10.0]},
        measured_at=0.0,
    ).sign(sweep.key).dump(noise_path(sweep, task, "tiny-llama", "paper"))


def finish(
    sweep: SweepDir,
    task: str,
    mode: str,
    seed: int,
    subs: list[tuple[float, int | None, float | None]],
    status: str = "ok",
    usage: tuple[int, int, float] | None = None,
    train_type: str = "SFT",
    failure: tuple[str, str] | None = None,
    protocol: str = "paper",
    agent: str = "claude",
) -> None:
    """A run's ledger (one entry per (budget s, tokens, score or None for invalid)), result and report metrics."""
    run = next(
        r
        for r in sweep.runs()
        if (r.task, r.mode, r.seed, r.protocol, r.agent.name) == (task, mode, seed, protocol, agent)
    )
    for seq, (at, tokens, score) in enumerate(subs, 1):
        sweep.ledger.record(
            ledger_entry(run.run_id, seq, score, task=task, protocol=protocol, at=at, budget_used_s=at, tokens=tokens)
        )
    base = BaselineRecord.load(baseline_path(sweep, task, "tiny-llama", protocol))
    u = (
        None
        if usage is None
        else AgentUsage(parser="claude", input_tokens=usage[0], output_tokens=usage[1], cost_usd=usage[2])
    )
    result = build_result(
        run,
        status=status,
        entries=sweep.ledger.entries(run.run_id),
        baseline=base,
        submitted=len(subs),
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=100.0,
        started_at=0.0,
        ended_at=100.0,
        usage=u,
    )
    result.sign(sweep.key).dump(sweep.result_path(run.run_id))
    RunMetrics(
        run_id=run.run_id,
        task=task,
        agent="claude",
        driver="gpt-x",
        mode=mode,
        model="tiny-llama",
        protocol=protocol,
        seed=seed,
        status=status,
        baseline=result.baseline,
        best=result.best,
        improvement=result.improvement,
        submissions=len(subs),
        valid_submission_rate=None,
        first_valid_idx=None,
        time_to_first_improvement=None,
        time_to_best=None,
        monotonic_ratio=None,
        copy_model_count=0,
        time_used_ratio=1.0,
        last_submit_gap=None,
        score_trajectory=[],
        input_tokens=None,
        output_tokens=None,
        cost_usd=None,
        cpu_seconds=None,
        train_type=train_type,
        train_types_seen=[],
        failure_type=failure[0] if failure else None,
        failure_source=failure[1] if failure else None,
        code_snapshots=0,
    ).dump(sweep.run_dir(run.run_id) / "report" / "metrics.json")


@pytest.fixture
def sweep(tmp_path) -> SweepDir:
    return build_sweep(tmp_path / "a")


def build_sweep(root: Path) -> SweepDir:
    """The synthetic sweep of this module (tests/test_exports.py reads it too)."""
    sweep = make_sweep(root)
    # gsm8k (baseline 10), free: 40 and 30; seed 2 failed (infrastructure)
    finish(
        sweep, "gsm8k", "free", 0, [(20, 1000, 20.0), (60, 5000, 40.0)], usage=(4000, 1000, 0.5), train_type="SFT+GRPO"
    )
    finish(sweep, "gsm8k", "free", 1, [(10, 500, None), (90, 200_000, 30.0)], usage=(190_000, 10_000, 1.5))
    finish(sweep, "gsm8k", "free", 2, [], status="failed")
    # sft-only: no valid submission (keeps the baseline 10), 16; seed 2 not finished
    finish(sweep, "gsm8k", "sft-only", 0, [(30, None, None)], failure=("code_error_runtime", "agent"))
    finish(sweep, "gsm8k", "sft-only", 1, [(50, None, 16.0)])
    # humaneval: the baseline failed; free scores 50, —, 70
    finish(sweep, "humaneval", "free", 0, [(40, None, 50.0)])
    finish(sweep, "humaneval", "free", 1, [], failure=("unknown", "infra"))
    finish(sweep, "humaneval", "free", 2, [(70, None, 70.0)])
    return sweep


def as_dicts(table) -> dict[str, dict[str, str]]:
    """Rows by their first column (paper/mode tables) or by task/mode (per-cell tables)."""
    if table.headers[0] == "model":
        return {f"{r[1]}/{r[4]}": dict(zip(table.headers, r)) for r in table.rows}
    return {r[0]: dict(zip(table.headers, r)) for r in table.rows}


def test_paper_layout_is_a_block_per_model_with_the_baseline_first(sweep):
    (block,) = paper_tables(Sweeps([sweep]))
    assert block.title == "Table 2: tiny-llama" and block.headers == ["stack / driver", "gsm8k", "humaneval"]
    assert block.rows[0] == ["base model", "10.00", "FAILED"]
    rows = as_dicts(block)
    assert rows["claude / gpt-x [free]"] == {
        "stack / driver": "claude / gpt-x [free]",
        "gsm8k": "35.00 ± 5.00 (n=2)",
        "humaneval": "60.00 ± 10.00 (n=2)",
    }
    assert rows["claude / gpt-x [sft-only]"]["gsm8k"] == "13.00 ± 3.00 (n=2)"
    assert rows["claude / gpt-x [sft-only]"]["humaneval"] == "—"  # no runs, and no baseline to fall back on


def test_each_protocol_is_its_own_block_against_its_own_baseline(tmp_path):
    sweep = make_sweep(tmp_path / "p", seeds=(0,), tasks=("gsm8k",), protocols=("paper", "a2rl"))
    finish(sweep, "gsm8k", "free", 0, [(10, None, 30.0)])
    finish(sweep, "gsm8k", "free", 0, [(10, None, 20.0)], protocol="a2rl")
    paper, a2rl = paper_tables(Sweeps([sweep]))
    assert paper.title == "Table 2: tiny-llama (protocol paper)" and a2rl.title == "Table 2: tiny-llama (protocol a2rl)"
    assert [paper.rows[0], a2rl.rows[0]] == [["base model", "10.00"], ["base model", "5.00"]]
    assert [as_dicts(t)["claude / gpt-x [free]"]["gsm8k"] for t in (paper, a2rl)] == ["30.00 ± 0.00", "20.00 ± 0.00"]
    improvements = {r[5]: r[8] for r in long_table(Sweeps([sweep])).rows if r[3] == "free"}
    assert improvements == {"paper": "+20.00", "a2rl": "+15.00"}  # never averaged across protocols


def test_all_seeds_present_show_no_n(tmp_path):
    sweep = make_sweep(tmp_path / "s", seeds=(0, 1), tasks=("gsm8k",))
    for seed, score in ((0, 20.0), (1, 30.0)):
        finish(sweep, "gsm8k", "free", seed, [(10, None, score)])
    rows = as_dicts(paper_tables(Sweeps([sweep]))[0])
    assert rows["claude / gpt-x [free]"]["gsm8k"] == "25.00 ± 5.00"


def test_by_mode_is_mean_improvement_per_mode_and_task(sweep):
    rows = as_dicts(mode_table(Sweeps([sweep])))  # one stack: a row per mode
    assert rows["free"]["gsm8k"] == "+25.00 ± 5.00 (n=2)" and rows["free"]["humaneval"] == "—"
    assert rows["sft-only"]["gsm8k"] == "+3.00 ± 3.00 (n=2)"


def test_stacks_are_compared_within_a_mode_never_averaged(tmp_path):
    sweep = make_sweep(tmp_path / "m", seeds=(0,), tasks=("gsm8k",), agents=("claude", "baseline"))
    finish(sweep, "gsm8k", "free", 0, [(10, None, 90.0)])
    finish(sweep, "gsm8k", "free", 0, [], agent="baseline")  # the control: no submission
    sw = Sweeps([sweep])
    rows = {(r[0], r[1]): r[2] for r in mode_table(sw).rows}
    assert rows["free", "claude / gpt-x"] == "+80.00 ± 0.00 (n=1)"
    assert rows["free", "baseline (control agent) / none"] == "—"  # not +0.00, not averaged into claude's +40
    assert heatmap(sw)[0][:2] == ["free · claude / gpt-x", "free · baseline (control agent) / none"]
    table2 = {r[0]: r[1] for r in paper_tables(sw)[0].rows}
    assert list(table2)[0] == "base model" and table2["baseline (control agent) / none [free]"] == "—"
    pass_at = {r[2]: r[-3:] for r in pass_at_table(sw, [1, 2, 3]).rows}
    assert pass_at["baseline (control agent)"] == ["—", "—", "—"]  # no improvement to tell, not +0.00
    scaling = {(r[2], r[4]): r[6:] for r in scaling_table(sw).rows}
    assert set(scaling["baseline (control agent)", "free"]) == {"—"}
    assert scaling["claude", "free"][-1] == "90.00 ± 0.00"
    assert "baseline" not in long_table(sw).headers and "base model" in long_table(sw).headers


def test_pass_at_k_table(sweep):
    rows = as_dicts(pass_at_table(Sweeps([sweep]), [1, 2, 3]))
    assert [rows["gsm8k/free"][k] for k in ("n", "pass@1", "pass@2", "pass@3")] == ["2", "+25.00", "+30.00", "—"]
    assert rows["humaneval/free"]["n"] == "0"  # no baseline: no improvements


@pytest.mark.parametrize("n,k", [(1, 1), (4, 2), (5, 3), (6, 5), (7, 7)])
def test_pass_at_k_estimator_equals_brute_force_enumeration(n, k):
    rng = random.Random(n * 31 + k)
    xs = [round(rng.uniform(-20, 40), 1) for _ in range(n)]
    xs[0] = xs[-1]  # ties count
    subsets = list(itertools.combinations(xs, k))
    assert expected_best_of(xs, k) == pytest.approx(sum(max(s) for s in subsets) / len(subsets))


def test_pass_at_k_needs_k_runs():
    with pytest.raises(ValueError, match="pass@3 needs at least 3 runs"):
        expected_best_of([1.0, 2.0], 3)


def test_scaling_is_best_so_far_at_budget_fractions_token_counts_and_submission_counts(sweep):
    table = scaling_table(Sweeps([sweep]))
    rows = as_dicts(table)
    free = rows["gsm8k/free"]
    assert [free[f"@{p} budget"] for p in ("25%", "50%", "75%", "100%")] == [
        "15.00 ± 5.00 (n=2)",
        "15.00 ± 5.00 (n=2)",
        "25.00 ± 15.00 (n=2)",
        "35.00 ± 5.00 (n=2)",
    ]
    assert [free[f"@{t} tokens"] for t in ("10,000", "100,000", "1,000,000")] == [
        "25.00 ± 15.00 (n=2)",
        "25.00 ± 15.00 (n=2)",
        "35.00 ± 5.00 (n=2)",
    ]
    # a submission without a token count leaves the run out of the token columns, not out of the budget ones
    assert rows["gsm8k/sft-only"]["@10,000 tokens"] == "10.00 ± 0.00 (n=1)"
    assert rows["gsm8k/sft-only"]["@50% budget"] == "13.00 ± 3.00 (n=2)"
    # after the first k graded submissions: seed 1's first was invalid (its baseline, 10, until its second)
    assert [free[f"@{k}"] for k in ("1 submission", "3 submissions", "5 submissions")] == [
        "15.00 ± 5.00 (n=2)",
        "35.00 ± 5.00 (n=2)",
        "35.00 ± 5.00 (n=2)",
    ]
    assert rows["gsm8k/sft-only"]["@1 submission"] == "13.00 ± 3.00 (n=2)"
    assert rows["humaneval/free"]["@1 submission"] == "60.00 ± 10.00 (n=2)"  # no baseline: its scores alone


def test_routes_failures_usage_and_submissions(sweep):
    sw = Sweeps([sweep])
    routes = as_dicts(routes_table(sw))
    assert routes["gsm8k/free"]["training (runs)"] == "SFT+GRPO×1, SFT×1"
    assert routes["gsm8k/sft-only"]["training (runs)"] == "SFT×1"  # the run without a valid submission has none
    fails = as_dicts(failures_table(sw))
    assert (fails["gsm8k/free"]["infrastructure"], fails["gsm8k/free"]["agent"]) == ("1", "0")
    assert (fails["gsm8k/sft-only"]["agent"], fails["gsm8k/sft-only"]["agent failure types"]) == (
        "1",
        "code_error_runtime×1",
    )
    assert (fails["humaneval/free"]["infrastructure"], fails["humaneval/free"]["agent"]) == ("1", "0")
    usage = as_dicts(usage_table(sw))
    assert [usage["gsm8k/free"][h] for h in ("tokens / run", "tokens", "cost $ / run", "cost $")] == [
        "102,500",
        "205,000",
        "1.00",
        "2.00",
    ]
    assert usage["gsm8k/sft-only"]["tokens"] == "—"
    subs = as_dicts(submissions_table(sw))
    assert subs["gsm8k/free"] == {**subs["gsm8k/free"], "submissions (mean ± SEM)": "1.33 ± 0.67", "valid": "75%"}


def test_improvements_within_measured_noise_are_marked(sweep):
    write_noise(sweep, "gsm8k")
    sw = Sweeps([sweep])
    rows = as_dicts(paper_tables(sw)[0])
    # 2 × sd = 2 × sqrt(32/3) = 6.5: +3 is within it, +25 is not
    assert rows["claude / gpt-x [sft-only]"]["gsm8k"] == "13.00 ± 3.00 (n=2)~"
    assert rows["claude / gpt-x [free]"]["gsm8k"] == "35.00 ± 5.00 (n=2)"
    assert "~: within the measured evaluation noise" in format_tables(sw, paper_tables(sw), "simple")


def test_several_sweeps_merge_by_key(sweep, tmp_path):
    more = make_sweep(tmp_path / "b", seeds=(3,), tasks=("gsm8k",))
    finish(more, "gsm8k", "free", 3, [(50, None, 60.0)])
    rows = as_dicts(paper_tables(Sweeps([sweep, more]))[0])
    assert rows["claude / gpt-x [free]"]["gsm8k"] == "43.33 ± 8.82 (n=3)"  # 40, 30, 60 of 4 runs


def test_conflicting_sweeps_are_an_error(sweep, tmp_path):
    with pytest.raises(SpecError, match="the same run gsm8k__claude__gpt-x__tiny-llama__s0"):
        Sweeps([sweep, make_sweep(tmp_path / "b")])
    other_budget = make_sweep(tmp_path / "c", seeds=(7,), budget=200)
    with pytest.raises(
        SpecError, match="conflicting specs for tiny-llama / gsm8k / claude / gpt-x / free / paper: budget"
    ):
        Sweeps([sweep, other_budget])


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_command_line_formats_and_errors(sweep, tmp_path):
    args = ("--layout", "paper", "--pass-at", "1,2", "--per-run", "--format", "json")
    doc = json.loads(a2rl("aggregate", str(sweep.root), *args, check=True).stdout)
    assert list(doc["tables"]) == ["paper", "pass_at", "runs"] and len(doc["tables"]["runs"]) == 12
    free = next(r for r in doc["tables"]["paper"] if (r["task"], r["mode"]) == ("gsm8k", "free"))
    assert (free["baseline"], free["mean"], free["sem"], free["n"], free["runs"]) == (10.0, 35.0, 5.0, 2, 3)
    latex = a2rl("aggregate", str(sweep.root), "--by", "mode", "--format", "latex", check=True).stdout
    assert "\\begin{tabular}" in latex and "sft-only" in latex
    csv_text = a2rl("aggregate", str(sweep.root), "--scaling", "--format", "csv", check=True).stdout
    assert csv_text.splitlines()[0] == "model,task,agent,driver,mode,protocol,at,point,mean,sem,n,runs"
    several = a2rl("aggregate", str(sweep.root), "--scaling", "--usage", "--format", "csv")
    assert several.returncode == 2 and "2 tables (scaling, usage) need --out DIR" in several.stderr
    out = a2rl("aggregate", str(sweep.root), "--scaling", "--usage", "--format", "csv", "--out", str(tmp_path / "o"))
    assert out.stdout.split() == [str(tmp_path / "o" / "scaling.csv"), str(tmp_path / "o" / "usage.csv")]
    bad = a2rl("aggregate", str(sweep.root), str(sweep.root))
    assert bad.returncode == 2 and bad.stderr.startswith("error: the same run") and "Traceback" not in bad.stderr
    bad = a2rl("aggregate", str(sweep.root), "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "error: --out is for --format csv, json, parquet" in bad.stderr
    bad = a2rl("aggregate", str(sweep.root), "--pass-at", "0")
    assert bad.returncode == 2 and "k values must be 1 or more" in bad.stderr


def test_html_report_of_the_synthetic_sweep(sweep):
    index = Path(a2rl("report", str(sweep.root), check=True).stdout.strip())
    assert index == sweep.root / "report" / "index.html"
    page = index.read_text()
    assert "<h3>Table 2: tiny-llama</h3>" in page and "35.00 ± 5.00 (n=2)" in page and "FAILED" in page
    imgs = re.findall(r'<img[^>]* src="([^"]+)"', page)
    assert "plots/heatmap.svg" in imgs and len([i for i in imgs if i.startswith("plots/cell-")]) == 3
    assert "no plot (no run scored a submission): tiny-llama / humaneval / claude / gpt-x / sft-only / paper" in page
    assert all((index.parent / i).stat().st_size > 1000 for i in imgs)
    links = re.findall(r'href="([^"]+)"', page)
    run_id = "gsm8k__claude__gpt-x__tiny-llama__s0"
    assert f"../runs/{run_id}/report/metrics.json" in links and all((index.parent / h).exists() for h in links)
    assert "http" not in page  # nothing fetched from elsewhere
    runs = {
        re.sub(r"<[^>]+>", "", m.group(1)): [
            re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", m.group(0))
        ]
        for m in re.finditer(r"<tr[^>]*><td>([^<]+)</td>.*?</tr>", page.split("<h2>Runs</h2>")[1])
    }
    assert runs["gsm8k__claude__gpt-x__tiny-llama__s2"][1:4] == ["failed", "—", "infrastructure: run failed"]
    assert runs["gsm8k__claude__gpt-x__tiny-llama__sft-only__s0"][1:4] == ["ok", "10.00", "agent: code_error_runtime"]
    assert runs["gsm8k__claude__gpt-x__tiny-llama__s0"][1:4] == ["ok", "40.00", ""]
    assert runs["gsm8k__claude__gpt-x__tiny-llama__sft-only__s2"][1:] == [
        "no result",
        "—",
        "",
        "not inspected",
        "no report yet",
    ]
    assert f"../runs/{run_id}/report/viewer/index.html" in links  # each finished run's viewer
    # a Table-2 cell links to the viewers of its runs, by seed
    table2 = page.split("<h3>Table 2: tiny-llama</h3>")[1].split("</table>")[0]
    cell = re.search(r"<td>35.00 ± 5.00 \(n=2\)(.*?)</td>", table2).group(1)
    assert re.findall(r'href="([^"]+)">(s\d)</a>', cell) == [
        (f"../runs/gsm8k__claude__gpt-x__tiny-llama__s{seed}/report/viewer/index.html", f"s{seed}")
        for seed in (0, 1, 2)
    ]


def test_report_plots_the_same_in_worker_processes(sweep, tmp_path, monkeypatch):
    """Big sweeps plot their cells in worker processes; the pictures are those of a single process."""
    from a2rl.reporting import html

    one = html.write_report(Sweeps([sweep]), tmp_path / "one").parent / "plots"
    monkeypatch.setattr(html, "CELLS_PER_WORKER", 1)
    monkeypatch.setattr(html.os, "cpu_count", lambda: 4)
    many = html.write_report(Sweeps([sweep]), tmp_path / "many").parent / "plots"
    cells = sorted(p.name for p in one.glob("cell-*.png"))
    assert len(cells) == 3 and sorted(p.name for p in many.glob("cell-*.png")) == cells
    assert all((one / c).read_bytes() == (many / c).read_bytes() for c in cells)


def test_long_table_without_a_baseline_score_shows_the_best_but_no_improvement(tmp_path):
    sweep = make_sweep(tmp_path / "s", seeds=(0,), tasks=("humaneval",))  # its baseline failed
    finish(sweep, "humaneval", "free", 0, [(10, None, 30.0)])
    from a2rl.reporting.aggregate import long_table

    row = dict(zip(long_table(Sweeps([sweep])).headers, long_table(Sweeps([sweep])).rows[0]))
    assert (row["base model"], row["best (mean ± SEM)"], row["improvement"]) == (
        "FAILED: judge down",
        "30.00 ± 0.00",
        "—",
    )
