"""Grading with the REAL vLLM (its CPU build), in the vLLM environment's interpreter (tools/setup-vllm-env.sh):
tests/test_vllm_real.py runs this file there once per module, so one engine serves every job.

    python tests/vllm_worker.py JOBS.json OUT.json

JOBS.json: {"jobs": [{"task", "model", "tokenizer", "data_root", "options", "protocol", "task_paths"}...],
            "raw": {"model", "tokenizer", "prompts", "max_new_tokens", "top"} or null,
            "cap": {"model", "tokenizer", "prompts", "max_new_tokens"} or null, "broken": DIR or null}.
Each job is graded with evaluate_model on one grader Engine (backend vllm on the CPU, grader.enforce_eager), as the
grading daemon does; "raw": the engine's greedy completions of the prompts (no stop) and their first-token top
log-probabilities, to compare token by token with transformers; "cap": the same for prompts at the model's context,
with what the context cap did (ContextCap.record); after each job, the engine's counts, how it got the weights
(engine.last) and the process tree (the pids of vLLM's processes among this one's children, and the resident memory
of it and all its children, psutil) are recorded. "broken": a checkpoint of the same layout whose weights cannot
load, graded last: the failed reload must be counted and the dead engine shut down before the fresh start (which
fails too).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def processes() -> dict:
    import psutil

    me = psutil.Process()
    rss, vllm = me.memory_info().rss, []
    for k in me.children(recursive=True):  # also multiprocessing's resource tracker, which outlives engines
        try:
            rss += k.memory_info().rss
            if k.name().startswith("VLLM::"):  # EngineCore, Worker
                vllm.append(k.pid)
        except psutil.NoSuchProcess:
            pass
    return {"vllm_pids": sorted(vllm), "rss": rss}


def main(jobs_path: str, out_path: str) -> int:
    from a2rl.grading.evaluate import evaluate_model
    from a2rl.llm.backends import BackendSettings, Engine
    from a2rl.spec.generation import get_preset
    from a2rl.spec.tasks import get_task

    spec = json.loads(Path(jobs_path).read_text())
    # max_model_len: the model's; eager (grader.enforce_eager): torch.compile would add a minute to each start here,
    # and the sweep in tests/test_vllm_real.py grades on the default, compiled engine
    engine = Engine(BackendSettings("vllm", "cpu", 0, 0.9, None, None, enforce_eager=True))
    out: dict = {"results": []}

    def grade(job: dict) -> dict:
        task = get_task(job["task"], [Path(p) for p in job.get("task_paths", [])])
        try:
            score, details = evaluate_model(
                task,
                Path(job["model"]),
                Path(job["tokenizer"]),
                data_root=Path(job["data_root"]),
                protocol=job.get("protocol", "a2rl"),
                options=job.get("options"),
                engine=engine,
                preset=get_preset(),
            )
            result = {"score": score, "details": details}
        except Exception as e:  # recorded for the test to show
            result = {"error": f"{type(e).__name__}: {e}"}
        return {**result, "engine": engine.last, **engine.counts(), **processes()}

    for job in spec["jobs"]:
        out["results"].append(grade(job))
        Path(out_path).write_text(json.dumps(out, default=str))
    if raw := spec.get("raw"):
        generator = engine.get(Path(raw["model"]), Path(raw["tokenizer"]), get_preset())
        out["raw"] = {
            "texts": generator.generate(raw["prompts"], max_new_tokens=raw["max_new_tokens"], stop=None),
            "top": generator.first_token_logprobs(raw["prompts"], top=raw["top"]),
        }
    if cap := spec.get("cap"):
        from a2rl.llm.contextcap import ContextCap

        generator = engine.get(Path(cap["model"]), Path(cap["tokenizer"]), get_preset())
        generator.context_cap = ContextCap()
        out["cap"] = {
            "texts": generator.generate(cap["prompts"], max_new_tokens=cap["max_new_tokens"], stop=None),
            "record": generator.context_cap.record(),
        }
    if spec.get("broken"):
        first = spec["jobs"][0]
        out["broken"] = grade({**first, "model": spec["broken"]})
    engine.close()
    out["closed"] = processes()
    Path(out_path).write_text(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":  # vLLM's worker processes re-import the main module
    raise SystemExit(main(*sys.argv[1:]))
