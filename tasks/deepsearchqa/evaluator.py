"""Score deepsearchqa: a ReAct loop with a search tool (search.py), final answers judged correct/incorrect by an LLM.

Both loops are env.py's transcripts, which the reference agent trains through. Protocol `a2rl`: the loop (format in
description.md) runs every open question one step at a time, batched: the
policy writes a Thought and an Action, Search[query] runs the search backend and appends its results as an
Observation, Finish[answer] ends the question (`answer[...]`, the reference's spelling, is read as Finish). An
empty or missing answer is incorrect and never sent to the judge.

Protocol `paper` (the default) is the reference's loop (autorl_bench deepsearchqa/eval.py): a raw prompt, 256 new
tokens stopped at "\nAction:", "\nThought:" or "\nObservation:" - so an action on its own line is cut off and the
search rarely runs - then, with no action in the output, "\nAction: answer[" appended and 128 tokens up to "]"
taken as the answer, whatever it is (an empty one included); its judge prompt and verdict parsing. Its fallback
string matcher on a judge failure (which marks an empty answer correct: "" is in every gold answer) is not
reproduced: under both protocols a judge failure is an error (JudgeError), never a silent fallback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from a2rl.llm.chat import Messages, policy_prompt
from a2rl.llm.judge import judge_client
from a2rl.tasklib.envs import load_module, play_transcripts

dsqa = load_module(Path(__file__).with_name("env.py"), "a2rl_task_deepsearchqa_env")  # both protocols' loops
search = dsqa.search
REACT_SYSTEM, parse_action, format_results = dsqa.REACT_SYSTEM, dsqa.parse_action, dsqa.format_results
STOP = dsqa.STOP

JUDGE_SYSTEM = "You are a strict grader of answers to research questions. Reply with one word: correct or incorrect."
JUDGE_USER = """Question: {problem}
Answer type: {answer_type}
Gold answer: {gold}
Predicted answer: {predicted}

