"""The verify, lineage and score stages of the grading daemon (grading/daemon.py). A claimed submission passes
them in turn; each either settles its verdict (a ledger entry: refused, a copy of the base, a foreign model
refused) or passes it on with what it found, and the last one scores it: from an earlier equal grading key, or
by evaluating it on the held-out items."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from a2rl.errors import InfraError
from a2rl.grading.evaluate import grading_key, n_items
from a2rl.grading.frozenscan import take_scan
from a2rl.grading.grader import Grader
from a2rl.grading.lineage import copy_lineage
from a2rl.grading.onepass import Scanned, stream
from a2rl.grading.profiles import submission_lineage
from a2rl.grading.record import ledger_entry
from a2rl.grading.trust import UntrustedArtifact, check_frozen
from a2rl.llm.backends import engine_key
from a2rl.records import disk_full
from a2rl.spec.generation import GenerationPreset
from a2rl.spec.tasks import Task
from a2rl.store.baselines import BaselineRecord
from a2rl.store.ledger import LedgerEntry
from a2rl.tasklib.leaks import markers, scan_files

log = logging.getLogger("a2rl.grader")


@dataclass
class Submission:
    """A claimed submission on its way through the stages: its ledger fields so far and what the stages found."""

    artifact: str
    model_name: str
    task: Task
    fields: dict
    t0: float  # when its grading began
    base: BaselineRecord
    frozen: Path | None = None  # the verified frozen copy
    scanned: Scanned | None = None  # the one read of its weights: content hash and lineage samples
    digest: str = ""  # its weights' hash
    copy: bool = False  # the base model's weights
    key: str = ""  # its grading key
    earlier: LedgerEntry | None = None  # an evaluated entry with the same key
    preset: GenerationPreset | None = None

    def entry(self, status: str, **verdict) -> LedgerEntry:
        return ledger_entry(self.fields, status, t0=self.t0, **verdict)


class Scoring(Grader):
    """The verify, lineage and score stages of GradingDaemon (grading/daemon.py)."""

    def _score(self, artifact: str, model_name: str, task: Task, fields: dict, t0: float) -> LedgerEntry:
        """The submission's verdict: refused, or scored (reused where the weights or the grading key say it was
        scored before), or invalid where its model does not load or evaluate (the submission's fault)."""
        base = self.baseline(task.name, model_name, fields["protocol"])
        sub = Submission(artifact, model_name, task, dict(fields), t0, base)
        try:
            self._verify(sub)
        except (UntrustedArtifact, OSError) as e:
            return sub.entry("invalid", error=f"refused: {e}")
        try:
            for stage in (self._copy_of_base, self._lineage):
                if (settled := stage(sub)) is not None:
                    return settled
            return self._scored(sub)
        except InfraError:
            raise
        except Exception as e:  # the submission's fault (unloadable weights...): invalid, not a crash
            if disk_full(e):  # the grader's file system, not the submission
                raise InfraError(f"no space left to evaluate it: {e}") from e
            return sub.entry("invalid", error=f"could not evaluate the model: {type(e).__name__}: {e}")

    def _verify(self, sub: Submission) -> None:
        """The artifact is a trustworthy frozen copy (grading/trust.py); scanned for held-out data now: the frozen
        copy is deleted once graded, and the run report reads what was found from the ledger."""
        sub.frozen = check_frozen(sub.artifact, self.sweep.submissions)
        found_in = markers(sub.task.data(self.data_root).heldout_dir)
        # the freeze's scan, where it verifies (grading/frozenscan.py): the weights are then not read here again
        taken = take_scan(sub.frozen, self.sweep.key, found_in.canary)
        sub.scanned = taken[1] if taken else None
        leaks = scan_files(sub.frozen, found_in, taken[0].canary_in if taken else None)
        if leaks:
            log.warning("LEAK in %s: %s", sub.fields["submission_id"], "; ".join(leaks))
        sub.fields["leaks"] = leaks

    def _copy_of_base(self, sub: Submission) -> LedgerEntry | None:
        """The base model's own weights score the baseline's score, not evaluated again."""
        sub.scanned = sub.scanned or stream(sub.frozen)
        sub.digest = sub.scanned.digest
        sub.copy = sub.digest == sub.base.weights_hash
        if not sub.copy or sub.base.status != "ok":
            return None
        return sub.entry(
            "scored",
            score=sub.base.score,
            n_items=n_items(sub.task, sub.fields["part"], sub.base.details),
            weights_hash=sub.digest,
            copy_of_base=True,
            lineage=copy_lineage(),
        )

    def _lineage(self, sub: Submission) -> LedgerEntry | None:
        """Its grading key, an earlier evaluation with that key, and its descent from the base model: refused when
        foreign under `grader.foreign: refuse`."""
        sub.preset = self.preset(sub.model_name)
        settings = self.engine.settings
        base_dir = Path(sub.base.model_path)
        sub.key = grading_key(
            sub.digest,
            engine_key(sub.frozen, base_dir),
            sub.task,
            sub.fields["protocol"],
            settings,
            sub.preset,
            self.settings.task_options.get(sub.task.name),
            sub.fields["part"],
        )
        sub.earlier = self._graded(sub.key)
        # equal keys: the same weights against the same base, so the earlier entry's lineage holds (computing it
        # again streams every tensor: ~20 s per GB here)
        if sub.earlier is not None and sub.earlier.lineage is not None:
            descent = sub.earlier.lineage
        else:
            descent = (
                copy_lineage()
                if sub.copy
                else submission_lineage(sub.frozen, sub.scanned, sub.base, self.sweep, self.settings.lock_timeout_s)
            )
        sub.fields.update(weights_hash=sub.digest, lineage=descent)
        if descent.verdict == "foreign":
            log.warning("FOREIGN model in %s: %s", sub.fields["submission_id"], descent.summary())
            if self.settings.foreign == "refuse":
                return sub.entry(
                    "invalid", error=f"refused: foreign model (grader.foreign: refuse): {descent.summary()}"
                )
        sub.fields.update(backend=settings.record(), grading_key=sub.key)
        return None

    def _scored(self, sub: Submission) -> LedgerEntry:
        """Equal grading keys, equal scores: the earlier entry's; else evaluated on the held-out items."""
        if (earlier := sub.earlier) is not None:
            return sub.entry(
                "scored",
                score=earlier.score,
                details=earlier.details,
                n_items=earlier.n_items,
                cached_from=earlier.submission_id,
            )
        part = sub.fields["part"]
        score, details = self.evaluate(
            sub.task, sub.frozen, Path(sub.base.model_path), sub.fields["protocol"], sub.preset, part
        )
        return sub.entry(
            "scored",
            score=score,
            details=details,
            n_items=n_items(sub.task, part, details),
            engine=self.engine.last,
        )

    def _graded(self, key: str) -> LedgerEntry | None:
        """An evaluated (not itself cached) scored entry with this grading key, by any grader of the sweep: the
        index is refreshed from the ledger when the key is not in it yet."""
        if key not in self._graded_keys:
            self._graded_keys.update(
                {
                    e.grading_key: e.submission_id
                    for e in self.ledger.all_entries()
                    if e.status == "scored" and e.grading_key and e.cached_from is None and not e.copy_of_base
                }
            )
        sid = self._graded_keys.get(key)
        return self.ledger.get(sid) if sid is not None else None
