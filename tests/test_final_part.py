"""grading/final.py on its own (issue 36): when a run under `feedback: split` is due its one final-part score, and
what that score is — the pick scored on the FINAL items (a stand-in evaluator scores the two parts differently),
recorded once with the rule that picked it, the run's frozen copies deleted, the run's result refreshed. The
daemon around it is a stand-in (its sweep, queue, evaluator and pause); the ledger and the trust checks are real.
tests/test_final_split.py runs the same code inside a real grader."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

import a2rl.grading.final as final_mod
from a2rl.errors import InfraError
from a2rl.grading.final import FinalPart
from a2rl.store.ledger import Ledger, LedgerEntry

KEY = b"k" * 32
RUN = "arith.a2rl.r1"  # dotted, like the real run ids: a submission id is RUN.<seq>
SCORES = {"feedback": 70.0, "final": 30.0}  # what the stand-in evaluator gives every model on each part


class Status:
    def __init__(self, waiting: bool):
        self.waiting = waiting

    def waiting_for_scores(self) -> bool:
        return self.waiting


class Daemon(FinalPart):
    """FinalPart over stand-ins for the rest of GradingDaemon."""

    def __init__(self, tmp_path: Path, *, mode: str = "split", rule: str = "best-feedback", keep: bool = False):
        self.submissions = tmp_path / "submissions"
        self.submissions.mkdir()
        self.statuses: dict[str, Status] = {}
        self.sweep = SimpleNamespace(
            run=lambda rid: SimpleNamespace(run_id=rid, task="arith", protocol="a2rl", model=SimpleNamespace(name="m")),
            status=lambda rid: self.statuses.get(rid),
            submissions=self.submissions,
            spec=SimpleNamespace(
                storage=SimpleNamespace(keep="candidates"), grader=SimpleNamespace(keep_artifacts=keep)
            ),
        )
        self.pending: list[str] = []
        self.counts: dict[str, int] = {}
        self.queue = SimpleNamespace(pending_ids=lambda: list(self.pending), count=lambda rid: self.counts.get(rid, 0))
        self.ledger = Ledger(tmp_path / "ledger", KEY)
        self.mode = mode
        self.settings = SimpleNamespace(final=rule, keep_artifacts=keep)
        self.finished_runs = {RUN}
        self._final_settled: set[str] = set()
        self._state = "idle"
        self.holder = "grader-x"
        self.base = SimpleNamespace(status="ok", final_score=None, model_path=str(tmp_path / "base"))
        self._engine = SimpleNamespace(last="reloaded")
        self.evaluated: list[tuple] = []
        self.paused: list[tuple] = []
        self.refreshed: list[str] = []
        self.fail: Exception | None = None

    def task(self, name: str):
        assert name == "arith"
        return SimpleNamespace(
            name=name,
            feedback_mode=lambda protocol: self.mode if protocol == "a2rl" else "heldout",
            spec=SimpleNamespace(split=SimpleNamespace(feedback=5, final=7)),
        )

    def baseline(self, task: str, model: str, protocol: str):
        assert (task, model, protocol) == ("arith", "m", "a2rl")
        return self.base

    def preset(self, model: str) -> str:
        return f"preset of {model}"

    def evaluate(self, task, model_dir, base_dir, protocol, preset, part):
        self.evaluated.append((Path(model_dir), base_dir, protocol, preset, part, self._state))
        if self.fail is not None:
            raise self.fail
        return SCORES[part], {"part": part}

    def _pause(self, doing: str, cause: object, note: bool = True) -> None:
        self.paused.append((doing, str(cause), note))

    def refresh(self, run_id: str) -> None:
        self.refreshed.append(run_id)

    def submit(
        self,
        seq: int,
        score: float | None,
        *,
        marked: bool = False,
        copy: bool = False,
        frozen: bool = True,
        error: str | None = None,
    ):
        """A graded submission of RUN (its frozen copy under submissions/ unless not `frozen`)."""
        sid = f"{RUN}.{seq}"
        if frozen:
            (self.submissions / sid).mkdir()
            (self.submissions / sid / "config.json").write_text("{}")
        self.ledger.record(
            LedgerEntry(
                submission_id=sid,
                run_id=RUN,
                seq=seq,
                submitted_at=1.0,
                claimed_at=2.0,
                graded_at=3.0,
                status="scored" if score is not None else "invalid",
                score=score,
                model_path=f"out/{seq}",
                task="arith",
                protocol="a2rl",
                evaluator_version=1,
                grader="g0",
                attempt=2,
                part="feedback",
                n_items=5,
                marked_final=marked,
                copy_of_base=copy,
                grading_key=f"key{seq}",
                cached_from="elsewhere",
                details={"feedback": True},
                engine="started",
                error=error,
            )
        )
        self.counts[RUN] = self.counts.get(RUN, 0) + 1
        return sid


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch):
    monkeypatch.setattr(final_mod, "now", lambda: 5000.0)
    monkeypatch.setattr("a2rl.grading.record.now", lambda: 5001.0)


def test_the_pick_is_scored_on_the_final_items_and_recorded_once(tmp_path, caplog):
    d = Daemon(tmp_path)
    d.submit(1, 40.0)
    best = d.submit(2, 60.0)
    d.submit(3, None, frozen=False)  # invalid: never frozen, nothing to delete
    assert d.final_due(RUN)
    with caplog.at_level(logging.INFO, logger="a2rl.grader"):
        final = d.score_final(RUN)
    assert d.evaluated == [(d.submissions / best, Path(d.base.model_path), "a2rl", "preset of m", "final", "grading")]
    assert d._state == "idle"
    assert (final.submission_id, final.seq, final.part, final.selected_by) == (best, 2, "final", "best-feedback")
    assert (final.status, final.score, final.error) == ("scored", SCORES["final"], None)  # not the feedback part's
    assert (final.n_items, final.details, final.engine) == (7, {"part": "final"}, "reloaded")
    assert (final.grader, final.attempt, final.claimed_at, final.graded_at) == ("grader-x", 1, 5000.0, 5001.0)
    assert (final.grading_key, final.cached_from, final.eval_seconds) == (None, None, 1.0)
    assert (final.submitted_at, final.model_path, final.marked_final) == (1.0, "out/2", False)
    assert d.ledger.final(RUN) == final
    assert [r.getMessage() for r in caplog.records if r.name == "a2rl.grader"] == [
        f"final part of {RUN} ({best}, best-feedback): 30.0"
    ]
    assert list(d.submissions.iterdir()) == []  # the run's frozen copies are gone
    assert d.refreshed == [RUN] and RUN in d._final_settled and not d.final_due(RUN)


def test_a_racing_grader_that_recorded_first_wins(tmp_path, caplog):
    d = Daemon(tmp_path, keep=True)
    d.submit(1, 40.0)
    first = d.score_final(RUN)
    d.fail = None
    SCORES_before = dict(SCORES)
    try:
        SCORES["final"] = 99.0
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="a2rl.grader"):
            again = d.score_final(RUN)  # as a second grader would
    finally:
        SCORES.update(SCORES_before)
    assert again == first and again.score == 30.0
    assert [r for r in caplog.records if r.name == "a2rl.grader"] == []
    assert [p.name for p in d.submissions.iterdir()] == [f"{RUN}.1"]  # keep_artifacts: left
    assert d.refreshed == [RUN, RUN]


@pytest.mark.parametrize(
    "rule, marks, picked, said",
    [
        ("last", (), 3, "last"),
        ("agent", (1,), 1, "agent"),
        ("agent", (3, 1), 3, "agent"),  # the latest marked, not the best or the first
        ("agent", (), 2, "agent: none marked, best-feedback"),
    ],
)
def test_the_rule_picks_which_submission(tmp_path, rule, marks, picked, said):
    d = Daemon(tmp_path, rule=rule)
    for seq, score in ((1, 10.0), (2, 80.0), (3, 50.0)):
        d.submit(seq, score, marked=seq in marks)
    final = d.score_final(RUN)
    assert (final.seq, final.selected_by) == (picked, said)
    assert d.evaluated[0][0] == d.submissions / f"{RUN}.{picked}"


def test_the_base_models_copy_takes_the_baselines_final_score(tmp_path):
    d = Daemon(tmp_path)
    d.base.final_score = 12.5
    d.submit(1, 50.0, copy=True)
    final = d.score_final(RUN)
    assert d.evaluated == [] and (final.status, final.score, final.details, final.engine) == ("scored", 12.5, {}, None)


@pytest.mark.parametrize("status, final_score", [("failed", 12.5), ("ok", None)])
def test_a_copy_is_evaluated_when_the_baseline_has_no_final_score(tmp_path, status, final_score):
    d = Daemon(tmp_path)
    d.base.status, d.base.final_score = status, final_score
    d.submit(1, 50.0, copy=True)
    assert d.score_final(RUN).score == SCORES["final"] and len(d.evaluated) == 1


def test_an_infrastructure_error_pauses_and_records_nothing(tmp_path):
    d = Daemon(tmp_path)
    d.submit(1, 50.0)
    d.fail = InfraError("the judge is down")
    assert d.score_final(RUN) is None
    assert d.paused == [(f"score the final part of {RUN}", "the judge is down", True)]
    assert d._state == "idle" and d.ledger.final(RUN) is None and d.refreshed == []
    assert RUN not in d._final_settled and d.final_due(RUN)  # tried again later
    assert (d.submissions / f"{RUN}.1").is_dir()


def test_a_full_disk_pauses_without_a_note(tmp_path):
    d = Daemon(tmp_path)
    d.submit(1, 50.0)
    d.fail = OSError(errno.ENOSPC, "No space left on device")
    assert d.score_final(RUN) is None
    assert d.paused == [(f"score the final part of {RUN}", "no space: [Errno 28] No space left on device", False)]
    assert d.ledger.final(RUN) is None


def test_weights_that_do_not_load_leave_an_invalid_final_entry(tmp_path):
    d = Daemon(tmp_path)
    d.submit(1, 50.0)
    d.fail = ValueError("bad weights")
    final = d.score_final(RUN)
    assert (final.status, final.score, final.error) == (
        "invalid",
        None,
        "final part not scored: ValueError: bad weights",
    )
    assert d.paused == [] and d.refreshed == [RUN]


def test_an_untrusted_frozen_copy_is_not_loaded(tmp_path):
    d = Daemon(tmp_path)
    sid = d.submit(1, 50.0)
    (d.submissions / sid / "config.json").write_text('{"auto_map": {}}')
    final = d.score_final(RUN)
    assert d.evaluated == [] and final.status == "invalid" and "auto_map" in final.error


def test_the_final_part_is_due_only_once_the_run_is_over_and_graded(tmp_path):
    d = Daemon(tmp_path)
    d.finished_runs = set()
    d.submit(1, 50.0)
    assert not d.final_due(RUN)  # still running
    d.finished_runs = {RUN}
    d.statuses[RUN] = Status(waiting=True)
    assert not d.final_due(RUN)  # its job waits for scores: not over
    d.statuses[RUN] = Status(waiting=False)
    d.pending = [f"{RUN}.2", f"{RUN}x.1"]
    assert not d.final_due(RUN)  # one of its submissions is still queued
    d.pending = [f"{RUN}x.1", "arith.a2rl.r2.1"]  # other runs' only
    d.counts[RUN] = 2
    assert not d.final_due(RUN)  # one submission not recorded yet
    d.counts[RUN] = 1
    assert d.final_due(RUN) and not d._final_settled
    d.counts[RUN] = 0  # more recorded than counted: still due
    assert d.final_due(RUN)


def test_runs_that_never_get_a_final_part_are_settled_once(tmp_path):
    d = Daemon(tmp_path)
    d.submit(1, None, frozen=False)
    assert not d.final_due(RUN) and d._final_settled == {RUN}  # nothing scored: nothing to select
    d._final_settled.clear()
    d.ledger = None  # a settled run is not looked at again
    d._final_settled.add(RUN)
    assert not d.final_due(RUN)
    (tmp_path / "b").mkdir()
    d2 = Daemon(tmp_path / "b", mode="heldout")
    d2.submit(1, 50.0)
    assert not d2.final_due(RUN) and d2._final_settled == {RUN}
    (tmp_path / "c").mkdir()
    d3 = Daemon(tmp_path / "c")
    d3.submit(1, 50.0)
    d3.score_final(RUN)
    d3._final_settled.clear()
    assert not d3.final_due(RUN) and d3._final_settled == {RUN}  # recorded already


def test_the_final_entry_carries_no_error_of_the_feedback_parts(tmp_path):
    d = Daemon(tmp_path)
    d.submit(1, 50.0, error="a note from its feedback grading")
    assert d.score_final(RUN).error is None


def test_a_full_disk_while_recording_is_waited_out_and_named(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("a2rl.records.FULL_RETRY_S", 0.0)
    d = Daemon(tmp_path)
    d.submit(1, 50.0)
    real = d.ledger.record_final
    tries = []

    def full_once(entry):
        tries.append(entry)
        if len(tries) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(entry)

    d.ledger.record_final = full_once
    with caplog.at_level(logging.INFO):
        final = d.score_final(RUN)
    assert len(tries) == 2 and final.score == SCORES["final"]
    waits = [r.getMessage() for r in caplog.records if r.name == "a2rl.records"]
    assert waits[0].startswith(f"recording the final part of {RUN}: no space left on the file system")