A "Single Answer" is correct if it states the same thing as the gold answer. A "Set Answer" is correct if it
contains every item of the gold answer (in any order, minor wording differences allowed).
Is the predicted answer correct or incorrect?"""
JUDGE_MAX_TOKENS = 8


def react(
    generator, rows: list[dict[str, str]], backend, *, max_steps: int, max_new_tokens: int, batch_size: int
) -> tuple[list[str], list[int]]:
    """Final answers ("" when the policy never finished) and the number of actions each question took."""
    transcripts = [dsqa.A2rlTranscript(dsqa.SearchQAEnv(r, backend), max_steps) for r in rows]
    played = play_transcripts(
        lambda prompts: generator.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, stop=STOP),
        transcripts,
        max_steps=max_steps,
        render=lambda messages: policy_prompt(generator, messages),
    )
    return [t.answer for t in played], [len(t.actions) for t in played]


# ---- protocol `paper`: the reference's prompt, loop, judge

PAPER_STOP, PAPER_ACTION, PAPER_ANSWERS = (
    dsqa.PAPER_STOP,
    dsqa.PAPER_ACTION,
    re.compile(r"Action:\s*answer\[(.+?)\]", re.DOTALL),
)
PLACEHOLDER, PAPER_SYSTEM = dsqa.PLACEHOLDER, dsqa.PAPER_SYSTEM
PAPER_JUDGE_SYSTEM = "You are a strict answer evaluator."
PAPER_JUDGE_USER = (  # indented as the reference's f-string is
    "You are an answer evaluator. Compare the predicted answer to the gold answer.\n"
    "        Question answer type: {answer_type}\n"
    "        Gold answer: {gold}\n"
    "        Predicted answer: {predicted}\n"
    '        For "Single Answer": The predicted answer is correct if it contains the same key information as the gold '
    "answer.\n"
    '        For "Set Answer": The predicted answer is correct if it contains ALL items from the gold answer (order '
    "doesn't matter, minor wording variations are OK).\n"
    '        Reply with ONLY "correct" or "incorrect". No explanation.'
)


def paper_react(generator, rows: list[dict[str, str]], backend, *, max_steps: int, batch_size: int) -> list[str]:
    """The reference's _react_loop for every question, batched (env.py's PaperTranscript): the final answers."""
    transcripts = [dsqa.PaperTranscript(dsqa.SearchQAEnv(r, backend)) for r in rows]
    traces: list[list[str]] = [[] for _ in rows]  # the model's own outputs, for the answer after the last step
    open_ = list(range(len(rows)))
    for _ in range(max_steps):
        outputs = generator.generate(
            [transcripts[i].prompt() for i in open_], max_new_tokens=256, batch_size=batch_size, stop=PAPER_STOP
        )
        for i, out in zip(open_, outputs):
            generated = dsqa.PaperTranscript.read(out)
            traces[i].append(generated)
            transcripts[i].step(generated)
        forced = [i for i in open_ if transcripts[i].forced]
        if forced:
            for i, out in zip(
                forced,
                generator.generate(
                    [transcripts[i].prompt() for i in forced], max_new_tokens=128, batch_size=batch_size, stop="]"
                ),
            ):
                answer = out.strip()
                if answer:
                    traces[i].append(answer)
                transcripts[i].force(answer)  # the placeholder keeps the prompt's open "answer[", as the reference's
        open_ = [i for i in open_ if not transcripts[i].done]
        if not open_:
            break
    answers = [t.answer if t.done else None for t in transcripts]
    for i in open_:  # out of steps: the last real answer[...] the model wrote, else "I don't know"
        real = [a.strip() for a in PAPER_ANSWERS.findall("\n".join(traces[i])) if a.strip().lower() != PLACEHOLDER]
        answers[i] = real[-1] if real else "I don't know"
    return [a if a is not None else "I don't know" for a in answers]


def paper_judge_messages(row: dict[str, str], predicted: str) -> Messages:
    return [
        {"role": "system", "content": PAPER_JUDGE_SYSTEM},
        {
            "role": "user",
            "content": PAPER_JUDGE_USER.format(
                answer_type=row.get("answer_type") or "Single Answer", gold=row["answer"], predicted=predicted
            ),
        },
    ]


def paper_verdict(text: str) -> bool:
    """The reference's: the reply's first line, stripped of punctuation, is "correct"."""
    lines = text.strip().lower().splitlines()
    return bool(lines) and lines[0].strip().strip(".!,;: \t\r\n") == "correct"


def judge_messages(row: dict[str, str], predicted: str) -> Messages:
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {
            "role": "user",
            "content": JUDGE_USER.format(
                problem=row["problem"], answer_type=row["answer_type"], gold=row["answer"], predicted=predicted
            ),
        },
    ]


def verdict(text: str) -> bool | None:
    """True for "correct", False for "incorrect" (the first word), None for anything else."""
    word = re.match(r"\W*(\w+)", text.lower())
    return {"correct": True, "incorrect": False}.get(word.group(1) if word else "")


def evaluate(generator, heldout_dir: Path, options: dict, *, engine=None) -> dict:
    protocol = options.get("protocol", "paper")
    if protocol not in ("paper", "a2rl"):
        raise ValueError(f"deepsearchqa: unknown protocol {protocol!r} (paper or a2rl)")
    options = {**options, **options.get(protocol, {})}
    rows = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    client = judge_client(options["judge"], engine)
    settings = {**options["search"]}
    settings["corpus"] = settings.get("corpus") or str(Path(heldout_dir).parent / "train" / "corpus.sqlite")
    backend = search.make_backend(settings)
    max_steps, batch_size = int(options.get("max_steps", 6)), int(options.get("batch_size", 32))
    if protocol == "paper":
        answers = paper_react(generator, rows, backend, max_steps=max_steps, batch_size=batch_size)
        replies = client.chat_many(
            [paper_judge_messages(r, a) for r, a in zip(rows, answers)],
            max_tokens=int(options["judge"].get("max_tokens", 1024)),
        )
        correct = sum(paper_verdict(c.text) for c in replies)
        return {
            "score": 100 * correct / len(rows),
            "n": len(rows),
            "correct": correct,
            "answered": sum(bool(a) for a in answers),
            "search": settings,
            "judge": client.describe(),
        }
    answers, steps = react(
        generator,
        rows,
        backend,
        max_steps=max_steps,
        max_new_tokens=int(options.get("max_new_tokens", 128)),
        batch_size=batch_size,
    )
    answered = [i for i, a in enumerate(answers) if a]  # an empty answer is wrong: the judge never sees it
    verdicts = [
        verdict(c.text)
        for c in client.chat_many([judge_messages(rows[i], answers[i]) for i in answered], max_tokens=JUDGE_MAX_TOKENS)
    ]
    correct = sum(v is True for v in verdicts)
    return {
        "score": 100 * correct / len(rows),
        "n": len(rows),
        "correct": correct,
        "answered": len(answered),
        "unparsed_verdicts": sum(v is None for v in verdicts),
        "mean_steps": sum(steps) / len(rows),
        "search": settings,
        "judge": client.describe(),
    }
