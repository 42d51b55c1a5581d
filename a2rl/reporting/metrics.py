"""A run's process metrics (the paper's), per submission and per run, computed only from what the sweep recorded:
result, ledger, code snapshots and transcript. Training types come from the TRL classes in each snapshot's code;
a run whose code/ shows no trainer (the reference `pipeline` trains from the installed package) takes them from
the agent's stage log (store/stages.py), labelled self-reported; failure types are the paper's, by heuristics; leaks are
held-out data (canary or items) found in the transcript, the code or (by the grader) a submission."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from a2rl.errors import SpecError
from a2rl.recording.snapshots import CodeSnapshot, blob_path, load_snapshots, snapshot_text
from a2rl.records import Record, RecordError
from a2rl.spec.agents import agent_registry
from a2rl.spec.tasks import task_data
from a2rl.store.ledger import LedgerEntry, LineageVerdict
from a2rl.store.results import RunResult
from a2rl.store.stages import STAGES_FILE, StageLog
from a2rl.store.sweepdir import SweepDir
from a2rl.store.verdicts import FinalVerdict, Verdict, load_final_verdicts, worst
from a2rl.tasklib.leaks import HeldoutMarkers, markers

FailureType = Literal[
    "code_error_runtime",
    "rollout_logic_wrong",
    "timeout_no_submission",
    "copy_model_fallback",
    "training_diverged",
    "foreign_model",  # not plausibly trained from the base model (the grader's lineage check)
    "unknown",
]
# TRL classes (and configs) that tell the training method, in the order a pipeline usually runs them
TRAINERS = {
    "SFT": r"\bSFT(Trainer|Config)\b",
    "DPO": r"\bDPO(Trainer|Config)\b",
    "PPO": r"\bPPO(Trainer|Config)\b",
    "GRPO": r"\bGRPO(Trainer|Config)\b",
}
CODE_SUFFIXES = (".py", ".sh", ".ipynb", ".yaml", ".yml", ".toml", ".cfg")  # not .md: prompts name trainers
RL = {"PPO", "GRPO"}
DIVERGED = re.compile(r"""\bloss['"]?\s*[:=]\s*['"]?(nan|inf)\b""", re.IGNORECASE)


TrainTypeSource = Literal["code", "self-reported"]


class SubmissionRow(Record):
    """One line of summary.jsonl."""

    iteration: int  # the submission's seq (1-based)
    submission_id: str
    at_s: float  # seconds from the run's start (wall clock)
    status: Literal["scored", "invalid"]
    score: float | None
    improvement: float | None  # vs the baseline
    delta_prev: float | None  # vs the previous valid submission
    copy_of_base: bool
    train_type: str  # SFT, GRPO, SFT+GRPO ... or none, from the code snapshot taken at submission
    train_type_source: TrainTypeSource | None = None  # self-reported: from the agent's stage log
    failure_type: FailureType | None  # None: improved on the baseline
    files_added: list[str] = []
    files_modified: list[str] = []
    files_removed: list[str] = []
    error: str | None = None
    snapshot_error: str | None = None  # the code record of this submission is missing, and why
    lineage: LineageVerdict | None = None  # descent from the base model, as the grader found it; None: not compared
    lineage_reason: str | None = None


SPLIT_FIELDS = {
    "feedback",
    "feedback_n",
    "final",
    "final_submission",
    "final_selected_by",
    "final_n",
    "baseline_final",
    "final_improvement",
    "selection_gap",
}


class RunMetrics(Record):
    # 2 added leaks; 3 route and train_type_source; 4 protocol; 5 inspector_flag, inspector_verdicts,
    # foreign_submissions; 6 feedback ... selection_gap
    run_id: str
    task: str
    agent: str
    driver: str
    mode: str
    protocol: str
    model: str
    seed: int
    status: str
    baseline: float | None
    best: float | None
    improvement: float | None
    submissions: int
    valid_submission_rate: float | None  # valid / submitted; None without submissions
    first_valid_idx: int | None  # 0-based index of the first valid submission
    time_to_first_improvement: float | None  # wall s from the run's start to the first score above baseline
    time_to_best: float | None  # wall s from the run's start to the best submission
    monotonic_ratio: float | None  # share of valid submissions (after the first) not below the previous one
    copy_model_count: int
    time_used_ratio: float  # budget clock used / budget
    last_submit_gap: float | None  # wall s from the last submission to the agent's end
    score_trajectory: list[float | None]
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    cpu_seconds: float | None
    train_type: str  # of the best submission's code, else of the last snapshot
    train_types_seen: list[str]
    train_type_source: TrainTypeSource | None = None  # None: no training seen
    route: str | None = None  # the agent's stages in order (SFT→GRPO), self-reported; None without a stage log
    failure_type: FailureType | None  # None: the run improved on its baseline
    failure_source: Literal["infra", "agent"] | None
    code_snapshots: int
    leaks: list[str] = []  # "transcript: canary", "snapshot 2 train.py: held-out item test.jsonl:17", ...
    # `feedback: split` (RunResult's fields of these names): baseline and best on the feedback part; final on the
    # final part, of final_submission, picked by final_selected_by
    feedback: Literal["heldout", "split"] = "heldout"
    feedback_n: int | None = None
    final: float | None = None
    final_submission: str | None = None
    final_selected_by: str | None = None
    final_n: int | None = None
    baseline_final: float | None = None
    final_improvement: float | None = None
    selection_gap: float | None = None
    # the inspector's (store/verdicts.py): the worst final verdict, and each question's, overrides applied; None
    # and []: not inspected. Flags beside the scores, never part of them
    inspector_flag: Verdict | None = None
    inspector_verdicts: list[FinalVerdict] = []
    foreign_submissions: list[int] = []  # seqs of submissions the grader found not trained from the base model


