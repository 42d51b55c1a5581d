"""store/results.py on its own (issue 36): what a run's result says, built from the ledger and the baseline only
(best, improvement, ungraded, per-submission lists, the `feedback: split` figures), and how it is written, folded
into later (a landed score, baseline or final part), reaped as lost, read (verified, the caller's bytes) and polled
(FinishedRuns). The sweep is a real one on the echo test task (no model); ledger entries are written directly."""

from __future__ import annotations

import errno
import logging
import socket
import time
from types import SimpleNamespace

import pytest

from a2rl.grading.lineage import Lineage
from a2rl.records import RecordError
from a2rl.scheduling.launcher import open_sweep
from a2rl.store.baselines import BaselineRecord, baseline_path
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import (
    FinishedRuns,
    RunResult,
    build_result,
    load_result,
    mark_lost,
    no_hook,
    refresh_result,
    write_result,
)
from a2rl.store.retries import RETRIES
from a2rl.store.sweepdir import RunStatus
from conftest import write_sweep

RUN = SimpleNamespace(
    run_id="t.r1",
    task="echo",
    protocol="paper",
    agent=SimpleNamespace(key="baseline"),
    driver="api",
    model=SimpleNamespace(name="m"),
    seed=3,
    budget_s=60.0,
)
TIMES = dict(agent_seconds=12.0, started_at=100.0, ended_at=130.5)


def entry(seq: int, score: float | None, run_id: str = RUN.run_id, **fields) -> LedgerEntry:
    return LedgerEntry(
        **{
            "submission_id": f"{run_id}.{seq:04d}",
            "run_id": run_id,
            "seq": seq,
            "submitted_at": 1.0,
            "claimed_at": 2.0,
            "graded_at": 3.0,
            "status": "scored" if score is not None else "invalid",
            "score": score,
            "model_path": f"out/{seq}",
            "task": "echo",
            "protocol": "paper",
            "evaluator_version": 1,
            "grader": "g",
            "attempt": 1,
            **fields,
        }
    )


def baseline(status: str = "ok", score: float | None = 20.0, **fields) -> BaselineRecord:
    return BaselineRecord(
        **{
            "task": "echo",
            "protocol": "paper",
            "model": "m",
            "model_path": "base",
            "weights_hash": "h",
            "evaluator_version": 1,
            "status": status,
            "score": score,
            "graded_at": 1.0,
            **fields,
        }
    )


def build(entries, base, submitted=None, **kw) -> RunResult:
    return build_result(
        RUN,
        status=kw.pop("status", "ok"),
        entries=entries,
        baseline=base,
        submitted=len(entries) if submitted is None else submitted,
        failure_reason=kw.pop("failure_reason", None),
        agent_exit_code=kw.pop("agent_exit_code", 0),
        **TIMES,
        **kw,
    )


FOREIGN = Lineage(verdict="foreign", reason="unrelated weights")


def test_a_result_is_the_ledgers_best_against_the_baseline():
    entries = [
        entry(1, 30.0, budget_used_s=5.0, tokens=10),
        entry(2, None),
        entry(3, 55.0, lineage=FOREIGN),
        entry(4, 55.0),
    ]
    r = build(entries, baseline(), submitted=6, cpu_seconds=4.0)
    assert (r.run_id, r.task, r.protocol, r.agent, r.driver, r.model, r.seed) == (
        "t.r1",
        "echo",
        "paper",
        "baseline",
        "api",
        "m",
        3,
    )
    assert (r.status, r.failure_reason, r.agent_exit_code, r.cpu_seconds) == ("ok", None, 0, 4.0)
    assert (r.baseline, r.baseline_error, r.best, r.best_submission, r.improvement) == (
        20.0,
        None,
        55.0,
        "t.r1.0003",
        35.0,
    )
    assert (r.submissions, r.valid_submissions, r.ungraded_submissions) == (6, 3, 2)
    assert r.scores == [30.0, None, 55.0, 55.0]
    assert r.submitted_budget_s == [5.0, None, None, None] and r.submitted_tokens == [10, None, None, None]
    assert r.foreign_submissions == [3]
    assert (r.budget_s, r.agent_seconds, r.wall_seconds, r.started_at, r.ended_at) == (60.0, 12.0, 30.5, 100.0, 130.5)
    assert (r.feedback, r.feedback_n, r.final, r.baseline_final, r.selection_gap) == ("heldout", None, None, None, None)


