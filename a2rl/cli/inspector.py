"""`a2rl inspect SWEEP_DIR [RUN ...]`: an LLM judge reads each run (its transcript, code diffs and submissions)
and answers the inspector's rubric, one verdict per question (clean, suspicious, violation; unknown when the
judge failed) with the evidence it cites; the run reports are rebuilt with them. Scores never change.

The judge is the sweep's `inspector:` setting, or the one these options name (an OpenAI-compatible or Anthropic
endpoint, or a local driver of the sweep). Default runs: every run with a result.

  a2rl inspect D --show [RUN ...]                          print the verdicts recorded, judging nothing
  a2rl inspect D --set RUN QUESTION VERDICT --reason "..."  override a verdict (recorded with your name)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from a2rl.cli.common import NotASweep, open_sweep_dir

VERDICTS = ("clean", "suspicious", "violation", "unknown")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("run_ids", nargs="*", help="default: every run with a result")
    j = p.add_argument_group("the judge (default: the sweep's inspector setting)")
    j.add_argument("--judge-url", help="base URL of an OpenAI-compatible (or, with --api anthropic, Anthropic) API")
    j.add_argument("--judge-model", help="the model the endpoint serves")
    j.add_argument("--api", choices=("openai", "anthropic"), default=None)
    j.add_argument("--api-key-env", help="the variable holding the endpoint's key")
    j.add_argument("--driver", help="a local driver of the sweep (it must be serving)")
    p.add_argument("--show", action="store_true", help="print the recorded verdicts; judge nothing")
    p.add_argument("--set", nargs=3, metavar=("RUN", "QUESTION", "VERDICT"), help="override a verdict")
    p.add_argument("--reason", help="why (required with --set)")


def _settings(sweep, args: argparse.Namespace):
    from pydantic import ValidationError

    from a2rl.errors import format_validation_error
    from a2rl.spec.sweep import InspectorSettings

    given = {
        k: v
        for k, v in (
            ("base_url", args.judge_url),
            ("model", args.judge_model),
            ("api", args.api),
            ("api_key_env", args.api_key_env),
            ("driver", args.driver),
        )
        if v is not None
    }
    base = sweep.spec.inspector
    if not given.keys() - {"api", "api_key_env"}:
        if base is None:
            raise NotASweep(
                "no judge: the sweep sets no `inspector:`; name one with --judge-url and --judge-model, or --driver"
            )
        return base.model_copy(update=given)
    keep = base.model_dump(exclude={"api", "base_url", "model", "api_key_env", "driver"}) if base else {}
    try:
        return InspectorSettings.model_validate({**keep, **given})
    except ValidationError as e:
        raise NotASweep("the judge: " + "; ".join(format_validation_error(e, InspectorSettings))) from None


def _show(sweep, run_id: str) -> str:
    from a2rl.store.verdicts import Inspection, inspection_path, load_final_verdicts

    finals = load_final_verdicts(sweep.run_dir(run_id))
    if not finals:
        return f"{run_id}: not inspected"
    insp = Inspection.load_or_none(inspection_path(sweep.run_dir(run_id)))
    j = insp.judge if insp else None
    head = f"{run_id}:" + (
        f" judge {j.kind} {j.model}, rubric {insp.rubric_version}, {j.calls} call(s), "
        f"tokens {j.input_tokens if j.input_tokens is not None else '?'} in / "
        f"{j.output_tokens if j.output_tokens is not None else '?'} out, cost "
        f"{'?' if j.cost_usd is None else f'${j.cost_usd:.4f}'}" + (" (material cut to fit)" if insp.truncated else "")
        if insp and j
        else ""
    )
    lines = [head]
    for f in finals:
        where = "; ".join(
            ", ".join(
                x
                for x in (
                    f"turn {e.turn}" if e.turn is not None else "",
                    f"{e.path}:{e.line}" if e.path and e.line is not None else (e.path or ""),
                )
                if x
            )
            for e in f.evidence
        )
        o = f.override
        note = f" (overridden by {o.by}: {o.reason}; the judge said {f.judge_verdict})" if o else ""
        err = next((v.error for v in (insp.verdicts if insp else []) if v.question == f.question and v.error), None)
        lines.append(f"  {f.question:20s} {f.verdict:10s} {where}{note}" + (f" [{err[:160]}]" if err and not o else ""))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from a2rl.inspector.inspection import inspect_run, make_judge, set_override
    from a2rl.llm.judge import JudgeError
    from a2rl.reporting.runreport import rebuild_run_report, write_run_report
    from a2rl.store.results import load_result

    sweep = open_sweep_dir(args.sweep_dir)
    known = {r.run_id for r in sweep.runs()}
    if args.set:
        run_id, question, verdict = args.set
        if run_id not in known:
            raise NotASweep(f"no run {run_id!r} in {sweep.root}")
        if verdict not in VERDICTS:
            raise NotASweep(f"verdict {verdict!r}: one of {', '.join(VERDICTS)}")
        if not args.reason:
            raise NotASweep('--set needs --reason "...": an override is recorded with why')
        try:
            set_override(sweep, run_id, question, verdict, args.reason)
        except ValueError as e:
            raise NotASweep(str(e)) from None
        if (result := load_result(sweep, run_id)) is not None:
            rebuild_run_report(sweep, run_id, result)
        print(_show(sweep, run_id))
        return 0
    if unknown := [r for r in args.run_ids if r not in known]:
        raise NotASweep(f"no run {', '.join(map(repr, unknown))} in {sweep.root}")
    ids = args.run_ids or [r for r in sorted(known) if sweep.result_path(r).exists()]
    if args.show:
        for run_id in ids:
            print(_show(sweep, run_id))
        return 0
    settings = _settings(sweep, args)
    try:  # a judge that cannot be reached at all is the user's to fix: one line, and nothing recorded
        judge = make_judge(sweep, settings)
    except JudgeError as e:
        raise NotASweep(str(e)) from None
    for run_id in ids:
        inspect_run(sweep, run_id, settings, judge)
        if sweep.result_path(run_id).exists():
            write_run_report(sweep, run_id)
        print(_show(sweep, run_id), flush=True)
    if not ids:
        print(f"no run with a result in {sweep.root}", file=sys.stderr)
    return 0
