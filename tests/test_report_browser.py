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
    assert cells[:2] == ["stack / driver", "arith"] and cells[2] == "base model"  # never "baseline" twice
    assert "pipeline / none" in cells and "baseline (control agent) / none" in cells
    pipeline = cells[cells.index("pipeline / none") + 1]
    assert float(pipeline.split(" ± ")[0]) > float(cells[3])  # the reference agent improved on the baseline
    assert pipeline.endswith("s0s1")  # links to its runs' viewers
    control = cells[cells.index("baseline (control agent) / none") + 1]
    assert control.split() == ["—", "s0s1"]  # as the terminal's table (the control submits nothing), and its runs
    failures = re.search(r"<h3>failures by cause</h3>\s*<table>(.*?)</table>", dom, re.S).group(1)
    assert "unknown" not in failures  # the control's ok runs are no agent failure
    pass_at = re.search(r"<h3>pass@k[^<]*</h3>\s*<table>(.*?)</table>", dom, re.S).group(1)
    control_row = next(r for r in re.findall(r"<tr>(.*?)</tr>", pass_at, re.S) if "(control agent)" in r)
    assert "+0.00" not in control_row and "—" in control_row  # no improvement to tell, as in Table 2
    images = re.findall(r'<img[^>]*src="([^"]+)"', dom)
    cell_plots = [i for i in images if i.startswith("plots/cell-")]
    assert "plots/heatmap.svg" in images and len(cell_plots) == 1  # the control submits nothing: no plot
    assert "no plot (no run scored a submission): tiny-llama / arith / baseline (control agent)" in text
    for plot in cell_plots:  # twice the old 360 × 216 px at least, shown 480 px wide
        width, height = Image.open(sweep.root / "report" / plot).size
        assert width >= 720 and height >= 432, (width, height)
    runs = re.search(r'<table class="runs">(.*?)</table>', dom, re.S).group(1)
    assert runs.count("<td>not inspected</td>") == len(sweep.runs())
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
