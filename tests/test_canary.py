"""Canaries in held-out splits (issue 15 item 10): prepare writes one into heldout/; the grader finds it (or a
verbatim held-out item) in a submission, the run report in the transcript and the code snapshots, and
metrics.json and summary.md say where."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

import a2rl.tasklib.leaks as leaks
from a2rl.grading.daemon import GradingDaemon
from a2rl.reporting.metrics import RunMetrics
from a2rl.reporting.runreport import write_run_report
from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.tasks import CANARY, get_task
from a2rl.store.results import RunResult
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, write_sweep

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402

# a held-out prompt long enough to count as an item, with a quote a JSON transcript escapes
ITEM = 'Natalia sold clips to 48 of her friends in April, "and then" half as many in May.'


def leaky_task(tmp_path: Path):
    """The echo task, renamed, whose held-out row is ITEM."""
    folder = tmp_path / "tasks" / "leaky"
    shutil.copytree(FIXTURES / "tasks" / "echo", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "task.yaml").write_text((folder / "task.yaml").read_text().replace("name: echo", "name: leaky"))
    (folder / "prepare.py").write_text((folder / "prepare.py").read_text().replace('"2+2="', repr(ITEM)))
    return get_task("leaky", [tmp_path / "tasks"])


def test_prepare_writes_a_canary_into_heldout_only(tmp_path):
    task = leaky_task(tmp_path)
    data = ensure_prepared(task, tmp_path / "data")
    canary = (data.heldout_dir / CANARY).read_text().strip()
    assert re.fullmatch(r"a2rl-canary-[0-9a-f]{32}", canary)
    assert not any(canary in p.read_text() for p in data.train_dir.rglob("*") if p.is_file())
    assert task.prepared(tmp_path / "data").checksums["heldout/CANARY"]  # part of the prepared data's record
    other = ensure_prepared(task, tmp_path / "data2").heldout_dir / CANARY
    assert other.read_text().strip() != canary  # random per preparation
    found = leaks.markers(data.heldout_dir)
    assert found.canary == canary and found.find(f"x {ITEM} y") == ["held-out item test.jsonl:1"]
    assert found.find("1+1= 2") == []  # the train row, and short strings, are not items


@pytest.fixture
def run(tmp_path, tiny_model):
    """A run of the leaky task: its workspace, a submit() graded by a grader driven by hand, and report()."""
    task = leaky_task(tmp_path)
    sweep, (spec,) = open_sweep(
        write_sweep(tmp_path, tasks=["leaky"], task_paths=[str(tmp_path / "tasks")], data_root=str(tmp_path / "data")),
        tmp_path / "sd",
    )
    data = ensure_prepared(task, sweep.data_root())
    ws = create_workspace(
        sweep.workspace(spec.run_id), task=task, data=data, model_dir=tiny_model, budget_s=60, source_tree=REPO
    )
    canary = leaks.read_canary(data.heldout_dir)  # the job reads it, as run/job.py does
    submitter, grader = RunSubmitter(sweep, spec, ws, Budget(60), canary=canary), GradingDaemon(sweep)

    def submit(model: Path) -> None:
        submitter.submit(str(model), wait=False)
        while (claim := sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is not None:
            grader.grade(claim)

    def report() -> tuple[RunMetrics, str]:
        result = RunResult(
            run_id=spec.run_id,
            task="leaky",
            protocol=spec.protocol,
            agent=spec.agent.key,
            driver=spec.driver,
            model=spec.model.name,
            seed=spec.seed,
            status="ok",
            budget_s=60,
            started_at=0.0,
            ended_at=1.0,
        )
        out = write_run_report(sweep, spec.run_id, result)
        return RunMetrics.load(out / "metrics.json"), (out / "summary.md").read_text()

    canary = (data.heldout_dir / CANARY).read_text().strip()
    return sweep.run_dir(spec.run_id), ws, submit, report, canary


def with_metadata(model: Path, **metadata: str) -> Path:
    """Rewrite the weights' safetensors header with __metadata__ (a binary file that holds the strings)."""
    weights = next(model.glob("*.safetensors"))
    raw = weights.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = {**json.loads(raw[8 : 8 + n]), "__metadata__": metadata}
    text = json.dumps(header).encode()
    weights.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n :])
    return model


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_canary_and_items_are_flagged_where_they_turn_up(run, tiny_model):
    run_dir, ws, submit, report, canary = run
    (ws.code / "train.py").write_text(f"ROWS = ['{ITEM}']\n")  # an item in the code
    (ws.code / "rows.gz").write_bytes(gzip.compress(f"{ITEM}\n".encode()))  # and gzipped, a binary file
    clean = make_variant(tiny_model, ws.output / "v1", score=20, salt=1)
    submit(clean)
    (ws.code / "notes.py").write_text(f"# {canary}\n")  # the canary in the code, from submission 2 on
    leaky = with_metadata(make_variant(tiny_model, ws.output / "v2", score=30, salt=2), note=canary)
    (leaky / "notes.txt").write_text(f"copied: {ITEM}\n")  # an item in a submitted text file
    (leaky / "extra.json").write_text(json.dumps({"b64": base64.b64encode(ITEM.encode()).decode()}))  # encoded
    submit(leaky)
    (run_dir / "agent.log").write_text(
        json.dumps({"type": "tool_result", "content": ITEM}) + "\n" + f"[a2rl] cat heldout/CANARY\n{canary}\n"
    )

    m, md = report()
    assert m.leaks == [
        "transcript: canary",
        "transcript: held-out item test.jsonl:1",
        "snapshot 1 rows.gz: held-out item test.jsonl:1 (gzip)",
        "snapshot 1 train.py: held-out item test.jsonl:1",
        "snapshot 2 notes.py: canary",
        "submission 2: held-out item test.jsonl:1 (base64) in extra.json",
        "submission 2: canary in model.safetensors",
        "submission 2: held-out item test.jsonl:1 in notes.txt",
    ]
    assert m.score_trajectory == [20.0, 30.0]  # flagged, still graded
    assert "**LEAK**: held-out data found: transcript: canary; " in md and "submission 2: canary in model" in md


