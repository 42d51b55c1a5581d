"""The hostile agent's attacks on the record, the grader and the grading API (issue 15). Each ends the same way:
the ledger and results are unchanged, the grader stays up, and another run of the same sweep is graded
normally."""

from __future__ import annotations

import json
import logging
import pickle
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from a2rl.grading.daemon import GradingDaemon
from a2rl.records import now
from a2rl.run.api import GradingAPI
from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.tasks import get_task
from a2rl.store.baselines import baseline_path, load_baseline
from a2rl.store.queue import QueueEntry
from a2rl.store.results import load_result, write_result
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, a2rl, write_sweep

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402


class Run:
    def __init__(self, sweep, spec, tiny_model):
        task = get_task("echo", [FIXTURES / "tasks"])
        self.sweep, self.spec = sweep, spec
        self.ws = create_workspace(
            sweep.workspace(spec.run_id),
            task=task,
            data=ensure_prepared(task, sweep.data_root()),
            model_dir=tiny_model,
            budget_s=60,
            source_tree=REPO,
        )
        self.submitter = RunSubmitter(sweep, spec, self.ws, Budget(60))

    def variant(self, name: str, score: float, tiny_model: Path) -> Path:
        return make_variant(tiny_model, self.ws.output / name, score=score, salt=int(score) + 1)


