"""`a2rl ls [tasks|agents|clusters|presets]`: what the registries hold (the shipped folders, then A2RL_*_PATH's),
one line each: name, what it is, and the file it comes from; with no argument, all four."""

from __future__ import annotations

import argparse

KINDS = ("tasks", "agents", "clusters", "presets")


def kind(text: str) -> str:
    from a2rl.errors import unknown_name

    if text not in KINDS:
        raise argparse.ArgumentTypeError(unknown_name("kind", text, KINDS))
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", nargs="?", type=kind, metavar="KIND", help=f"one of {', '.join(KINDS)} (default: all four)")


def run(args: argparse.Namespace) -> int:
    for i, what in enumerate([args.what] if args.what else KINDS):
        print(("\n" if i else "") + listing(what))
    return 0


def listing(what: str) -> str:
    from tabulate import tabulate

    from a2rl.errors import SpecError
    from a2rl.spec.agents import agent_registry
    from a2rl.spec.clusters import cluster_registry
    from a2rl.spec.generation import preset_registry
    from a2rl.spec.tasks import task_registry

    registry = {
        "tasks": task_registry,
        "agents": agent_registry,
        "clusters": cluster_registry,
        "presets": preset_registry,
    }[what]()
    rows = []
    for name in registry.names():
        try:
            spec = registry.get(name)
            about = (
                f"level {spec.level}, {spec.kind}, {spec.train_format}"
                if what == "tasks"
                else " ".join(spec.description.split())
            )
        except SpecError as e:
            about = f"INVALID: {e.lines[0]}"
        rows.append((name, about[:100], registry.path(name)))
    return tabulate(rows, headers=[what[:-1], "about", "file"], disable_numparse=True)