def _zip(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, data)
    return buf.getvalue()


B = f"rows = {ITEM!r}\n".encode()
ENCODED = {  # how an agent might hide the item → how it is reported
    "upper case, spaces doubled": (ITEM.upper().replace(" ", "  "), "normalised"),
    "punctuation dropped, one word per line": ("\n".join(re.findall(r"\w+", ITEM)), "normalised"),
    "JSON-escaped twice": (json.dumps(json.dumps({"q": ITEM})), "normalised"),
    "Python \\x escapes": ("".join(f"\\x{b:02x}" for b in ITEM.encode()), "normalised"),
    "base64": (f"blob = '{base64.b64encode(B).decode()}'", "base64"),
    "URL-safe base64, no padding": (base64.urlsafe_b64encode(B).decode().rstrip("="), "base64"),
    "base64 in 76-column lines": (base64.encodebytes(B * 3).decode(), "base64"),
    "hex": (f"h = bytes.fromhex('{B.hex()}')", "hex"),
    "gzip": (gzip.compress(B), "gzip"),
    "bzip2": (bz2.compress(B), "bzip2"),
    "xz": (lzma.compress(B), "xz"),
    "a zip member": (_zip("data/rows.txt", B), "zip member data/rows.txt"),
    "base64 of a gzip": (base64.b64encode(gzip.compress(B)).decode(), "base64, gzip"),
    "a gzip in a zip": (_zip("x.gz", gzip.compress(B)), "zip member x.gz, gzip"),
}


@pytest.fixture
def heldout(tmp_path) -> Path:
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    (heldout / CANARY).write_text("a2rl-canary-0123456789abcdef0123456789abcdef\n")
    (heldout / "test.jsonl").write_text(json.dumps({"prompt": ITEM, "answer": "24"}) + "\n")
    return heldout


@pytest.mark.parametrize("how", ENCODED)
def test_encoded_items_are_flagged_and_say_how(heldout, tmp_path, how):
    data, label = ENCODED[how]
    found = leaks.markers(heldout)
    expected = ["held-out item test.jsonl:1" + (f" ({label})" if label else "")]
    raw = data.encode() if isinstance(data, str) else data
    assert found.find_bytes(raw) == expected  # a code snapshot's file, a submitted file
    if isinstance(data, str):
        assert found.find(f"noise before {data} noise after") == expected  # a transcript
    model = tmp_path / "model"
    model.mkdir()
    (model / "notes.bin").write_bytes(raw)
    assert leaks.scan_files(model, found) == [f"{expected[0]} in notes.bin"]


def test_the_canary_is_flagged_encoded_too(heldout):
    canary = (heldout / CANARY).read_text().strip().encode()
    found = leaks.markers(heldout)
    assert found.find_bytes(gzip.compress(canary)) == ["canary (gzip)"]
    assert found.find(base64.b64encode(b"x" * 30 + canary).decode()) == ["canary (base64)"]
    assert found.find(canary.decode().upper()) == ["canary (normalised)"]


def test_innocent_text_and_archives_are_not_flagged(heldout):
    """Clean negatives: the train row, near misses of the item, and encodings of other text."""
    found = leaks.markers(heldout)
    near = ITEM.replace("48", "49")  # one number changed: another problem
    other = ("The quick brown fox jumps over the lazy dog, " * 40).encode()
    cut = ITEM[: len(ITEM) // 2] + " ... " + ITEM[len(ITEM) // 2 + 5 :]  # a piece left out
    for text in [
        "1+1= 2",
        near,
        near.upper(),
        base64.b64encode(near.encode()).decode(),
        other.hex(),
        base64.b64encode(os.urandom(3000)).decode(),
        cut,
    ]:
        assert found.find(text) == [], text
    for data in [gzip.compress(other), _zip("a.txt", other), lzma.compress(near.encode()), os.urandom(1 << 20)]:
        assert found.find_bytes(data) == []


def test_a_clean_run_has_no_flags(run, tiny_model):
    run_dir, ws, submit, report, canary = run
    (ws.code / "train.py").write_text("ROWS = ['1+1=']\n")
    submit(make_variant(tiny_model, ws.output / "v1", score=20, salt=1))
    (run_dir / "agent.log").write_text(json.dumps({"type": "tool_result", "content": "1+1= 2"}) + "\n")
    m, md = report()
    assert m.leaks == [] and "LEAK" not in md and m.score_trajectory == [20.0]


def test_large_submitted_files_are_searched_for_the_canary_as_bytes(tmp_path, monkeypatch):
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    (heldout / CANARY).write_text("a2rl-canary-0123\n")
    (heldout / "test.jsonl").write_text(json.dumps({"prompt": ITEM}) + "\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "big.txt").write_text(f"{ITEM} a2rl-canary-0123")
    found = leaks.markers(heldout)
    assert leaks.scan_files(model, found) == ["canary in big.txt", "held-out item test.jsonl:1 in big.txt"]
    monkeypatch.setattr(leaks, "MAX_TEXT_BYTES", 10)  # now it counts as weights: only the canary, mapped
    assert leaks.scan_files(model, found) == ["canary in big.txt"]
