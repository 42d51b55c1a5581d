"""The demo sweep's HTML report (`a2rl report`), opened in a real headless Chromium (Debian's `chromium`; tools/
test.sh installs it): the rendered page shows the Table-2 block, the per-cell plots and the heatmap, and links
to each run's report."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from a2rl.store.sweepdir import SweepDir
from conftest import a2rl


def chromium(*args: str, tmp_path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("no chromium: tools/test.sh installs Debian's package (apt-get install chromium)")
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'chr'}", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # the demo sweep
def test_demo_report_opens_in_a_browser(demo_sweep, tmp_path):
    sweep = SweepDir(demo_sweep[1])
    index = a2rl("report", str(sweep.root), check=True).stdout.strip()
    url = f"file://{index}"
    dom = chromium("--dump-dom", url, tmp_path=tmp_path).stdout
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "Table 2: tiny-llama" in text
    block = re.search(r"<h3>Table 2: tiny-llama</h3>\s*<table>(.*?)</table>", dom, re.S).group(1)
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", block)]
    assert cells[:2] == ["stack / driver", "arith"] and cells[2] == "baseline"
    assert "pipeline / none" in cells and "baseline / none" in cells
    pipeline = cells[cells.index("pipeline / none") + 1]
    assert float(pipeline.split(" ± ")[0]) > float(cells[3])  # the reference agent improved on the baseline
    assert pipeline.endswith("s0s1")  # links to its runs' viewers
    control = cells[cells.index("baseline / none") + 1]
    assert control.split() == ["—", "s0s1"]  # as the terminal's table (the control submits nothing), and its runs
    failures = re.search(r"<h3>failures by cause</h3>\s*<table>(.*?)</table>", dom, re.S).group(1)
    assert "unknown" not in failures  # the control's ok runs are no agent failure
    images = re.findall(r'<img[^>]*src="([^"]+)"', dom)
    assert "plots/heatmap.svg" in images and sum(i.startswith("plots/cell-") for i in images) == 2
    for run in sweep.runs():
        assert f'href="../runs/{run.run_id}/report/summary.md"' in dom
        assert f'href="../runs/{run.run_id}/agent.log"' in dom
        assert f'href="../runs/{run.run_id}/report/viewer/index.html"' in dom
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,1800", url, tmp_path=tmp_path)
    assert plot_pixels(shot) > 100, "the score plots did not render"


def plot_pixels(png) -> int:
    """Pixels in matplotlib's first two line colours (blue, orange): only the runs' score plots have them (a
    page whose images do not load has none; links are another blue)."""
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return sum(int((abs(rgb - np.array(c)).max(axis=2) < 40).sum()) for c in ((31, 119, 180), (255, 127, 14)))
