"""What of a run's workspace is kept where the sweep is when it lies on scratch the job may not keep: code/, output/
and home/ saved at an interruption (SIGTERM) for a requeue on a node without this node's scratch, and restored
there; the whole workspace archived at the run's end."""

from __future__ import annotations

import logging
from pathlib import Path

from a2rl.errors import SpecError
from a2rl.recording.archive import archive_workspace
from a2rl.records import disk_full
from a2rl.run.heartbeat import RunState
from a2rl.run.workspace import Workspace, is_blank, restore_for_resume, save_for_resume
from a2rl.units import MIB

log = logging.getLogger("a2rl.job")


class Resuming(RunState):
    """AgentRun's (run/job.py) workspace kept for a resume, and archived at the end."""

    def _scratch_workspace(self) -> Path | None:
        """The run's workspace when it lies outside the sweep directory (scratch the job may not keep), else None."""
        try:
            ws = self.sweep.workspace(self.run.run_id)
        except SpecError:  # no usable scratch root: no workspace was made there
            return None
        return ws if ws.is_dir() and self.sweep.root not in ws.resolve().parents else None

    def _restore_if_blank(self, ws: Workspace) -> None:
        """A resumed run on a node whose scratch lacks its workspace gets the copy its interruption saved."""
        saved = self.sweep.resume_dir(self.run.run_id)
        if saved.is_dir() and is_blank(ws.root):  # saved only by an interrupted attempt; dropped at the end
            restore_for_resume(ws, saved)
            self._log(f"workspace restored from {saved} (this node's scratch did not have it)")

    def _save_for_resume(self) -> None:
        """Keep what the agent made where the sweep is, for a requeue on a node without this node's scratch;
        never fails the interruption."""
        ws = self._scratch_workspace()
        if ws is None:
            return
        cap_mb = self.sweep.spec.recording.resume_max_mb
        try:
            copied, skipped = save_for_resume(Workspace(ws), self.sweep.resume_dir(self.run.run_id), cap_mb * MIB)
        except Exception as e:
            if disk_full(e):
                log.error("the workspace of %s was not saved for resuming: %s", self.run.run_id, e)
            else:
                log.exception("saving the workspace of %s for resuming failed", self.run.run_id)
            return
        self._log(
            f"workspace saved for resuming: {copied / MIB:.1f} MiB of code/, output/ and home/"
            + (
                f"; {len(skipped)} file(s) skipped, past recording.resume_max_mb={cap_mb:g}: "
                f"{', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}"
                if skipped
                else ""
            )
        )

    def _archive_workspace(self) -> None:
        """Keep what the agent left where the sweep is (node-local scratch goes with the job); never fails the run."""
        ws = self._scratch_workspace()
        settings = self.sweep.spec.recording
        if not settings.archive_workspace or ws is None:
            return
        try:
            archive = archive_workspace(ws, self.dir / "workspace", self.run.run_id, settings)
            self._log(
                f"workspace archived to {self.dir / 'workspace'}: {len(archive.files)} files, "
                f"{archive.total_bytes / MIB:.1f} MiB ({len(archive.skipped)} skipped, see manifest.json)"
            )
        except Exception as e:
            if disk_full(e):
                self._log(f"workspace not archived: {e}")
            else:
                log.exception("archiving the workspace of %s failed", self.run.run_id)