@pytest.fixture
def two(tmp_path, tiny_model):
    """A sweep of two runs (the victim and the attacker), their submitters, and a grader driven by hand."""
    sweep, specs = open_sweep(
        write_sweep(
            tmp_path, seeds=[0, 1], grader={"poll_s": 0.05, "lease_s": 5, "idle_timeout_s": 120, "lock_timeout_s": 0.3}
        ),
        tmp_path / "sd",
    )
    runs = [Run(sweep, s, tiny_model) for s in specs]
    grader = GradingDaemon(sweep)

    def drain() -> None:
        while (claim := sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is not None:
            grader.grade(claim)

    return sweep, runs, grader, drain


def graded(sweep, run: Run, path: Path, drain) -> dict:
    queued = run.submitter.submit(str(path), wait=False)
    drain()
    return run.submitter.response(sweep.ledger.get(queued["submission_id"]))


def another_run_finishes_normally(sweep, run: Run, drain, tiny_model) -> None:
    answer = graded(sweep, run, run.variant("normal", 30, tiny_model), drain)
    assert answer["score"] == 30.0 and "error" not in answer, answer


# ------------------------------------------------------------------ the record
@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_forged_planted_and_garbage_ledger_entries_are_skipped_and_reported(two, tiny_model):
    sweep, (victim, attacker), grader, drain = two
    sid = graded(sweep, attacker, attacker.variant("v", 0, tiny_model), drain)["submission_id"]
    path = sweep.ledger.path(sid)
    forged = json.loads(path.read_text())
    forged["score"] = 100.0  # 0 → 100, hmac kept
    path.write_text(json.dumps(forged))
    planted = dict(forged, submission_id=f"{victim.spec.run_id}.0001", run_id=victim.spec.run_id, hmac=None)
    sweep.ledger.path(planted["submission_id"]).parent.mkdir(parents=True, exist_ok=True)
    sweep.ledger.path(planted["submission_id"]).write_text(json.dumps(planted))
    garbage = sweep.ledger.root / attacker.spec.run_id / "zzz.json"
    garbage.write_text("[1, 2")

    ledger = sweep.ledger
    assert ledger.entries(attacker.spec.run_id) == [] and ledger.get(sid) is None
    assert ledger.entries(victim.spec.run_id) == []
    assert any(str(path) in p and "does not verify" in p for p in ledger.problems)
    assert any(str(garbage) in p for p in ledger.problems)
    status = a2rl("status", str(sweep.root))
    assert status.returncode == 0, status.stderr
    assert f"skipped: {path}" in status.stdout and str(garbage) in status.stdout
    agg = a2rl("aggregate", str(sweep.root))
    assert agg.returncode == 0, agg.stderr
    # the victim's real first submission replaces the planted entry
    another_run_finishes_normally(sweep, victim, drain, tiny_model)
    assert sweep.ledger.get(planted["submission_id"]).score == 30.0


def test_a_forged_baseline_is_ignored_and_graded_again(two, tiny_model):
    sweep, (victim, _), grader, drain = two
    grader.baseline("echo", "tiny-llama", "paper")
    path = baseline_path(sweep, "echo", "tiny-llama", "paper")
    rec = json.loads(path.read_text())
    path.write_text(json.dumps(dict(rec, score=-50.0)))
    problems: list[str] = []
    assert load_baseline(sweep, "echo", "tiny-llama", "paper", problems) is None and str(path) in problems[0]
    fresh = GradingDaemon(sweep)  # a grader that reads the file again grades the base model again
    assert fresh.baseline("echo", "tiny-llama", "paper").score == 0.0
    copy = victim.ws.output / "copy"
    shutil.copytree(tiny_model, copy)

    def drain_fresh():
        return [fresh.grade(c) for c in iter(lambda: sweep.queue.claim(fresh.holder, 60, sweep.ledger.has), None)]

    answer = graded(sweep, victim, copy, drain_fresh)
    assert answer["score"] == answer["baseline_score"] == 0.0


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_a_rewritten_result_json_is_refused_by_every_reader(two, tiny_model):
    sweep, (victim, attacker), grader, drain = two
    graded(sweep, attacker, attacker.variant("v", 10, tiny_model), drain)
    write_result(
        sweep,
        attacker.spec.run_id,
        status="ok",
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=1.0,
        started_at=now(),
        ended_at=now(),
    )
    assert load_result(sweep, attacker.spec.run_id).best == 10.0
    path = sweep.result_path(attacker.spec.run_id)
    path.write_text(json.dumps(dict(json.loads(path.read_text()), best=100.0, improvement=100.0)))
    assert load_result(sweep, attacker.spec.run_id) is None
    agg = a2rl("aggregate", str(sweep.root))
    assert agg.returncode == 0 and f"skipped: {path}" in agg.stderr and "100.00" not in agg.stdout
    another_run_finishes_normally(sweep, victim, drain, tiny_model)


# ------------------------------------------------------------------ the grader
def test_a_hand_written_queue_entry_is_never_graded_and_its_artifact_never_deleted(two, tiny_model, tmp_path):
    sweep, (victim, attacker), grader, drain = two
    precious = tmp_path / "precious"
    make_variant(tiny_model, precious, score=99, salt=9)
    sid = f"{attacker.spec.run_id}.0007"
    QueueEntry(
        submission_id=sid,
        run_id=attacker.spec.run_id,
        seq=7,
        submitted_at=now(),
        model_path="x",
        artifact=str(precious),
    ).dump(sweep.queue.pending / f"{sid}.json")
    assert sweep.queue.claim(grader.holder, 60, sweep.ledger.has) is None
    assert (sweep.queue.rejected / f"{sid}.json").exists() and not sweep.ledger.has(sid)
    # even a signed entry (the key leaked) naming a directory outside submissions/ is refused, and kept
    entry = sweep.queue.submit(attacker.spec.run_id, "x", lambda s: str(precious))
    drain()
    got = sweep.ledger.get(entry.submission_id)
    assert got.status == "invalid" and "not a frozen copy" in got.error
    assert (precious / "config.json").exists()
    another_run_finishes_normally(sweep, victim, drain, tiny_model)


def _frozen(sweep, run: Run, name: str, tiny_model: Path, edit) -> str:
    """A signed queue entry whose frozen copy the test edits (as a same-user agent could, after the checks)."""

    def freeze(sid: str) -> str:
        dest = sweep.submissions / sid
        make_variant(tiny_model, dest, score=50, salt=11)
        edit(dest)
        return str(dest)

    return sweep.queue.submit(run.spec.run_id, name, freeze).submission_id


def _shard_index_outside(d: Path) -> None:
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"w": "/etc/model.safetensors", "v": "../x/model.safetensors"}})
    )


def _lying_header(d: Path) -> None:
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes((1 << 40).to_bytes(8, "little") + data[8:])


def _remote_code(d: Path) -> None:
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "evil.M"}}))
    (d / "evil.py").write_text("open('MARKER', 'w').write('ran')\n")