def train_types(sweep_root: Path, snap: CodeSnapshot | None) -> list[str]:
    if snap is None:
        return []
    text = "\n".join(t for path, t in snapshot_text(sweep_root, snap) if path.endswith(CODE_SUFFIXES))
    return [name for name, pattern in TRAINERS.items() if re.search(pattern, text)]


def stage_log(sweep: SweepDir, run_id: str) -> StageLog | None:
    """The stage log the job copied for this run (only stacks with stage_records get one); unreadable: none."""
    try:
        return StageLog.load_or_none(sweep.run_dir(run_id) / STAGES_FILE)
    except RecordError:
        return None


def typed(
    code_types: list[str], stages: StageLog | None, submission_id: str | None
) -> tuple[list[str], TrainTypeSource | None]:
    """Train types from the code when it shows a trainer, else from the stage log up to `submission_id` (every
    stage when None), else none."""
    if code_types:
        return code_types, "code"
    if stages is not None:
        types = (
            stages.train_types_until(submission_id)
            if submission_id
            else list(dict.fromkeys(s.train_type for s in stages.stages if s.steps > 0))
        )
        if types:
            return types, "self-reported"
    return [], None


def submission_failure(entry: LedgerEntry, baseline: float | None, types: list[str]) -> FailureType | None:
    """The paper's failure types, by heuristics on what was recorded; a foreign model is that, scored or refused."""
    if entry.foreign:
        return "foreign_model"
    if entry.status == "invalid":
        return "code_error_runtime"  # no loadable full-weight model came out
    if entry.copy_of_base:
        return "copy_model_fallback"
    if baseline is None:
        return "unknown"
    if entry.score > baseline:
        return None
    if entry.score < 0.5 * baseline:
        return "training_diverged"
    return "rollout_logic_wrong" if RL & set(types) else "unknown"


def run_failure(
    result: RunResult, best: SubmissionRow | None, rows: list[SubmissionRow], log_text: str, control: bool = False
) -> tuple[FailureType | None, Literal["infra", "agent"] | None]:
    if result.status == "failed" or result.baseline is None or result.ungraded_submissions:
        return "unknown", "infra"  # set-up, supervision, baseline or grading did not complete
    if best is not None and best.failure_type is None:
        return None, None
    if control and result.status == "ok" and not rows:
        return None, None  # the control did what it is for: nothing
    if not rows:
        if result.status == "timeout":
            return "timeout_no_submission", "agent"
        crashed = (result.agent_exit_code or 0) != 0 or "Traceback (most recent call last)" in log_text
        return ("code_error_runtime" if crashed else "unknown"), "agent"
    if best is not None and best.failure_type == "foreign_model":  # its best score is not the agent's training
        return "foreign_model", "agent"
    if DIVERGED.search(log_text):
        return "training_diverged", "agent"
    return (best or rows[-1]).failure_type, "agent"


def find_leaks(
    sweep_root: Path, found_in: HeldoutMarkers, log_text: str, snaps: list[CodeSnapshot], entries: list[LedgerEntry]
) -> list[str]:
    """Where held-out data turned up; a code file is named at the first snapshot holding that content."""
    out = [f"transcript: {what}" for what in found_in.find(log_text)]
    seen: set[tuple[str, str]] = set()
    for snap in snaps:
        for f in snap.files:  # every file, text or not: archives and compressed files are looked into
            if (f.path, f.sha256) not in seen:
                seen.add((f.path, f.sha256))
                found = found_in.find_bytes(blob_path(sweep_root, f.sha256).read_bytes())
                out += [f"snapshot {snap.seq} {f.path}: {what}" for what in found]
    return out + [f"submission {e.seq}: {what}" for e in entries for what in e.leaks]


def is_control(sweep: SweepDir, agent: str) -> bool:
    """Whether the run's stack is a control (spec/agents.py); a stack no longer found is none."""
    try:
        return agent_registry([Path(p) for p in sweep.spec.agent_paths]).get(agent).control
    except SpecError:
        return False