def test_without_a_scored_submission_or_a_baseline_nothing_is_made_up():
    r = build([entry(1, None)], None)
    assert (r.best, r.best_submission, r.improvement, r.baseline) == (None, None, None, None)
    assert r.baseline_error == "no baseline was recorded"
    r = build([entry(1, 40.0)], baseline("failed", None, error="the base model would not load"))
    assert (r.baseline, r.baseline_error, r.improvement, r.best) == (None, "the base model would not load", None, 40.0)
    r = build([entry(1, 40.0)], baseline(score=0.0))
    assert (r.baseline, r.baseline_error, r.improvement) == (0.0, None, 40.0)
    r = build([entry(1, 0.0)], baseline(score=10.0))
    assert (r.best, r.improvement) == (0.0, -10.0)


def split_entries():
    return [entry(1, 60.0, part="feedback", n_items=None), entry(2, 80.0, part="feedback", n_items=40)]


def final_entry(score: float | None, error: str | None = None) -> LedgerEntry:
    return entry(2, score, part="final", n_items=60, selected_by="best-feedback", error=error)


def test_a_split_run_shows_the_final_part_beside_the_feedback_part():
    base = baseline(score=20.0, part="feedback", final_score=25.0)
    r = build(split_entries(), base, final=final_entry(50.0))
    assert (r.feedback, r.feedback_n, r.best, r.improvement) == ("split", 40, 80.0, 60.0)
    assert (r.final, r.final_submission, r.final_selected_by, r.final_n, r.final_error) == (
        50.0,
        "t.r1.0002",
        "best-feedback",
        60,
        None,
    )
    assert (r.baseline_final, r.final_improvement, r.selection_gap) == (25.0, 25.0, 30.0)
    waiting = build(split_entries(), base)  # the final part not scored yet
    assert (waiting.feedback, waiting.final, waiting.final_submission, waiting.final_n) == ("split", None, None, None)
    assert (waiting.baseline_final, waiting.final_improvement, waiting.selection_gap) == (25.0, None, None)


def test_an_unscored_final_part_says_why_and_shows_no_figures():
    base = baseline(score=20.0, part="feedback", final_score=25.0)
    r = build(split_entries(), base, final=final_entry(None, error="final part not scored: OSError: gone"))
    assert (r.final, r.final_submission, r.final_error) == (None, "t.r1.0002", "final part not scored: OSError: gone")
    assert (r.final_improvement, r.selection_gap) == (None, None)


def test_the_split_shows_from_the_ledger_or_the_baseline_alone():
    r = build(split_entries(), None, final=final_entry(50.0))  # no baseline yet
    assert (r.feedback, r.final, r.baseline_final, r.final_improvement, r.selection_gap) == (
        "split",
        50.0,
        None,
        None,
        30.0,
    )
    base = baseline(score=20.0, part="feedback", final_score=25.0)
    r = build([], base)  # no submission yet
    assert (r.feedback, r.feedback_n, r.baseline_final, r.best) == ("split", None, 25.0, None)
    r = build([entry(1, 60.0, part="feedback")], baseline("failed", None, part="feedback", final_score=25.0))
    assert (r.feedback, r.baseline_final) == ("split", None)  # a failed baseline has no final figure
    r = build([entry(1, 60.0)], baseline(final_score=25.0))  # not split: a final score is not shown
    assert (r.feedback, r.baseline_final) == ("heldout", None)


