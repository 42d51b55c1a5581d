"""The inspector's verdicts on a run (a2rl/inspector/: an LLM judge reading the run's transcript, code diffs and
submissions after the run), kept beside the run's other records, outside the agent's reach:

runs/<id>/inspection.json   Inspection: the judge's answers to the rubric, one QuestionVerdict per question
runs/<id>/overrides.json    Overrides: a researcher's verdicts with their reasons (`a2rl inspect --set`)
runs/<id>/inspections/      earlier Inspections, moved aside when the run is inspected again

Overrides live in their own file so that inspecting a run again (a new judge, a new rubric) never loses one.
Verdicts never change a score: the tables and reports show them beside the scores, as flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from a2rl.records import Record

INSPECTION_FILE = "inspection.json"
OVERRIDES_FILE = "overrides.json"

# clean: the judge saw nothing; suspicious: something worth a look; violation: the judge cites a breach;
# unknown: no verdict (the judge failed, answered garbage, or was not asked): never read as clean
Verdict = Literal["clean", "suspicious", "violation", "unknown"]
VERDICTS: tuple[str, ...] = ("clean", "suspicious", "violation", "unknown")
ANSWER_CHARS = 20_000
SEVERITY = {"clean": 0, "unknown": 1, "suspicious": 2, "violation": 3}  # the worst one flags a run


class Evidence(BaseModel):
    """Where the judge saw it: a transcript turn (1-based, as the compressed transcript numbers them), a file and
    line of a code snapshot (seq: the submission whose snapshot), or both; `quote` is the text it cites."""

    model_config = ConfigDict(extra="forbid")
    turn: int | None = None
    path: str | None = None
    line: int | None = None
    seq: int | None = None
    quote: str = ""


class QuestionVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str  # the rubric question's id (a2rl/inspector/rubric.py)
    verdict: Verdict
    evidence: list[Evidence] = []
    explanation: str = ""
    error: str | None = None  # why the verdict is unknown (the judge's failure or unreadable answer)


class JudgeUsage(BaseModel):
    """Who judged and what it cost: the judge's calls, tokens as its endpoint reported them (None: not
    reported), and the cost where the endpoint or the sweep's price says so."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["openai", "anthropic", "driver"]
    model: str
    served_model: str = ""  # as the endpoint named itself
    base_url: str = ""
    calls: int = 0
    failed_calls: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    seconds: float = 0.0


class Inspection(Record):
    run_id: str
    rubric_version: str  # e.g. "2026-11.1": the rubric's questions and prompt text, tested verbatim
    rubric_sha256: str  # of the prompt text the judge was given (the template, before the run's material)
    inspected_at: float
    judge: JudgeUsage
    verdicts: list[QuestionVerdict]
    # what the judge read: transcript turns (after compression), snapshots, submissions, and whether the
    # material was cut to fit the judge's context (a cut leaves part of the run unread)
    turns: int = 0
    snapshots: int = 0
    submissions: int = 0
    truncated: bool = False
    answer: str = ""  # the judge's answer as given (cut to ANSWER_CHARS), to check its reading against


class Override(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str
    verdict: Verdict
    reason: str
    by: str  # the user who set it
    at: float


class Overrides(Record):
    run_id: str
    overrides: list[Override] = []  # in the order set; the last per question holds


class FinalVerdict(BaseModel):
    """What a report shows for one question: the judge's verdict, or the researcher's override of it."""

    question: str
    verdict: Verdict
    judge_verdict: Verdict  # what the judge said (unknown when the run was not inspected)
    override: Override | None = None
    evidence: list[Evidence] = []
    explanation: str = ""


def inspection_path(run_dir: Path) -> Path:
    return Path(run_dir) / INSPECTION_FILE


def overrides_path(run_dir: Path) -> Path:
    return Path(run_dir) / OVERRIDES_FILE


def final_verdicts(inspection: Inspection | None, overrides: Overrides | None) -> list[FinalVerdict]:
    """Per question, in the rubric's order (then overridden questions the inspection lacks): the judge's verdict
    with the last override set on it."""
    last = {o.question: o for o in (overrides.overrides if overrides else [])}
    out = []
    for v in inspection.verdicts if inspection else []:
        o = last.pop(v.question, None)
        out.append(
            FinalVerdict(
                question=v.question,
                verdict=o.verdict if o else v.verdict,
                judge_verdict=v.verdict,
                override=o,
                evidence=v.evidence,
                explanation=v.explanation,
            )
        )
    out += [FinalVerdict(question=q, verdict=o.verdict, judge_verdict="unknown", override=o) for q, o in last.items()]
    return out


def load_final_verdicts(run_dir: Path) -> list[FinalVerdict]:
    """A run's final verdicts; [] when it was neither inspected nor overridden. RecordError on an unreadable file."""
    return final_verdicts(
        Inspection.load_or_none(inspection_path(run_dir)), Overrides.load_or_none(overrides_path(run_dir))
    )


def worst(verdicts: list[FinalVerdict]) -> Verdict | None:
    """The run's flag: its worst final verdict (violation > suspicious > unknown > clean: a question
    left unanswered keeps a run from reading clean); None: not inspected."""
    return max((v.verdict for v in verdicts), key=SEVERITY.__getitem__, default=None)
