"""Every flag the CLI had before the tasks were split (tests/data/cli_flags_before_split.json,
written from that day's parser) still exists on the same command and sets the same setting or
argument. New flags may be added; none may disappear or change meaning."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kformer.cli import build_parser

BEFORE = Path(__file__).parent / "data" / "cli_flags_before_split.json"


def command_flags(parser: argparse.ArgumentParser, path=()) -> dict[str, dict[str, str]]:
    """``{"train classify": {"--epochs": "epochs", "--data": "data", ...}, ...}`` of ``parser``."""
    out: dict[str, dict[str, str]] = {}
    flags: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(command_flags(sub, (*path, name)))
        elif isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        elif action.option_strings:
            flags.update(dict.fromkeys(action.option_strings, action.dest))
        else:
            flags[action.metavar or action.dest.upper()] = action.dest
    if path and flags:
        out[" ".join(path)] = flags
    return out


def test_every_earlier_flag_still_sets_the_same_thing():
    before = json.loads(BEFORE.read_text(encoding="utf-8"))
    now = command_flags(build_parser())
    missing = {command: sorted(set(flags) - set(now.get(command, {}))) for command, flags in before.items()}
    assert {command: flags for command, flags in missing.items() if flags} == {}
    changed = {f"{command} {flag}": (dest, now[command][flag])
               for command, flags in before.items() for flag, dest in flags.items() if now[command][flag] != dest}
    assert changed == {}


def test_the_check_sees_a_removed_flag():
    parser = build_parser()
    flags = command_flags(parser)
    assert flags["train classify"]["--epochs"] == "epochs"
    assert "--epochs" in flags["train arithmetic"] and "MODEL_DIR" in flags["predict"]