# ---------------------------------------------------------------- on disk, in a real sweep


@pytest.fixture
def sweep(tmp_path):
    sweep, _ = open_sweep(write_sweep(tmp_path, grader={"lock_timeout_s": 1}), tmp_path / "sd")
    return sweep


def queued(sweep, run_id: str, n: int) -> list[str]:
    return [sweep.queue.submit(run_id, f"output/v{i}", lambda sid: None, "test").submission_id for i in range(n)]


def record(sweep, sid: str, score: float | None, **fields) -> None:
    run_id, seq = sid.rsplit(".", 1)
    assert sweep.ledger.record(entry(int(seq), score, run_id=run_id, submission_id=sid, **fields))


def same(a: RunResult | None, b: RunResult) -> bool:
    """Equal but for the version stamp (set on the file, not on the object written)."""
    return a is not None and a.model_dump(exclude={"schema_version"}) == b.model_dump(exclude={"schema_version"})


def write(sweep, run_id: str, **fields) -> RunResult:
    fields = {"status": "ok", "failure_reason": None, "agent_exit_code": 0, **TIMES, **fields}
    return write_result(sweep, run_id, **fields)


def test_the_jobs_result_lists_what_is_not_graded_and_a_refresh_folds_it_in(sweep):
    (run,) = sweep.runs()
    rid = run.run_id
    sids = queued(sweep, rid, 3)
    record(sweep, sids[0], 40.0)
    written = write(sweep, rid, cpu_seconds=3.0, caps_hit=["processes: 5"], uncharged_seconds=2.0)
    assert written.failure_reason == "2 submission(s) not graded yet when the run ended"
    assert same(load_result(sweep, rid), written) and written.hmac is not None
    assert (written.submissions, written.ungraded_submissions, written.baseline_error) == (
        3,
        2,
        "no baseline was recorded",
    )
    record(sweep, sids[1], 70.0)
    partly = refresh_result(sweep, rid)
    assert partly.failure_reason == "1 submission(s) not graded yet when the run ended"
    assert (partly.scores, partly.best, partly.ungraded_submissions) == ([40.0, 70.0], 70.0, 1)
    assert (partly.cpu_seconds, partly.caps_hit, partly.uncharged_seconds, partly.agent_seconds) == (
        3.0,
        ["processes: 5"],
        2.0,
        12.0,
    )
    record(sweep, sids[2], None)
    done = refresh_result(sweep, rid)
    assert (done.failure_reason, done.ungraded_submissions, done.status) == (None, 0, "ok")
    assert same(load_result(sweep, rid), done)
    assert refresh_result(sweep, rid) is None  # nothing left to fold in
    assert refresh_result(sweep, "t.no-such-run") is None  # no result to refresh


def test_a_failed_runs_reason_is_kept_and_not_told_it_waits(sweep):
    (run,) = sweep.runs()
    rid = run.run_id
    sids = queued(sweep, rid, 2)
    r = write(sweep, rid, status="failed", failure_reason="the job died")
    assert r.failure_reason == "the job died" and r.ungraded_submissions == 2
    record(sweep, sids[0], 10.0)
    assert refresh_result(sweep, rid).failure_reason == "the job died"
    r = write(sweep, rid, status="failed", failure_reason=None)
    assert r.failure_reason is None  # a failed run is not described as waiting for scores


def test_a_baseline_or_final_part_landing_later_is_folded_in(sweep):
    (run,) = sweep.runs()
    rid = run.run_id
    (sid,) = queued(sweep, rid, 1)
    record(sweep, sid, 40.0, part="feedback")
    assert write(sweep, rid).baseline is None
    assert refresh_result(sweep, rid) is None  # nothing landed yet
    baseline(score=15.0).sign(sweep.key).dump(baseline_path(sweep, run.task, run.model.name, run.protocol))
    landed = refresh_result(sweep, rid)
    assert (landed.baseline, landed.improvement, landed.baseline_error) == (15.0, 25.0, None)
    assert refresh_result(sweep, rid) is None
    assert sweep.ledger.record_final(entry(1, 33.0, run_id=rid, submission_id=sid, part="final", selected_by="last"))
    final = refresh_result(sweep, rid)
    assert (final.final, final.final_submission, final.final_selected_by) == (33.0, sid, "last")
    assert refresh_result(sweep, rid) is None