def submission_rows(
    sweep: SweepDir,
    entries: list[LedgerEntry],
    snaps: dict[int, CodeSnapshot],
    stages: StageLog | None,
    t0: float,
    base: float | None,
) -> list[SubmissionRow]:
    """One row per ledger entry of a run: its score against the baseline and the previous valid one, when it came
    (seconds from the run's start, `t0`), how it was trained and what its code snapshot changed."""
    rows: list[SubmissionRow] = []
    prev_valid: float | None = None
    for e in entries:
        snap = snaps.get(e.seq)
        types, source = typed(train_types(sweep.root, snap), stages, e.submission_id)
        rows.append(
            SubmissionRow(
                iteration=e.seq,
                submission_id=e.submission_id,
                at_s=round(e.submitted_at - t0, 3),
                status=e.status,
                score=e.score,
                improvement=None if e.score is None or base is None else e.score - base,
                delta_prev=None if e.score is None or prev_valid is None else e.score - prev_valid,
                copy_of_base=e.copy_of_base,
                train_type="+".join(types) or "none",
                train_type_source=source,
                failure_type=submission_failure(e, base, types),
                error=e.error,
                snapshot_error=e.snapshot_error,
                lineage=e.lineage.verdict if e.lineage else None,
                lineage_reason=e.lineage.summary() if e.lineage else None,
                files_added=snap.added if snap else [],
                files_modified=snap.modified if snap else [],
                files_removed=snap.removed if snap else [],
            )
        )
        prev_valid = e.score if e.score is not None else prev_valid
    return rows


def build(sweep: SweepDir, run_id: str, result: RunResult | None = None) -> tuple[RunMetrics, list[SubmissionRow]]:
    result = result or RunResult.load_verified(sweep.result_path(run_id), sweep.key)
    run = sweep.run(run_id)
    entries = sweep.ledger.entries(run_id)
    snaps = {s.seq: s for s in load_snapshots(sweep.root, run_id)}
    env1 = sweep.run_dir(run_id) / "env-1.json"  # the first attempt's start: a resumed run keeps its origin
    t0 = json.loads(env1.read_text())["started_at"] if env1.exists() else result.started_at
    base = result.baseline
    stages = stage_log(sweep, run_id)
    rows = submission_rows(sweep, entries, snaps, stages, t0, base)
    valid = [r for r in rows if r.status == "scored"]
    best = max(valid, key=lambda r: r.score, default=None)
    improved = [r for r in valid if base is not None and r.score > base]
    steps = [b.score >= a.score for a, b in zip(valid, valid[1:])]
    seen = sorted(
        {t for s in snaps.values() for t in train_types(sweep.root, s)} | set(typed([], stages, None)[0]),
        key=lambda t: (t not in TRAINERS, list(TRAINERS).index(t) if t in TRAINERS else 0, t),
    )
    ref_snap = snaps.get(best.iteration) if best else (snaps[max(snaps)] if snaps else None)
    run_types, run_source = typed(train_types(sweep.root, ref_snap), stages, best.submission_id if best else None)
    log = sweep.run_dir(run_id) / "agent.log"
    log_text = log.read_text(errors="replace") if log.exists() else ""
    failure, source = run_failure(result, best, rows, log_text, control=is_control(sweep, run.agent.name))
    leaks = find_leaks(
        sweep.root,
        markers(task_data(sweep.data_root(), result.task).heldout_dir),
        log_text,
        [snaps[seq] for seq in sorted(snaps)],
        entries,
    )
    try:
        verdicts = load_final_verdicts(sweep.run_dir(run_id))
    except RecordError:  # an unreadable inspection is no verdict; `a2rl inspect` writes it again
        verdicts = []
    agent_end = result.agent_ended_at or result.ended_at
    usage = result.usage
    metrics = RunMetrics(
        run_id=run_id,
        task=result.task,
        agent=result.agent,
        driver=result.driver,
        mode=run.mode,
        protocol=run.protocol,
        model=result.model,
        seed=result.seed,
        status=result.status,
        baseline=base,
        best=result.best,
        improvement=result.improvement,
        submissions=len(rows),
        valid_submission_rate=len(valid) / len(rows) if rows else None,
        first_valid_idx=rows.index(valid[0]) if valid else None,
        time_to_first_improvement=improved[0].at_s if improved else None,
        time_to_best=best.at_s if best else None,
        monotonic_ratio=sum(steps) / len(steps) if steps else None,
        copy_model_count=sum(r.copy_of_base for r in rows),
        time_used_ratio=round(result.agent_seconds / result.budget_s, 4),
        last_submit_gap=round(agent_end - t0 - rows[-1].at_s, 3) if rows else None,
        score_trajectory=[r.score for r in rows],
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        cost_usd=usage.cost_usd if usage else None,
        cpu_seconds=result.cpu_seconds,
        train_type="+".join(run_types) or "none",
        train_types_seen=seen,
        train_type_source=run_source,
        route=stages.route() or None if stages else None,
        failure_type=failure,
        failure_source=source,
        code_snapshots=len(snaps),
        leaks=leaks,
        inspector_flag=worst(verdicts),
        inspector_verdicts=verdicts,
        foreign_submissions=[r.iteration for r in rows if r.lineage == "foreign"],
        **result.model_dump(include=SPLIT_FIELDS),
    )
    return metrics, rows
