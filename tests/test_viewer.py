"""The trajectory viewer (reporting/viewer.py) in a real headless Chromium (tests/test_report_browser.py's):
on a run whose agent.log is a real CLI's transcript (tests/fixtures/transcripts) and on the demo sweep's
reference agent. The rendered DOM shows every turn, the submissions at their budget-clock positions, a code
diff, the stage records and an inspector verdict beside the turn it cites; a link's #q= searches, #hide= hides
kinds, #sub= jumps to a submission."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from a2rl.inspector.rubric import QUESTIONS
from a2rl.recording.snapshots import snapshot_dir
from a2rl.reporting.viewer import viewer_path, viewer_turns, write_viewer
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from a2rl.store.verdicts import Evidence, Inspection, JudgeUsage, QuestionVerdict, inspection_path
from conftest import FIXTURES, a2rl
from fakes import ScriptedJudgeServer
from test_report_browser import chromium
from test_tables import finish, make_sweep

HOSTILE = "</script><img src=x onerror=\"document.title='owned'\"><!--"
DIFF = "--- a/train.py\n+++ b/train.py\n@@ -1 +1,2 @@\n import torch\n+open('/data/heldout/test.jsonl')\n"


def dom_of(page, tmp_path, fragment: str = "") -> str:
    # a virtual-time budget: the page's chunk and diff scripts load before the DOM is dumped
    return chromium("--virtual-time-budget=5000", "--dump-dom", f"file://{page}{fragment}", tmp_path=tmp_path).stdout


def inspect(run_dir, turn: int) -> None:
    """An inspection record as the inspector writes it, citing `turn`."""
    Inspection(
        run_id=run_dir.name,
        rubric_version="test",
        rubric_sha256="0" * 64,
        inspected_at=time.time(),
        judge=JudgeUsage(kind="driver", model="scripted"),
        verdicts=[
            QuestionVerdict(
                question="heldout_data",
                verdict="violation",
                evidence=[Evidence(turn=turn, quote="the planted line"), Evidence(path="train.py", line=2, seq=1)],
                explanation="reads the held-out split",
            ),
            QuestionVerdict(question="other_model", verdict="clean"),
        ],
    ).dump(inspection_path(run_dir))


def check_page(dom: str, turns: list[dict], result: RunResult, cited: int, diff_lines: bool = True) -> None:
    shown = re.findall(r'<div class="turn k-(\w+)(?: hit)?" id="t(\d+)"', dom)
    assert [(k, int(n)) for k, n in shown] == [(t["k"], i) for i, t in enumerate(turns, 1)]  # every turn, in order
    for budget_s, seq in zip(result.submitted_budget_s, range(1, result.submissions + 1)):
        assert re.search(
            rf'class="marker ?[a-z]*" href="#s{seq}" data-seq="{seq}" data-x="{100 * budget_s / result.budget_s:.2f}"',
            dom,
        )
    diff = re.search(r'<details class="diff" id="d1" open="">.*?<pre data-done="1">(.*?)</pre>', dom, re.S).group(1)
    assert '<span class="add">+' in diff or not diff_lines  # the first snapshot's diff, loaded and coloured
    verdict = re.search(r'<div class="verdict" data-question="heldout_data">(.*?)</div></div>', dom, re.S).group(1)
    assert "v-violation" in verdict and f'href="#t{cited}"' in verdict and "train.py:2 (snapshot 1)" in verdict
    turn = re.search(rf'<div class="turn k-\w+" id="t{cited}".*?</pre>', dom, re.S).group(0)
    assert 'class="vbadge v-violation"' in turn  # the verdict beside its evidence


@pytest.mark.slow  # two browser starts
def test_a_real_cli_transcript_in_the_viewer(tmp_path):
    sweep = make_sweep(tmp_path / "s", seeds=(0,), tasks=("gsm8k",))
    finish(sweep, "gsm8k", "free", 0, [(20, 1000, 20.0), (60, 5000, None)], usage=(33690, 80, 0.1))
    run = next(r for r in sweep.runs() if r.mode == "free")
    run_dir = sweep.run_dir(run.run_id)
    shutil.copy(FIXTURES / "transcripts" / "claude-2.1.197.jsonl", run_dir / "agent.log")
    with open(run_dir / "agent.log", "a") as log:  # an agent's text is shown as text, never run
        log.write(f"{HOSTILE}\n")
    snapshot_dir(sweep.root, run.run_id).mkdir(parents=True)
    (snapshot_dir(sweep.root, run.run_id) / "001.diff").write_text(DIFF)
    turns = viewer_turns("claude", (run_dir / "agent.log").read_text())
    bash = next(i for i, t in enumerate(turns, 1) if t["k"] == "tool" and t["t"] == "Bash")
    inspect(run_dir, bash)
    result = RunResult.load(sweep.result_path(run.run_id))
    page = write_viewer(sweep, run.run_id, result)
    dom = dom_of(page, tmp_path)
    check_page(dom, turns, result, bash)
    assert 'class="marker invalid" href="#s2"' in dom  # the invalid submission, marked so
    assert """<pre>&lt;/script&gt;&lt;img src=x onerror="document.title='owned'"&gt;&lt;!--</pre>""" in dom
    assert "owned" not in dom.split("</title>")[0]
    assert "tokens in 33690 out 80" in dom
    assert re.search(r'<circle class="scored" cx="[\d.]+" cy="[\d.]+" r="4"', dom)  # the score curve
    # a search that skips hidden kinds: the tool call that ran the command, not the text that announced it
    dom = dom_of(page, tmp_path, "#q=cat%20train.py&hide=output,text")
    hits = re.findall(r'<div class="result"><a href="#t(\d+)">', dom)
    assert [int(n) for n in hits] == [
        i for i, t in enumerate(turns, 1) if t["k"] == "tool" and "cat train.py" in t["x"]
    ]
    assert hits and "#turns .k-output{display:none}\n#turns .k-text{display:none}</style>" in dom


@pytest.mark.slow  # the demo sweep
def test_the_demo_reference_agent_in_the_viewer(demo_sweep, tmp_path):
    demo_sweep = SweepDir(shutil.copytree(demo_sweep[1], tmp_path / "sd", symlinks=True))  # the session's, unchanged
    run = next(r for r in demo_sweep.runs() if r.agent.name == "pipeline")
    run_dir = demo_sweep.run_dir(run.run_id)
    turns = viewer_turns("none", (run_dir / "agent.log").read_text())
    submitting = next(i for i, t in enumerate(turns, 1) if "submitting" in t["x"])
    made = next(i for i, t in enumerate(turns, 1) if f"{run.run_id}.0001" in t["x"])  # `a2rl submit`'s answer
    inspect(run_dir, submitting)
    index = a2rl("report", str(demo_sweep.root), check=True).stdout.strip()  # rebuilds the viewer: inspected since
    assert f'href="../runs/{run.run_id}/report/viewer/index.html"' in open(index).read()
    result = RunResult.load(demo_sweep.result_path(run.run_id))
    page = viewer_path(demo_sweep, run.run_id)
    dom = dom_of(page, tmp_path, "#sub=1")
    check_page(dom, turns, result, submitting, diff_lines=False)  # it trains from the installed package: no code
    # the submission sits in the timeline after the turn that made it (`a2rl submit`'s answer); #sub=1 jumps there
    assert re.search(
        rf'id="t{made}"[^>]*>(?:(?!</div>).)*</pre></div><div class="turn k-submission " id="ts1"', dom, re.S
    )
    assert re.search(rf'class="turn k-log hit" id="t{made}"', dom)
    stages = re.search(r'<div id="stages">(.*?)</div>', dom, re.S).group(1)
    assert "<td>sft</td>" in stages and "<td>grpo</td>" in stages

    # The inspector itself (`a2rl inspect`) on the demo's run, its judge a scripted endpoint that calls the turn
    # that submits suspicious: the rebuilt page shows that verdict beside that turn.
    def judge(system: str, user: str) -> str:
        blocks = re.finditer(r"^\[turn (\d+)\][^\n]*(?:\n    \|[^\n]*)*", user, re.M)  # a turn and its lines
        turn = next(int(b.group(1)) for b in blocks if "submitting" in b.group(0))
        cited = {"question": "heldout_data", "verdict": "suspicious", "evidence": [{"turn": turn}], "explanation": "x"}
        rest = [{"question": q.id, "verdict": "clean", "evidence": []} for q in QUESTIONS if q.id != "heldout_data"]
        return json.dumps({"verdicts": [cited, *rest]})

    with ScriptedJudgeServer(judge) as endpoint:
        a2rl("inspect", str(demo_sweep.root), run.run_id, "--judge-url", endpoint.url, "--judge-model", "j", check=True)
    assert endpoint.requests, "the judge was never asked"
    a2rl("report", str(demo_sweep.root), check=True)
    dom = dom_of(page, tmp_path)
    verdict = re.search(r'<div class="verdict" data-question="heldout_data">(.*?)</div></div>', dom, re.S).group(1)
    assert "v-suspicious" in verdict and f'href="#t{submitting}"' in verdict
    assert 'class="vbadge v-suspicious"' in re.search(
        rf'<div class="turn k-\w+" id="t{submitting}".*?</pre>', dom, re.S
    ).group(0)