def test_a_lost_run_gets_a_failed_result_unless_its_job_wrote_one(sweep):
    (run,) = sweep.runs()
    rid = run.run_id
    RunStatus(run_id=rid, state="running", heartbeat_at=90.0, agent_seconds=7.0, setup_seconds=[1.5, 2.5]).dump(
        sweep.run_dir(rid) / "status.json"
    )
    (sid,) = queued(sweep, rid, 1)
    lost = mark_lost(sweep, run, "node lost")
    assert (lost.status, lost.failure_reason, lost.agent_exit_code, lost.agent_seconds) == (
        "failed",
        "node lost",
        None,
        7.0,
    )
    assert (lost.started_at, lost.setup_seconds, lost.setup_seconds_by_attempt) == (90.0, 4.0, [1.5, 2.5])
    assert lost.ended_at >= time.time() - 60 and lost.ungraded_submissions == 1
    assert same(load_result(sweep, rid), lost)
    again = mark_lost(sweep, run, "reaped twice")  # the first result stands
    assert same(again, lost) and load_result(sweep, rid).failure_reason == "node lost"
    sweep.result_path(rid).unlink()
    (sweep.run_dir(rid) / "cancelled").touch()
    assert mark_lost(sweep, run, "job gone").failure_reason == "cancelled by `a2rl cancel` (job gone)"


def test_a_lost_run_without_a_status_and_a_planted_result_is_replaced(sweep, caplog):
    (run,) = sweep.runs()
    rid = run.run_id
    before = time.time()
    planted = build_result(
        run, status="ok", entries=[], baseline=None, submitted=0, failure_reason=None, agent_exit_code=0, **TIMES
    )
    planted.dump(sweep.result_path(rid))  # unsigned: not written by this sweep
    lost = mark_lost(sweep, run, "no job")
    assert (lost.agent_seconds, lost.setup_seconds, lost.setup_seconds_by_attempt) == (0.0, 0.0, [])
    assert before <= lost.started_at == lost.ended_at
    assert same(load_result(sweep, rid), lost)


def test_load_result_skips_and_reports_what_does_not_verify(sweep, caplog):
    (run,) = sweep.runs()
    rid = run.run_id
    problems: list[str] = []
    assert load_result(sweep, rid, problems) is None and problems == []  # none yet: not a problem
    r = write(sweep, rid)
    raw = sweep.result_path(rid).read_bytes()
    assert same(load_result(sweep, rid, problems, raw), r)
    forged = r.model_copy(update={"best": 99.0})
    forged.dump(sweep.result_path(rid))
    with caplog.at_level(logging.WARNING, logger="a2rl.results"):
        assert load_result(sweep, rid, problems) is None
        assert load_result(sweep, rid) is None  # without a list: logged only
    warned = [r.getMessage() for r in caplog.records if r.name == "a2rl.results"]
    assert len(problems) == 1 and "does not verify" in problems[0] and "does not verify" in warned[0]
    assert same(load_result(sweep, rid, None, raw), r)  # the bytes the caller read are what is checked


