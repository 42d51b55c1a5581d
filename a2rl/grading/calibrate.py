"""`a2rl calibrate SWEEP_DIR --repeats K`: evaluation noise, measured by grading the same weights K times.

By default only what can score differently in two gradings of the same weights: judge tasks (an LLM judge's
verdicts) and models whose generation preset samples (configs/generation/). Greedy decoding scored by rule or by a
seeded environment has zero noise by construction; `--tasks` names tasks to calibrate anyway. `--best` also re-grades
each run's best submission where its frozen weights were kept (storage.keep: all, or grader.keep_artifacts). The
scores go into one NoiseRecord per (task, base model, protocol) (store/noise.py), which the tables read to mark
improvements within noise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from a2rl.grading.daemon import GradingDaemon
from a2rl.grading.trust import UntrustedArtifact, check_frozen
from a2rl.records import now
from a2rl.store.modeldirs import resolve_model
from a2rl.store.noise import NoiseRecord, noise_path
from a2rl.store.results import load_result
from a2rl.store.sweepdir import SweepDir
from a2rl.tasklib.prepare import ensure_prepared


def calibrate(
    sweep: SweepDir,
    repeats: int,
    *,
    tasks: list[str] | None = None,
    best: bool = False,
    say: Callable[[str], None] = print,
) -> list[NoiseRecord]:
    grader = GradingDaemon(sweep)
    out = []
    pairs = dict.fromkeys((r.task, r.model.name, r.model.path, r.protocol) for r in sweep.runs())
    for task_name, model, model_path, protocol in pairs:
        task, preset = grader.task(task_name), grader.preset(model)
        if (task_name not in tasks) if tasks is not None else task.spec.kind != "judge" and preset.greedy:
            say(
                f"{task_name} / {model}: not calibrated ({task.spec.kind} task, greedy decoding: its grading is "
                f"deterministic)"
            )
            continue
        ensure_prepared(task, sweep.data_root())
        base_dir = resolve_model(model_path)
        targets = {"baseline": base_dir}
        if best:
            targets.update(best_submissions(sweep, task_name, model, protocol, say))
        scores = {}
        for name, weights in targets.items():
            part = task.feedback_part(protocol)  # where the improvements it judges were scored
            scores[name] = [grader.evaluate(task, weights, base_dir, protocol, preset, part)[0] for _ in range(repeats)]
            say(f"{task_name} / {model} / {name}: {', '.join(f'{s:.2f}' for s in scores[name])}")
        rec = NoiseRecord(
            task=task_name,
            model=model,
            protocol=protocol,
            evaluator_version=task.spec.evaluator_version,
            repeats=repeats,
            scores=scores,
            measured_at=now(),
        )
        rec.sign(sweep.key).dump(noise_path(sweep, task_name, model, protocol))
        say(f"{task_name} / {model}: sd {rec.sd:.2f} over {repeats} gradings")
        out.append(rec)
    return out


def best_submissions(
    sweep: SweepDir, task: str, model: str, protocol: str, say: Callable[[str], None]
) -> dict[str, Path]:
    """The frozen weights of each run's best submission that are still there (submission id → directory)."""
    out = {}
    for run in sweep.runs():
        result = load_result(sweep, run.run_id)
        if (
            (run.task, run.model.name, run.protocol) != (task, model, protocol)
            or result is None
            or result.best_submission is None
        ):
            continue
        try:
            out[result.best_submission] = check_frozen(
                str(sweep.submissions / result.best_submission), sweep.submissions
            )
        except UntrustedArtifact as e:
            keep = "set storage.keep: all, or grader.keep_artifacts, to keep them"
            say(f"{result.best_submission}: not re-graded ({e}; {keep})")
    return out
