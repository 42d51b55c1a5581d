"""WebShop's human demonstrations as train trajectories: prepare reads the IL file (here the made-up fixture in its
format, tests/fixtures/webshop/make_il_trajs.py), matches each demonstration to a training goal by instruction,
replays it in our environment and writes the ones that replay; graded instructions never get a trajectory; the
scripted expert plays the training goals without one."""

from __future__ import annotations

import json
import shutil

import pytest

from a2rl.tasklib.envs import load_task_env, replay
from a2rl.tasklib.taskdata import read_jsonl
from test_task_webshop import FIXTURES, PREP, _prepare, il_zip


def fixture_demos() -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / PREP.IL_FILE).read_text().splitlines()]


def graded_goals(prepared) -> list[dict]:
    """Both protocols' graded goals: human goals 0..2 (`a2rl`) and synthetic goals 0..2 (`paper`)."""
    return prepared.graded + read_jsonl(prepared.heldout / "synthetic_goals.jsonl")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    prepared = _prepare(tmp_path_factory.mktemp("webshop_demos"))
    prepared.rows = read_jsonl(prepared.train / "trajectories.jsonl")
    return prepared


def test_demonstrations_become_trajectories_in_our_action_syntax(prepared):
    human = {r["episode"]: r for r in prepared.rows if r["source"] == "human"}
    by_instruction = {PREP.instruction_key(d["states"][0]): d["actions"] for d in fixture_demos()}
    assert len(human) == 3
    for episode, row in human.items():  # matched by instruction although upstream's price cap differs from ours
        goal = prepared.goals[int(episode)]
        assert row["actions"] == [
            a if a.startswith("search[") else a.lower()
            for a in by_instruction[PREP.instruction_key(goal["instruction_text"])]
        ]
    sneakers = next(r for r in human.values() if "click[description]" in r["actions"])
    assert sneakers["won"] and sneakers["steps"][-1]["completion"] == " click[buy now]\n"
    partial = next(r for r in human.values() if "hair extension" in r["actions"][0])  # the older page title
    assert not partial["won"] and 0.0 < partial["reward"] < 1.0  # recorded as played: a partial purchase
    scripted = [r for r in prepared.rows if r["source"] == "scripted_expert"]
    assert {r["episode"] for r in scripted} == {"1", "4"} and all(r["won"] for r in scripted)  # goals without one
    assert sorted(int(r["episode"]) for r in prepared.rows) == list(range(len(prepared.goals)))


def test_prepare_logs_what_it_wrote_and_dropped(prepared, capsys):
    rows = PREP.trajectories(prepared.train, PREP.read_demos(FIXTURES / PREP.IL_FILE), graded_goals(prepared))
    assert rows == prepared.rows
    assert capsys.readouterr().err == (
        "webshop prepare: 3 of 7 human demonstrations written for 3 training goals "
        "(dropped: 2 for a graded instruction, 1 for no training goal, 1 not replaying "
        "here); the scripted expert plays the other 2\n"
    )


def test_every_written_demonstration_replays_to_its_recorded_reward(prepared):
    ws = load_task_env(prepared.train / "env.py", "ws_demos_workspace_env")  # the copy the agent gets
    for row in prepared.rows:
        episode = replay(ws.make_env(prepared.train, row["episode"]), row["actions"], strict=True)
        assert episode.done and (episode.reward, episode.won) == (row["reward"], row["won"])
        assert episode.observations == row["observations"]


def test_a_demonstration_that_does_not_replay_is_dropped(prepared):
    sage = next(i for i, g in enumerate(prepared.goals) if "mountain sage" in g["instruction_text"])
    demo = next(d for d in fixture_demos() if "mountain sage" in d["states"][0])
    with pytest.raises(ValueError, match="not admitted"):  # our search does not list the product it opens
        replay(PREP.ws.make_env(prepared.train, str(sage)), PREP.demo_actions(demo), strict=True)
    assert [r["source"] for r in prepared.rows if r["episode"] == str(sage)] == ["scripted_expert"]


def test_graded_instructions_never_get_a_trajectory(prepared):
    graded = graded_goals(prepared)
    held = {PREP.instruction_key(g["instruction_text"]) for g in graded}
    assert any(PREP.instruction_key(d["states"][0]) in held for d in fixture_demos())  # the fixture has such demos
    text = (prepared.train / "trajectories.jsonl").read_text().lower()
    assert not any(key in text for key in held)
    # a graded goal (here a synthetic one) asking what a training goal asks: neither its demonstration nor the
    # scripted expert is written for that training goal
    goal = prepared.goals[0]
    twin = {**prepared.graded[0], "instruction_text": goal["instruction_text"].upper(), "goal_options": {}}
    demos = PREP.read_demos(FIXTURES / PREP.IL_FILE)
    rows = PREP.trajectories(prepared.train, demos, [*graded, twin])
    assert "0" not in {r["episode"] for r in rows} and len(rows) == len(prepared.rows) - 1


def test_without_the_il_file_the_scripted_expert_plays_every_goal(tmp_path, capsys):
    source = tmp_path / "source"
    source.mkdir()
    for name in PREP.FILES:
        shutil.copyfile(FIXTURES / name, source / name)
    prepared = _prepare(tmp_path / "data", source=source)
    rows = read_jsonl(prepared.train / "trajectories.jsonl")
    assert len(rows) == 5 and all(r["source"] == "scripted_expert" and r["won"] for r in rows)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no il_trajs_finalized_images.jsonl in the source folder" in err


def test_a_download_with_another_git_blob_id_is_refused(tmp_path, monkeypatch):
    archive, blob = il_zip(tmp_path)
    monkeypatch.setattr(PREP, "download", lambda url, path: shutil.copyfile(archive, path))
    with pytest.raises(RuntimeError, match=f"git blob id {blob}, not the pinned {PREP.IL_BLOB}"):
        PREP.il_file(None, tmp_path)
    monkeypatch.setattr(PREP, "IL_BLOB", blob)  # this zip's own id: accepted and unzipped
    assert PREP.il_file(None, tmp_path).read_text() == (FIXTURES / PREP.IL_FILE).read_text()


def test_the_pipeline_route_fine_tunes_on_the_won_human_demonstrations(prepared, tiny_model):
    interactive = pytest.importorskip("a2rl.reference.interactive")  # needs transformers
    from transformers import AutoTokenizer

    from a2rl.tasklib.envs import load_task_env

    rows = interactive.load_trajectories(prepared.train)
    loop = interactive.GraderLoop(
        load_task_env(prepared.train / "env.py", "ws_demos_env"),
        prepared.train,
        "a2rl",
        AutoTokenizer.from_pretrained(tiny_model),
        1 << 20,
    )
    pairs, _ = loop.expert_steps(rows)
    completions = {p["completion"] for p in pairs}
    assert " search[natural deodorant calming lavender]\n" in completions  # a won human demonstration
    assert " search[clip in hair extension natural black]\n" not in completions  # a lost one: not imitated
