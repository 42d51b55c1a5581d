"""`feedback: split` (issue 24 items 1-2): submissions are answered on the feedback part of the held-out items;
once the run has ended the grader scores its selected submission on the final part, once.

The policy is a stand-in (tests/fakes.py FakeGenerator) on the real arith task, evaluator, grader, queue, ledger
and results: each "model" answers each held-out item right with probability `a2rl_test_skill` (its config),
drawn from a hash of its weights and the item, so a perturbed copy of the base is the base's skill with fresh
per-item noise, and a trained one is more skilled. The real tiny model scores 0 on arith, which shows no gap."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from pydantic import ValidationError

import a2rl.grading.stages as stages_module
import a2rl.tasklib.prepare as prepare_module
from a2rl.grading.daemon import GradingDaemon
from a2rl.grading.final import select_final
from a2rl.llm.backends import CPU_SETTINGS, Engine
from a2rl.records import now
from a2rl.reporting.aggregate import Sweeps, tables
from a2rl.reporting.metrics import build
from a2rl.reporting.runreport import markdown
from a2rl.run.api import GradingAPI
from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.tasks import PARTS_DIR, TaskSpec, get_task
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import load_result, write_result
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.weights import weights_hash
from conftest import FIXTURES, REPO, a2rl, write_sweep
from fakes import FakeGenerator
from test_sandbox import needs_bwrap

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402


class SkilledModel(FakeGenerator):
    """Answers an arith item right with probability `skill`, fixed per (weights, item)."""

    def __init__(self, model_dir: Path, answers: dict[str, str]):
        self.answers = answers
        super().__init__(script=self._answer_for)
        self.load_weights(model_dir)

    def load_weights(self, model_dir: Path) -> None:
        self.skill = json.loads((Path(model_dir) / "config.json").read_text()).get("a2rl_test_skill", 0.5)
        self.digest = weights_hash(Path(model_dir))

    def _answer_for(self, prompt: str) -> str:
        u = int(hashlib.sha256(f"{self.digest}\0{prompt}".encode()).hexdigest()[:8], 16) / 16**8
        return f" {self.answers[prompt]}\n" if u < self.skill else " -1\n"


def variant(base: Path, dest: Path, *, salt: int, skill: float | None = None) -> Path:
    """The base model with one weight perturbed (`salt`), optionally with another skill."""
    make_variant(base, dest, score=None, salt=salt)
    if skill is not None:
        config = json.loads((dest / "config.json").read_text())
        (dest / "config.json").write_text(json.dumps({**config, "a2rl_test_skill": skill}))
    return dest


class Sweep:
    """An arith sweep under the a2rl protocol (feedback: split), a grader on the skilled stand-in, and a
    `submit` that grades each submission at once."""

    def __init__(self, tmp_path: Path, tiny_model: Path, monkeypatch, seeds: int = 1, storage=None, **grader):
        monkeypatch.setattr(
            stages_module, "scan_files", lambda *a: []
        )  # the leak scan (tested elsewhere): 90% of the time
        path = write_sweep(
            tmp_path,
            tasks=["arith"],
            task_paths=[],
            protocols=["a2rl"],
            seeds=list(range(seeds)),
            grader={"poll_s": 0.05, "lease_s": 30, "idle_timeout_s": 120, **grader},
            **({"storage": storage} if storage else {}),
        )
        self.sweep, self.runs = open_sweep(path, tmp_path / "sd")
        self.task = get_task("arith")
        self.data = data = ensure_prepared(self.task, self.sweep.data_root())
        answers = {
            r["prompt"]: r["answer"]
            for r in map(json.loads, (data.heldout_dir / "test.jsonl").read_text().splitlines())
        }
        self.grader = GradingDaemon(self.sweep)
        self.grader._engine = Engine(CPU_SETTINGS, loader=lambda s, model, tok, p: SkilledModel(model, answers))
        self.submitters = {
            spec.run_id: RunSubmitter(
                self.sweep,
                spec,
                create_workspace(
                    self.sweep.workspace(spec.run_id),
                    task=self.task,
                    data=data,
                    model_dir=tiny_model,
                    budget_s=600,
                    source_tree=REPO,
                    protocol="a2rl",
                    final=self.sweep.spec.grader.final,
                ),
                Budget(600),
            )
            for spec in self.runs
        }

    def submit(self, run_id: str, model: Path, final: bool = False) -> LedgerEntry:
        submitter = self.submitters[run_id]
        sid = submitter.submit(str(model), wait=False, final=final)["submission_id"]
        while (claim := self.sweep.queue.claim(self.grader.holder, 60, self.sweep.ledger.has)) is not None:
            self.grader.grade(claim)
        return self.sweep.ledger.get(sid)

    def expected(self, model: Path, part: str) -> float:
        """The score `model` gets on `part`, worked out from the stand-in's rule, not by the grader's code."""
        stand_in = SkilledModel(model, {})
        rows = [json.loads(r) for r in (self.data.part_dir(part) / "test.jsonl").read_text().splitlines()]
        right = [
            int(hashlib.sha256(f"{stand_in.digest}\0{r['prompt']}".encode()).hexdigest()[:8], 16) / 16**8
            < stand_in.skill
            for r in rows
        ]
        return 100 * sum(right) / len(right)

    def end(self, run_id: str) -> None:
        t = now()
        write_result(
            self.sweep,
            run_id,
            status="ok",
            failure_reason=None,
            agent_exit_code=0,
            agent_seconds=1.0,
            started_at=t,
            ended_at=t,
        )


def test_task_specs_refuse_a_split_for_paper_or_without_sizes():
    base = dict(name="t", level=1, kind="rule", evaluator_version=1, train_files=[], train_format="qa_short")
    with pytest.raises(ValidationError, match="paper protocol keeps"):
        TaskSpec(**base, split={"feedback": 1, "final": 1}, feedback={"paper": "split"})
    with pytest.raises(ValidationError, match="needs a `split:` section"):
        TaskSpec(**base, feedback={"a2rl": "split"})


def test_prepare_divides_the_heldout_items_once_with_a_secret_seed(tmp_path):
    task = get_task("arith")
    data = ensure_prepared(task, tmp_path / "data")
    rows = lambda part: (data.part_dir(part) / "test.jsonl").read_text().splitlines()  # noqa: E731
    feedback, final, everything = rows("feedback"), rows("final"), rows("heldout")
    assert (len(feedback), len(final)) == (task.spec.split.feedback, task.spec.split.final) == (100, 100)
    assert not set(feedback) & set(final) and set(feedback) | set(final) <= set(everything)
    assert data.parts_dir == data.heldout_dir.parent / PARTS_DIR
    assert (data.parts_dir.stat().st_mode & 0o077) == 0  # the grader's alone, as heldout/ is
    assert (data.parts_dir / "feedback" / "CANARY").read_text() == (data.heldout_dir / "CANARY").read_text()
    ensure_prepared(task, tmp_path / "data")
    assert rows("final") == final  # once: a second prepare keeps the parts
    other = ensure_prepared(task, tmp_path / "data2")
    assert (other.parts_dir / "SEED").read_text() != (data.parts_dir / "SEED").read_text()
    assert task.feedback_part("a2rl") == "feedback" and task.feedback_part("paper") == "heldout"


def test_the_final_part_is_scored_once_and_only_after_the_run_ends(tmp_path, tiny_model, monkeypatch):
    # a fixed secret seed: a drawn one can give both parts the same score, and the test needs them apart
    monkeypatch.setattr(prepare_module.secrets, "randbits", lambda k: 20261126)
    s = Sweep(tmp_path, tiny_model, monkeypatch)
    (run_id,) = s.submitters
    out = s.submitters[run_id].ws.output
    entries = [s.submit(run_id, variant(tiny_model, out / f"m{i}", salt=i + 1)) for i in range(3)]
    answer = s.submitters[run_id].response(entries[-1])
    assert "feedback part (100 items)" in answer["scored_on"]
    told = (s.submitters[run_id].ws.root / "instructions.md").read_text()
    assert "answered with are on 100 of the held-out items. After the run, your best-scoring submission is" in told
    # while the run works: every entry is on the feedback part, and nothing was scored on the final part
    assert [(e.status, e.part, e.n_items) for e in entries] == [("scored", "feedback", 100)] * 3
    assert s.sweep.ledger.final(run_id) is None and not s.grader.final_due(run_id)
    assert not (s.sweep.root / "ledger" / run_id / "final").exists()
    best = max(entries, key=lambda e: (e.score, -e.seq))
    # kept for the final scoring: the best so far only (grading/retention.py), the others deleted after grading
    assert [(s.sweep.submissions / e.submission_id).is_dir() for e in entries] == [e is best for e in entries]
    s.end(run_id)
    assert s.grader.final_due(run_id)
    final = s.grader.score_final(run_id)
    best = max(entries, key=lambda e: (e.score, -e.seq))
    assert (final.part, final.status, final.submission_id, final.selected_by, final.n_items) == (
        "final",
        "scored",
        best.submission_id,
        "best-feedback",
        100,
    )
    assert [e.part for e in s.sweep.ledger.entries(run_id)] == ["feedback"] * 3  # the final entry lies apart
    result = load_result(s.sweep, run_id)
    assert (result.feedback, result.feedback_n, result.final_n) == ("split", 100, 100)
    assert result.best == best.score and result.final == final.score
    # the real values, from the stand-in's rule on each part's own items: the final part scored on its items
    model = out / f"m{entries.index(best)}"
    on_feedback, on_final = s.expected(model, "feedback"), s.expected(model, "final")
    assert on_feedback != on_final  # the two parts tell apart which items were scored
    assert (best.score, final.score) == (pytest.approx(on_feedback), pytest.approx(on_final))
    assert result.selection_gap == pytest.approx(on_feedback - on_final)
    assert result.baseline is not None and result.baseline_final is not None
    assert result.final_improvement == pytest.approx(final.score - result.baseline_final)
    assert not any((s.sweep.submissions / e.submission_id).exists() for e in entries)  # deleted after it
    # once: the grader does not score it again, and a second grader's result would not replace it
    assert not s.grader.final_due(run_id) and not GradingDaemon(s.sweep).final_due(run_id)
    assert not s.sweep.ledger.record_final(final.model_copy(update={"score": 0.0}))
    assert s.sweep.ledger.final(run_id).score == final.score
    assert s.grader.sweep_finished()
    # the tables and the run report show both numbers, labelled, with their items and the gap
    sw = Sweeps([s.sweep])
    (long, both) = tables(sw)
    assert both.title == "feedback and final parts" and "feedback part 100 items, final part 100 items" in both.notes[1]
    cell = dict(zip(both.headers, both.rows[0]))
    assert cell["best feedback"].startswith(f"{best.score:.2f}") and cell["final"].startswith(f"{final.score:.2f}")
    assert cell["selection gap"].startswith(f"{best.score - final.score:+.2f}")
    paper = {t.title: t for t in tables(sw, layout="paper")}
    clean = paper["Table 2, final part: tiny-llama"]
    assert clean.rows[0] == ["base model", f"{result.baseline_final:.2f}"]
    assert clean.rows[1][1] == f"{final.score:.2f} ± 0.00 (gap {best.score - final.score:+.2f})"
    summary = markdown(*build(s.sweep, run_id), tmp_path)  # the run report's summary.md (without its plot)
    assert f"final part (100 items), scored once after the run: {final.score:.2f} for {best.submission_id}" in summary


def test_the_agent_marks_its_pick(tmp_path, tiny_model, monkeypatch):
    s = Sweep(tmp_path, tiny_model, monkeypatch, final="agent")
    (run_id,) = s.submitters
    out = s.submitters[run_id].ws.output
    strong = s.submit(run_id, variant(tiny_model, out / "strong", salt=1, skill=0.9))
    marked = s.submit(run_id, variant(tiny_model, out / "marked", salt=2), final=True)
    s.submit(run_id, variant(tiny_model, out / "later", salt=3))
    assert marked.marked_final and not strong.marked_final
    s.end(run_id)
    final = s.grader.score_final(run_id)
    assert (final.submission_id, final.selected_by) == (marked.submission_id, "agent")


def entry(seq: int, score: float, marked: bool = False) -> LedgerEntry:
    return LedgerEntry(
        submission_id=f"r.{seq:04d}",
        run_id="r",
        seq=seq,
        submitted_at=0,
        claimed_at=0,
        graded_at=0,
        status="scored",
        score=score,
        model_path="m",
        task="arith",
        protocol="a2rl",
        evaluator_version=1,
        grader="g",
        attempt=1,
        marked_final=marked,
    )


def test_selection_rules():
    scored = [entry(1, 50), entry(2, 60, marked=True), entry(3, 60), entry(4, 40)]
    assert [(e.seq, rule) for e, rule in (select_final(scored, r) for r in ("best-feedback", "last", "agent"))] == [
        (2, "best-feedback"),
        (4, "last"),
        (2, "agent"),
    ]
    assert select_final(scored[:1] + scored[2:], "agent")[1] == "agent: none marked, best-feedback"


@pytest.mark.slow
def test_best_of_n_on_the_feedback_part_overstates_what_the_final_part_shows(tmp_path, tiny_model, monkeypatch):
    """A scripted agent submits 8 perturbed copies of the base per run: its best feedback score exceeds its final
    score on average over 6 seeds (measured); a real improvement (more skill) shows on both parts. The secret
    seeds are fixed here so the measured figures do not vary between runs of the test."""
    monkeypatch.setattr(prepare_module.secrets, "randbits", lambda k: 20261126)
    s = Sweep(tmp_path, tiny_model, monkeypatch, seeds=6)
    gaps = []
    for n, run_id in enumerate(s.submitters):
        out = s.submitters[run_id].ws.output
        for i in range(8):
            s.submit(run_id, variant(tiny_model, out / f"m{i}", salt=100 * n + i + 1))
        s.end(run_id)
        s.grader.score_final(run_id)
        gaps.append(load_result(s.sweep, run_id).selection_gap)
    mean_gap = sum(gaps) / len(gaps)
    print(f"selection gap over {len(gaps)} seeds, best of 8 perturbed base copies: {gaps}, mean {mean_gap:.2f}")
    assert mean_gap > 0  # the best of 8 draws of ~Binomial(100, 0.5) lies ~7 points above one draw
    # a real improvement (what the pipeline agent's training gives): a more skilled model beats the base on both
    (tmp_path / "b").mkdir()
    s2 = Sweep(tmp_path / "b", tiny_model, monkeypatch)
    (rid,) = s2.submitters
    s2.submit(rid, variant(tiny_model, s2.submitters[rid].ws.output / "trained", salt=999, skill=0.9))
    s2.end(rid)
    s2.grader.score_final(rid)
    result = load_result(s2.sweep, rid)
    assert result.improvement > 20 and result.final_improvement > 20


@pytest.mark.slow  # a whole sweep: the runs' jobs, the grader's loop and `a2rl aggregate`, with the real tiny model
def test_a_sweep_with_feedback_split_shows_both_numbers(tmp_path):
    """A scripted submitter, and the reference agent, whose training (a short schedule) must show on both parts."""
    path = write_sweep(
        tmp_path,
        tasks=["arith"],
        protocols=["a2rl"],
        agents=[
            {"name": "submitter", "args": {"count": 2, "keep_config": True}},
            {"name": "pipeline", "args": {"sft_steps": 150, "grpo_steps": 4}},
        ],
        budget=600,
    )
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"), "--wait", timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep, specs = open_sweep(tmp_path / "sd", None)
    trained = load_result(sweep, next(s.run_id for s in specs if s.agent.name == "pipeline"))
    assert trained.final is not None and trained.final_n == 100, trained
    assert trained.improvement > 0 and trained.final_improvement > 0, trained  # on the part it never saw, too
    spec = next(s for s in specs if s.agent.name == "submitter")
    answers = [json.loads(line)["answer"] for line in (sweep.workspace(spec.run_id) / "output/answers.jsonl").open()]
    assert all("feedback part (100 items)" in a["scored_on"] for a in answers)
    final = sweep.ledger.final(spec.run_id)
    result = load_result(sweep, spec.run_id)
    assert final is not None and final.part == "final" and final.status == "scored"
    assert (result.final, result.final_submission, result.final_n) == (final.score, final.submission_id, 100)
    assert not list(sweep.submissions.iterdir())  # the frozen copies went once the final part was scored
    assert f"final {final.score:.2f} (100 items, best-feedback)" in proc.stdout  # launch --wait waited for it
    out = a2rl("aggregate", str(tmp_path / "sd"), "--layout", "paper").stdout
    assert "Table 2, final part: tiny-llama" in out and "feedback part 100 items, final part 100 items" in out


def test_a2rl_submit_final_marks_the_pick_over_http(tmp_path, tiny_model, monkeypatch):
    s = Sweep(tmp_path, tiny_model, monkeypatch, final="agent")
    (run_id,) = s.submitters
    submitter = s.submitters[run_id]
    model = variant(tiny_model, submitter.ws.output / "m", salt=1)
    done = threading.Event()

    def grade() -> None:  # the grader, while the agent's call blocks
        while not done.wait(0.05):
            if (claim := s.sweep.queue.claim(s.grader.holder, 60, s.sweep.ledger.has)) is not None:
                s.grader.grade(claim)

    grader = threading.Thread(target=grade)
    grader.start()
    try:
        with GradingAPI(submitter, submitter.budget) as api:
            env = {**os.environ, "GRADING_SERVER_URL": api.url, "GRADING_TOKEN": api.token}
            proc = subprocess.run(
                [sys.executable, "-m", "a2rl", "submit", "--final", str(model)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            bad = urllib.request.Request(
                f"{api.url}/submit",
                data=json.dumps({"model_path": str(model), "final": "yes"}).encode(),
                headers={"Authorization": f"Bearer {api.token}"},
                method="POST",
            )
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(bad)
            refused = (e.value.code, json.loads(e.value.read())["error"])
    finally:
        done.set()
        grader.join()
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["marked_final"] is True and "feedback part (100 items)" in answer["scored_on"]
    assert refused == (400, 'bad request body: "final" is true or false')
    (entry,) = s.sweep.ledger.entries(run_id)
    assert entry.marked_final and s.sweep.queue.count(run_id) == 1  # the refused request enqueued nothing


@needs_bwrap
@pytest.mark.slow  # a real audit: the probe started as a run starts its agent
def test_the_audit_finds_the_final_part_out_of_reach(tmp_path):
    path = write_sweep(tmp_path, tasks=["arith"], protocols=["a2rl"], agents=["submitter"])
    proc = a2rl("audit", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if "held-out split of arith (final part)" in line]
    assert "blocked" in row and "heldout-parts/final/test.jsonl" in row, proc.stdout