@pytest.mark.parametrize(
    "edit,expected",
    [
        (_shard_index_outside, "not a weights file"),
        (_lying_header, "safetensors header claims"),
        (_remote_code, "custom model code"),
    ],
)
def test_the_grader_refuses_frozen_copies_it_cannot_trust(two, tiny_model, edit, expected):
    sweep, (victim, attacker), grader, drain = two
    sid = _frozen(sweep, attacker, "x", tiny_model, edit)
    drain()
    got = sweep.ledger.get(sid)
    assert got.status == "invalid" and expected in got.error, got.error
    assert not Path("MARKER").exists()
    another_run_finishes_normally(sweep, victim, drain, tiny_model)


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_submission_checks_escapes_pickles_limits(two, tiny_model, tmp_path):
    sweep, (victim, attacker), grader, drain = two
    out = attacker.ws.output
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (Path.write_text, (marker, "unpickled"))

    cases = {}
    evil = attacker.variant("evil", 20, tiny_model)
    (evil / "pytorch_model.bin").write_bytes(pickle.dumps(Payload()))
    pkl = out / "pkl"
    pkl.mkdir()
    (pkl / "config.json").write_text("{}")
    (pkl / "pytorch_model.bin").write_bytes(pickle.dumps(Payload()))
    cases["pickle only"] = (str(pkl), "only pickle checkpoints")
    many = out / "many"
    many.mkdir()
    for i in range(10_000):
        (many / f"f{i}.json").touch()
    cases["10,000 files"] = (str(many), "more than 64 entries")
    sparse = attacker.variant("sparse", 20, tiny_model)
    with open(sparse / "model-00002.safetensors", "wb") as f:
        f.truncate(5 << 30)
    cases["5 GB sparse"] = (str(sparse), "over the limit")
    shard = attacker.variant("shard", 20, tiny_model)
    _shard_index_outside(shard)
    cases["shard index outside"] = (str(shard), "not a weights file")
    liar = attacker.variant("liar", 20, tiny_model)
    _lying_header(liar)
    cases["lying header"] = (str(liar), "safetensors header claims")
    (out / "up").symlink_to(tmp_path)
    cases["symlink escape"] = ("output/up", "outside the run's output directory")
    cases["../ escape"] = ("output/../../", "outside the run's output directory")
    for name, (path, expected) in cases.items():
        answer = graded(sweep, attacker, Path(path), drain)
        assert expected in answer["error"], (name, answer)
    assert not sweep.submissions.exists()  # nothing refused was copied
    assert graded(sweep, attacker, evil, drain)["score"] == 20.0  # the pickle never travels, never loads
    assert not marker.exists()
    another_run_finishes_normally(sweep, victim, drain, tiny_model)


def test_held_locks_cost_the_grader_a_round_not_its_life(two, tiny_model, caplog):
    sweep, (victim, attacker), grader, drain = two
    caplog.set_level(logging.WARNING)
    sid = victim.submitter.submit(str(victim.variant("v", 30, tiny_model)), wait=False)["submission_id"]
    grader.settings.idle_timeout_s = 0.5
    with FileLock(str(sweep.queue.root / ".lock")):
        assert grader.run() == 0  # idle: the lock never came free, the grader went on polling
    assert f"lock {sweep.queue.root / '.lock'} held for 0.3 s; skipping this round" in caplog.text
    assert not sweep.ledger.has(sid)
    write_result(
        sweep,
        victim.spec.run_id,
        status="ok",
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=1.0,
        started_at=now(),
        ended_at=now(),
    )
    with FileLock(str(sweep.result_path(victim.spec.run_id)) + ".lock"):
        drain()  # records the score; folding it into result.json waits for the run's next score
    assert sweep.ledger.get(sid).score == 30.0
    assert "result.json.lock held for 0.3 s; skipping this round" in caplog.text


