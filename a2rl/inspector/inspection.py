"""Inspect a run: give the judge the rubric and the run's material (material.py), read its answer into one
verdict per question with the evidence it cites, and record them (store/verdicts.py) with the judge's calls,
tokens and cost. A judge that fails or answers something unreadable leaves `unknown`, never `clean`; cited places
the material does not hold are dropped, and a violation left without evidence reads as suspicious. Nothing here
touches a score: the run report shows the verdicts beside the scores.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from a2rl.drivers.endpoint import DriverEndpoint, endpoint_path
from a2rl.inspector.material import Material, build_material
from a2rl.inspector.rubric import QUESTIONS, RUBRIC_VERSION, prompt_template, rubric_sha256
from a2rl.llm.judge import AnthropicClient, ChatClient, Completion, JudgeError
from a2rl.records import now
from a2rl.reporting.runreport import rebuild_run_report
from a2rl.spec.sweep import InspectorSettings
from a2rl.store.locks import sweep_lock
from a2rl.store.results import load_result
from a2rl.store.sweepdir import SweepDir
from a2rl.store.verdicts import (
    ANSWER_CHARS,
    Evidence,
    Inspection,
    JudgeUsage,
    Override,
    Overrides,
    QuestionVerdict,
    Verdict,
    inspection_path,
    overrides_path,
)

log = logging.getLogger("a2rl.inspector")
JUDGED = ("clean", "suspicious", "violation")  # what a judge may answer; unknown is ours


@dataclass
class Judge:
    client: ChatClient
    kind: str  # JudgeUsage.kind


def make_judge(sweep: SweepDir, s: InspectorSettings) -> Judge:
    """The client of the judge `s` names: an endpoint (its key from s.api_key_env) or the sweep's local driver,
    which must be serving (JudgeError otherwise)."""
    if s.driver is not None:
        endpoint = DriverEndpoint.load_or_none(endpoint_path(sweep, s.driver))
        if endpoint is None or not endpoint.live():
            raise JudgeError(
                f"the sweep's local driver {s.driver!r} is not serving (it stops once every run that uses it has "
                "ended); relaunch the sweep to start it, or inspect with an endpoint (--judge-url, --judge-model)"
            )
        return Judge(
            ChatClient(
                endpoint.base_url,
                endpoint.model,
                api_key=endpoint.api_key,
                timeout_s=s.timeout_s,
                retries=s.retries,
                workers=1,
                direct=True,
            ),
            "driver",
        )
    key = None
    if s.api_key_env:
        key = os.environ.get(s.api_key_env)
        if not key:
            raise JudgeError(f"the inspector's API key variable {s.api_key_env} is not set or empty")
    cls = AnthropicClient if s.api == "anthropic" else ChatClient
    assert s.base_url and s.model  # InspectorSettings checks that an endpoint has both
    return Judge(cls(s.base_url, s.model, api_key=key, timeout_s=s.timeout_s, retries=s.retries, workers=1), s.api)


def messages(material: Material) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": prompt_template()},
        {"role": "user", "content": material.text + "\n\nAnswer now with the JSON object."},
    ]


def _json_object(text: str) -> Any:
    """The JSON object in an answer: the whole text, inside a ``` fence, or from its first { to its last }."""
    candidates = [text.strip()]
    candidates += re.findall(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if "{" in text:
        candidates.append(text[text.find("{") : text.rfind("}") + 1])
    for c in candidates:
        try:
            return json.loads(c)
        except ValueError:
            continue
    raise ValueError("no JSON object in the answer")


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _evidence(items: Any, material: Material) -> tuple[list[Evidence], int]:
    """The cited places the material holds, and how many it does not (dropped)."""
    kept, dropped = [], 0
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            dropped += 1
            continue
        turn, seq, line = _int(item.get("turn")), _int(item.get("seq")), _int(item.get("line"))
        path = item.get("path") if isinstance(item.get("path"), str) else None
        quote = str(item.get("quote") or "")[:500]
        ok_turn = turn is None or turn in material.shown_turns
        if path is not None:
            seqs = [seq] if seq is not None else sorted(s for s, p in material.lines if p == path)
            hit = [
                s for s in seqs if (s, path) in material.lines and (line is None or line in material.lines[(s, path)])
            ]
            ok_code, seq = bool(hit), (hit[0] if hit else seq)
        else:
            ok_code, line = True, None
        if (turn is None and path is None) or not ok_turn or not ok_code:
            dropped += 1
            continue
        kept.append(Evidence(turn=turn, path=path, line=line, seq=seq if path else None, quote=quote))
    return kept, dropped


def read_answer(text: str, material: Material) -> list[QuestionVerdict]:
    """One verdict per rubric question from the judge's answer; unknown (with why) where it gives none we can read."""
    try:
        doc = _json_object(text)
        given = doc["verdicts"] if isinstance(doc, dict) else doc
        if not isinstance(given, list):
            raise ValueError("`verdicts` is not a list")
    except (ValueError, KeyError, TypeError) as e:
        reason = f"unreadable answer ({e}): {text[:200]!r}"
        return [QuestionVerdict(question=q.id, verdict="unknown", error=reason) for q in QUESTIONS]
    by_id = {v.get("question"): v for v in given if isinstance(v, dict)}
    out = []
    for q in QUESTIONS:
        v = by_id.get(q.id)
        if v is None:
            out.append(QuestionVerdict(question=q.id, verdict="unknown", error="the judge gave no verdict"))
            continue
        verdict = v.get("verdict")
        if verdict not in JUDGED:
            out.append(
                QuestionVerdict(
                    question=q.id, verdict="unknown", error=f"the judge's verdict {verdict!r} is not one of {JUDGED}"
                )
            )
            continue
        evidence, dropped = _evidence(v.get("evidence"), material)
        notes = [str(v.get("explanation") or "")[:2000]]
        if dropped:
            notes.append(f"[{dropped} cited place(s) not in the run's material dropped]")
        if verdict == "violation" and not evidence:
            verdict = "suspicious"
            notes.append("[a violation without evidence in the material reads as suspicious]")
        out.append(
            QuestionVerdict(
                question=q.id, verdict=verdict, evidence=evidence, explanation=" ".join(n for n in notes if n)
            )
        )
    return out


def _cost(s: InspectorSettings, tin: int | None, tout: int | None) -> float | None:
    if s.usd_per_mtok_in is None or s.usd_per_mtok_out is None or tin is None or tout is None:
        return None
    return round((tin * s.usd_per_mtok_in + tout * s.usd_per_mtok_out) / 1e6, 6)


def inspect_run(sweep: SweepDir, run_id: str, settings: InspectorSettings, judge: Judge | None = None) -> Inspection:
    """Judge one run and record its Inspection (runs/<id>/inspection.json); `judge` default: make_judge."""
    material = build_material(sweep, run_id, max_chars=settings.max_input_chars, output_chars=settings.output_chars)
    t0 = time.monotonic()
    done: Completion | None = None
    kind = "driver" if settings.driver else settings.api
    usage = JudgeUsage(kind=kind, model=settings.driver or settings.model or "")
    calls_before = judge.client.requests if judge else 0  # a judge made once for several runs counts them all
    try:
        judge = judge or make_judge(sweep, settings)
        usage.kind, usage.model, usage.base_url = judge.kind, judge.client.model, judge.client.base_url
        done = judge.client.chat(messages(material), max_tokens=settings.max_tokens)
        verdicts = read_answer(done.text, material)
    except JudgeError as e:  # the judge's failure: no verdict, never a clean one
        log.warning("inspecting %s: %s", run_id, e)
        usage.failed_calls = 1 if judge is not None else 0  # else no judge to call (make_judge failed)
        verdicts = [
            QuestionVerdict(question=q.id, verdict="unknown", error=f"the judge failed: {e}") for q in QUESTIONS
        ]
    if judge is not None:
        usage.calls = judge.client.requests - calls_before
    if done is not None:
        usage.served_model = done.model
        usage.input_tokens, usage.output_tokens = done.input_tokens, done.output_tokens
        usage.cost_usd = _cost(settings, done.input_tokens, done.output_tokens)
    usage.seconds = round(time.monotonic() - t0, 3)
    inspection = Inspection(
        run_id=run_id,
        rubric_version=RUBRIC_VERSION,
        rubric_sha256=rubric_sha256(),
        inspected_at=now(),
        judge=usage,
        verdicts=verdicts,
        turns=material.turns,
        snapshots=material.snapshots,
        submissions=material.submissions,
        truncated=material.truncated,
        answer=(done.text if done else "")[:ANSWER_CHARS],
    )
    path = inspection_path(sweep.run_dir(run_id))
    if path.exists():  # an earlier inspection is kept, not replaced: a failing judge loses nothing
        earlier = path.parent / "inspections" / f"{path.stat().st_mtime_ns}.json"
        earlier.parent.mkdir(exist_ok=True)
        os.replace(path, earlier)
    inspection.dump(path)
    return inspection


def inspect_at_end(sweep: SweepDir, run_id: str) -> Inspection | None:
    """The inspection a run's job asks for once the run is over, where the sweep sets `inspector:`, and the run
    report rebuilt with it; a run inspected already (a requeued job) is left as it is. Its failure is logged,
    never the run's: verdicts are derived and `a2rl inspect` gives them again."""
    settings = sweep.spec.inspector
    if settings is None or inspection_path(sweep.run_dir(run_id)).exists():
        return None
    try:
        inspection = inspect_run(sweep, run_id, settings)
        if (result := load_result(sweep, run_id)) is not None:
            rebuild_run_report(sweep, run_id, result)
        return inspection
    except Exception:
        log.exception("inspecting %s failed", run_id)
        return None


def set_override(sweep: SweepDir, run_id: str, question: str, verdict: Verdict, reason: str) -> Overrides:
    """Record a researcher's verdict on one question of a run, with their reason and name; the judge's stays."""
    known = [q.id for q in QUESTIONS]
    if question not in known:
        raise ValueError(f"unknown question {question!r} (the rubric's: {', '.join(known)})")
    if not reason.strip():
        raise ValueError("an override needs a reason (--reason)")
    path = overrides_path(sweep.run_dir(run_id))
    with sweep_lock(f"{path}.lock", timeout=sweep.spec.grader.lock_timeout_s):  # two researchers at once keep both
        current = Overrides.load_or_none(path) or Overrides(run_id=run_id)
        current.overrides.append(
            Override(question=question, verdict=verdict, reason=reason.strip(), by=_user(), at=now())
        )
        current.dump(path)
    return current


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
