"""Parity fixture for deepsearchqa's `paper` protocol, from the reference's own code: RD-Agent's
rdagent/scenarios/rl/autorl_bench/benchmarks/deepsearchqa/eval.py (DeepSearchQAEvaluator._react_loop and
_judge_answer), run unchanged.

Its imports are not installable here as a whole (rdagent's package, vLLM), so the class is executed on its own
(common.upstream_functions) with stand-ins for what it calls, each named below: vLLM's LLM.generate replays scripted
raw continuations, cut at the stop strings as vLLM does (the stop string itself dropped); the search function
returns fixed snippets; rdagent's APIBackend returns a scripted judge reply. Everything the reference decides
(prompt, stops, action parsing, forced answer, placeholder check, "I don't know", judge prompt and verdict) is its
code. Not covered: an empty or failing judge reply, where the reference falls back to its string matcher (which
a2rl does not reproduce under either protocol).

Recreate: git clone https://github.com/microsoft/RD-Agent && git -C RD-Agent checkout 471eb30d; then, with any
Python >= 3.10 (the reference's functions need only the standard library here):
    python tools/parity/deepsearchqa.py /path/to/RD-Agent
Writes tests/fixtures/parity/deepsearchqa.json.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

from common import upstream_functions, write_fixture

EVAL = Path("rdagent/scenarios/rl/autorl_bench/benchmarks/deepsearchqa/eval.py")
SNIPPETS = {
    "Cagoren capital": ["Cagoren's capital city is Fahalis.", "Fahalis lies on the coast."],
    "largest moons of Jupiter": ["The Galilean moons are Io, Europa, Ganymede and Callisto."],
}

# (question, answer type, gold, raw continuations the model writes, one per generate call, judge reply)
CASES = [
    # the action on its own line is cut by the stop "\nAction:", so the answer is forced
    (
        "What is the capital of Cagoren?",
        "Single Answer",
        "Fahalis",
        [" I should search for it.\nAction: search[Cagoren capital]", " Fahalis]"],
        "correct",
    ),
    # an action on the thought's line survives the stop: the search runs, then an inline answer
    (
        "What is the capital of Cagoren?",
        "Single Answer",
        "Fahalis",
        [
            " Let me look. Action: search[Cagoren capital]\nObservation: made up",
            " The snippet says Fahalis. Action: answer[Fahalis]",
        ],
        "Correct.",
    ),
    # an empty forced answer goes to the judge, which may call it correct
    ("What is the capital of Cagoren?", "Single Answer", "Fahalis", [" Hmm.", "  ]"], "correct"),
    ("What is the capital of Cagoren?", "Single Answer", "Fahalis", [" Hmm.", "]"], "incorrect"),
    # the placeholder answer is rejected, then a real one
    (
        "What is the capital of Cagoren?",
        "Single Answer",
        "Fahalis",
        [" Done. Action: answer[your final answer]", " Oops. Action: answer[Fahalis]"],
        "  correct;",
    ),
    # a forced placeholder keeps the open "answer[" in the prompt and the loop goes on
    (
        "What is the capital of Cagoren?",
        "Single Answer",
        "Fahalis",
        [" I know it.", "Your final answer]", " It is Fahalis. Action: answer[ Fahalis ]"],
        "correct",
    ),
    # out of steps: "I don't know"
    (
        "Name the largest moons of Jupiter.",
        "Set Answer",
        "Io, Europa, Ganymede, Callisto",
        [" Search. Action: search[largest moons of Jupiter]"] * 6,
        "incorrect",
    ),
    # a set answer with a multi-line verdict; the first line decides
    (
        "Name the largest moons of Jupiter.",
        "Set Answer",
        "Io, Europa, Ganymede, Callisto",
        [" Action: search[largest moons of Jupiter]", " Action: answer[Io, Europa,\nGanymede, Callisto]"],
        "correct\nAll four are listed.",
    ),
    (
        "Name the largest moons of Jupiter.",
        "Set Answer",
        "Io, Europa, Ganymede, Callisto",
        [" Action: answer[Io, Europa]"],
        "Incorrect - two are missing.",
    ),
    # a stop string inside the first output: only the text before "\nThought:" counts
    (
        "What is the capital of Cagoren?",
        "Single Answer",
        "Fahalis",
        [" It is Fahalis.\nThought: Action: answer[Paris]", "Fahalis] trailing"],
        "CORRECT!",
    ),
    # the judge reply's first word must be the whole first line
    (
        "What is the capital of Cagoren?",
        "Single Answer",
        "Fahalis",
        [" Action: answer[Fahalis]"],
        "correct, the predicted answer matches",
    ),
]


class ScriptedLLM:
    """Stand-in for vllm.LLM: each generate call takes the next scripted raw continuation and cuts it where vLLM
    would (the earliest stop string, not included in the output)."""

    def __init__(self, continuations: list[str]):
        self.continuations, self.prompts, self.stops = list(continuations), [], []

    def generate(self, prompts, params):
        (prompt,) = prompts
        self.prompts.append(prompt)
        self.stops.append(list(params.stop))
        text = self.continuations.pop(0)
        cut = min((i for s in params.stop if (i := text.find(s)) >= 0), default=len(text))
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=text[:cut])])]


def install_stand_ins(judge_reply: list[str]) -> None:
    """vllm.SamplingParams and rdagent.oai.llm_utils.APIBackend, the two imports inside the reference's methods."""
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda temperature=0.0, max_tokens=16, stop=(): types.SimpleNamespace(
        temperature=temperature, max_tokens=max_tokens, stop=list(stop)
    )
    llm_utils = types.ModuleType("rdagent.oai.llm_utils")

    class APIBackend:
        def build_messages_and_create_chat_completion(self, user_prompt, system_prompt):
            judge_reply.append((system_prompt, user_prompt))
            return judge_reply[0]

    llm_utils.APIBackend = APIBackend
    sys.modules.update(
        {
            "vllm": vllm,
            "rdagent": types.ModuleType("rdagent"),
            "rdagent.oai": types.ModuleType("rdagent.oai"),
            "rdagent.oai.llm_utils": llm_utils,
        }
    )


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    repo = Path(sys.argv[1])
    source = repo / EVAL
    system = next(
        ast.literal_eval(n.value)
        for n in ast.parse(source.read_text()).body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "REACT_SYSTEM_PROMPT"
    )
    log = types.SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None)
    queries: list[str] = []

    def serpapi(url, params, timeout):  # stand-in for requests.get on https://serpapi.com/search
        queries.append(params["q"])
        results = [{"snippet": s} for s in SNIPPETS.get(params["q"], [])]
        return types.SimpleNamespace(json=lambda: {"organic_results": results})

    cls = upstream_functions(
        source,
        ["DeepSearchQAEvaluator"],
        {"REACT_SYSTEM_PROMPT": system, "logger": log, "requests": types.SimpleNamespace(get=serpapi)},
    )["DeepSearchQAEvaluator"]
    evaluator = cls.__new__(cls)  # its constructor wants the benchmark's config object; only eval_config is read
    evaluator.eval_config = {}  # the reference's default: max_steps 6
    cases = []
    for question, answer_type, gold, continuations, reply in CASES:
        judge: list = [reply]
        install_stand_ins(judge)
        llm = ScriptedLLM(continuations)
        queries.clear()
        params = sys.modules["vllm"].SamplingParams(
            temperature=0.0, max_tokens=256, stop=["\nAction:", "\nThought:", "\nObservation:"]
        )
        search = lambda q: evaluator._serpapi_search(q, "key")  # noqa: E731
        predicted = evaluator._react_loop(llm, params, search, question, answer_type)
        correct = evaluator._judge_answer(predicted, gold, answer_type)
        cases.append(
            {
                "question": question,
                "answer_type": answer_type,
                "gold": gold,
                "continuations": continuations,
                "used": len(continuations) - len(llm.continuations),
                "prompts": llm.prompts,
                "stops": llm.stops,
                "queries": list(queries),
                "predicted": predicted,
                "judge_messages": [
                    {"role": "system", "content": judge[1][0]},
                    {"role": "user", "content": judge[1][1]},
                ],
                "judge_reply": reply,
                "correct": bool(correct),
            }
        )
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    write_fixture(
        "deepsearchqa",
        {
            "upstream": f"microsoft/RD-Agent {commit.strip() or '?'}: {EVAL} (DeepSearchQAEvaluator._react_loop, "
            "_serpapi_search, _judge_answer); stand-ins: vLLM (scripted continuations cut at its stops), "
            "requests.get (fixed SerpAPI snippets), APIBackend (scripted judge reply)",
            "snippets": SNIPPETS,
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