# ------------------------------------------------------------------ the HTTP API
def _call(
    api: GradingAPI,
    method: str,
    route: str,
    body: bytes | None = None,
    token: str | None = "ok",
    path: str | None = None,
) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {api.token if token == 'ok' else token}"
    req = urllib.request.Request(path or f"{api.url}{route}", data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_api_answers_every_request_in_json_and_only_its_run(two, tiny_model):
    sweep, (victim, attacker), grader, drain = two
    run = attacker
    with GradingAPI(run.submitter, run.submitter.budget) as api:
        for token in (None, "wrong"):
            assert _call(api, "GET", "/time", token=token)[0] == 401
            assert _call(api, "POST", "/submit", b'{"model_path": "output/x"}', token=token)[0] == 401
        assert _call(api, "GET", "/time", token=None, path=f"{api.url}/time?token={api.token}")[0] == 200
        bad = [
            b"[1]",
            b'"s"',
            b"5",
            b"null",
            b"\xff\xfe",
            b"{",
            b'{"model_path": 5}',
            b'{"model_path": ["a"]}',
            json.dumps({"model_path": "output/a\0b"}).encode(),
            json.dumps({"model_path": "a" * 5000}).encode(),
            json.dumps({"model_path": "output/" + "b" * 300}).encode(),
        ]
        for body in bad:
            code, answer = _call(api, "POST", "/submit", body)
            assert code == 400 and answer["error"], (body, code, answer)
        code, answer = _call(api, "POST", "/submit", b"{" + b" " * (1 << 20) + b"}")
        assert code == 413 and "at most" in answer["error"]
        code, answer = _call(api, "GET", "/x" * 40_000)
        assert code == 414 and answer["error"]
        assert sweep.queue.count(run.spec.run_id) == 0  # none of them was enqueued


def test_a_second_submission_in_flight_gets_429_and_a_burst_is_answered(two, tiny_model):
    sweep, (victim, attacker), grader, drain = two
    run = attacker
    stop = threading.Event()

    def grade_loop() -> None:
        while not stop.wait(0.02):
            try:
                drain()
            except Timeout:  # the 200 submitters held the queue's lock past 0.3 s: the daemon skips a round too
                pass

    with GradingAPI(run.submitter, run.submitter.budget) as api:
        first = ThreadPoolExecutor(1).submit(_call, api, "POST", "/submit", b'{"model_path": "output/none"}')
        while sweep.queue.count(run.spec.run_id) < 1:  # the first one is in flight (no grader yet)
            time.sleep(0.01)
        code, answer = _call(api, "POST", "/submit", b'{"model_path": "output/none"}')
        assert code == 429 and "already in flight" in answer["error"]
        threading.Thread(target=grade_loop, daemon=True).start()
        assert first.result()[0] == 200
        with ThreadPoolExecutor(50) as pool:
            answers = list(
                pool.map(lambda _: _call(api, "POST", "/submit", b'{"model_path": "output/none"}'), range(200))
            )
        stop.set()
    codes = [c for c, _ in answers]
    assert set(codes) <= {200, 429} and all(a.get("error") for _, a in answers)
    assert sweep.queue.count(run.spec.run_id) == 1 + codes.count(200)


def test_submissions_after_the_budget_are_refused_and_nothing_is_enqueued(two, tiny_model):
    sweep, (victim, attacker), grader, drain = two
    t = [0.0]
    run = attacker
    run.submitter.budget = budget = Budget(10, clock=lambda: t[0])
    with GradingAPI(run.submitter, budget) as api:
        t[0] = 10.0
        code, answer = _call(
            api, "POST", "/submit", json.dumps({"model_path": str(run.variant("late", 40, tiny_model))}).encode()
        )
    assert code == 403 and "used up" in answer["error"]
    assert sweep.queue.count(run.spec.run_id) == 0 and not sweep.queue.pending_ids()
    another_run_finishes_normally(sweep, victim, drain, tiny_model)


def test_a_planted_result_does_not_end_the_grader_while_its_run_works(tmp_path):
    """The grader leaves when every run has a result: only verified results count, or a same-user agent that
    writes an unsigned result.json for another run would leave that run's submissions ungraded."""
    from a2rl.grading.daemon import GradingDaemon
    from a2rl.scheduling.launcher import open_sweep

    sweep, (done, working) = open_sweep(write_sweep(tmp_path, seeds=[0, 1]), tmp_path / "sd")
    write_result(
        sweep,
        done.run_id,
        status="ok",
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=1.0,
        started_at=now(),
        ended_at=now(),
    )
    planted = json.loads(sweep.result_path(done.run_id).read_text())
    sweep.result_path(working.run_id).write_text(json.dumps(dict(planted, run_id=working.run_id)))
    grader = GradingDaemon(sweep)
    assert not grader.sweep_finished()
    write_result(
        sweep,
        working.run_id,
        status="ok",
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=1.0,
        started_at=now(),
        ended_at=now(),
    )
    assert grader.sweep_finished()