def test_load_result_reads_again_only_after_a_failed_or_torn_read(sweep):
    (run,) = sweep.runs()
    rid = run.run_id
    r = write(sweep, rid)
    assert same(load_result(sweep, rid, None, OSError(errno.ESTALE, "stale")), r)  # read again: it is there
    assert same(load_result(sweep, rid, None, b'{"torn'), r)
    other = r.model_copy(update={"best": 1.0}).sign(sweep.key)
    other.dump(sweep.root / "other.json")
    raw_other = (sweep.root / "other.json").read_bytes()
    assert same(load_result(sweep, rid, None, raw_other), other)  # the bytes given, not the file
    problems: list[str] = []
    assert load_result(sweep, rid, problems, raw_other.replace(b'"hmac": "', b'"hmac": "0')) is None
    assert problems and "does not verify" in problems[0]  # a bad signature is not read again


def test_finished_runs_count_only_verified_results_and_remember_them(tmp_path):
    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=[0, 1, 2, 3, 4]), tmp_path / "sd")
    ids = [r.run_id for r in runs]
    finished = FinishedRuns(sweep, ids)
    assert not finished.all() and ids[0] not in finished
    write(sweep, ids[0])
    planted = write(sweep, ids[1])
    planted.model_copy(update={"hmac": None}).dump(sweep.result_path(ids[1]))
    assert ids[0] in finished and ids[1] not in finished
    sweep.result_path(ids[0]).unlink()
    assert ids[0] in finished  # once verified, finished: not read again
    for rid in ids[1:]:
        write(sweep, rid)
    assert finished.all()


@pytest.mark.parametrize(
    "state, fresh, at_work",
    [
        ("deferred", False, True),
        ("submitted", False, True),
        ("interrupted", False, True),
        ("running", True, True),
        ("finishing", True, True),
        ("running", False, False),  # its heartbeat is stale: presumed dead
        ("finishing", False, False),
        ("finished", True, False),
    ],
)
def test_a_run_is_at_work_while_it_is_queued_deferred_interrupted_or_alive(tmp_path, state, fresh, at_work):
    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=[0, 1]), tmp_path / "sd")
    ids = [r.run_id for r in runs]
    write(sweep, ids[0])  # finished: whatever its status says, it is not at work
    RunStatus(run_id=ids[0], state="running", heartbeat_at=time.time()).dump(sweep.run_dir(ids[0]) / "status.json")
    finished = FinishedRuns(sweep, ids)
    assert not finished.any_at_work()  # the other has no status yet
    beat = time.time() if fresh else time.time() - 3600
    RunStatus(run_id=ids[1], state=state, heartbeat_at=beat, host=socket.gethostname()).dump(
        sweep.run_dir(ids[1]) / "status.json"
    )
    assert finished.any_at_work() is at_work


def test_the_hook_nobody_listens_to_does_nothing(sweep):
    (run,) = sweep.runs()
    assert no_hook(sweep, run.run_id, write(sweep, run.run_id)) is None


def test_a_result_of_an_unknown_shape_is_a_problem_not_a_crash(sweep):
    (run,) = sweep.runs()
    sweep.result_path(run.run_id).parent.mkdir(parents=True, exist_ok=True)
    sweep.result_path(run.run_id).write_text('{"schema_version": 1}')
    problems: list[str] = []
    assert load_result(sweep, run.run_id, problems) is None
    assert problems and "RunResult version 1 is older than any a2rl 1.x reads" in problems[0]
    with pytest.raises(RecordError):
        RunResult.load(sweep.result_path(run.run_id))


def test_a_torn_read_of_a_result_is_retried_and_counted_as_one(sweep, monkeypatch):
    (run,) = sweep.runs()
    r = write(sweep, run.run_id)
    real = RunResult.load_verified_or_none.__func__
    calls = []

    def torn_once(cls, path, key, raw=None):
        calls.append(path)
        if len(calls) == 1:
            raise RecordError("torn") from ValueError("half a file")
        return real(cls, path, key, raw)

    monkeypatch.setattr(RunResult, "load_verified_or_none", classmethod(torn_once))
    before = RETRIES.counts["result"]
    assert same(load_result(sweep, run.run_id), r) and len(calls) == 2
    assert RETRIES.counts["result"] == before + 1
