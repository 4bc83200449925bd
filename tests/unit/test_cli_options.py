"""Bad values on the command line, as a class: every option of every subcommand that takes a value (what
`gpucert X --help` lists) is checked where argparse reads it, by a type that says what it takes. Each is fed the
values that type must refuse (a path that does not exist, a folder where a file goes, a path under a file, an empty
string, `../` in a name, a negative count, `72`, `3d` or `-1h` where seconds or a duration go) and answers one line
naming the option and the fix, exit 2, no traceback. The walk reads the parser, so an option added later is swept
too: one without a type of its own fails here until it is given one (or is free text on purpose, below).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucert.cli import args as cliargs
from gpucert.cli.fleet import _flag
from gpucert.cli.main import _parser, main
from gpucert.cli.soak import _duration

# options whose value is free text on purpose: a reason, a release, a git ref, a metric, a context, an address
FREE_TEXT = {
    ("baseline record", "--reason"),
    ("configure", "--operator-release"),
    ("configure", "--base-ref"),
    ("history", "--metric"),
    ("init", "--context"),
    ("metrics", "--serve"),
}


def _bad(tmp: Path) -> dict[Any, list[str]]:
    """Per type, the values it must refuse."""
    a_file, a_folder = str(tmp / "a-file"), str(tmp)
    under_file = str(tmp / "a-file" / "x")
    long_name = str(tmp / ("x" * 300))
    paths = ["", under_file, long_name]
    return {
        cliargs.existing_file: [*paths, str(tmp / "missing.yaml"), a_folder],
        cliargs.existing_folder: [*paths, str(tmp / "missing"), a_file],
        cliargs.folder_to_write: [*paths, a_file],
        cliargs.file_to_write: [*paths, a_folder],
        cliargs.node_name: ["", "../x", "Gpu Node", "gpu-node-1\n", "x" * 300],
        cliargs.spec_name: ["", "../x", "a/b", "Spec", "x\n"],
        cliargs.pool_name: ["", "../x", "a.b", "x" * 64],
        cliargs.seconds: ["", "-1", "nan", "3d", "-1h", "inf"],
        cliargs.share: ["", "1.5", "-0.1", "nan"],
        _duration: ["", "72", "-1h", "3x", "0h", "1.5h"],
        _flag: ["maybe", "2"],
        cliargs.non_empty: ["", "   ", "a\nb"],
    }


def _commands(parser: argparse.ArgumentParser, name: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _commands(subparser, f"{name} {sub}".strip())
    if name:
        yield name, parser


def _valued(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.nargs != 0 and not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
    ]


def _label(action: argparse.Action) -> str:
    """The option as argparse's errors name it: its longest flag, or a positional's metavar or name."""
    if action.option_strings:
        return action.option_strings[-1]
    return str(action.metavar or action.dest)


def _good(action: argparse.Action, tmp: Path) -> list[str]:
    """A value the action takes, so that only the option under test is wrong."""
    fn = action.type
    value = {
        cliargs.existing_file: str(tmp / "a-file"),
        cliargs.existing_folder: str(tmp),
        cliargs.node_name: "gpu-node-1",
        cliargs.spec_name: "demo",
        cliargs.pool_name: "train",
    }.get(fn, "1")  # type: ignore[arg-type]
    if action.choices:
        value = next(iter(action.choices))
    return [*action.option_strings[-1:], value]


def _is_count(fn: Any) -> bool:
    return getattr(fn, "__qualname__", "").startswith("count.")


def _cases(tmp: Path) -> Iterator[tuple[str, str, list[str], str]]:
    bad = _bad(tmp)
    for command, parser in _commands(_parser()):
        actions = _valued(parser)
        required = [a for a in actions if a.required]
        for action in actions:
            if action.choices:
                values = ["no-such-choice"]
            elif _is_count(action.type):
                values = ["", "-1", "x", "1.5"]
            else:
                values = bad.get(action.type, [])
            for value in values:
                given = [x for r in required if r is not action for x in _good(r, tmp)]
                argv = [*command.split(), *given, *action.option_strings[-1:], value]
                yield command, _label(action), argv, value


def test_every_option_that_takes_a_value_has_a_type_that_says_what_it_takes() -> None:
    known = set(_bad(Path("/"))) - {cliargs.non_empty}
    untyped = []
    for command, parser in _commands(_parser()):
        for action in _valued(parser):
            typed = action.type in known or bool(action.choices) or _is_count(action.type)
            if not typed and (command, _label(action)) not in FREE_TEXT:
                untyped.append(f"gpucert {command} {_label(action)}")
    assert not untyped, untyped


def test_every_bad_value_is_one_line_naming_the_option_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    parser = _parser()  # main() builds it for each command line: once here, for 200 of them
    bad = []
    n = 0
    for command, label, argv, value in _cases(tmp_path):
        n += 1
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        code = exc.value.code
        err = capsys.readouterr().err
        problems = [
            f"exit {code}" * (code != 2),
            "not one line" * (err.count("\n") != 1),
            "option not named" * (f"argument {label}" not in err),
            "no fix" * (f"see `gpucert {command} --help`" not in err),
            "traceback" * ("Traceback" in err),
        ]
        if any(problems):
            bad.append(f"gpucert {command} {label} {value!r}: {', '.join(p for p in problems if p)}: {err!r}")
    assert n > 150
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # issue 27's sweep: the name was blamed on NODE
        (["history", "gpu-node-1", "--spec-name", "../x"], "argument --spec-name: '../x' is not a spec name"),
        (["schedule", "SPEC", "--max-nodes", "-1"], "argument --max-nodes: -1 is less than 1: give 1 or more"),
        (["soak", "--duration", "72"], "argument --duration: '72' is not a duration"),
        (["soak", "--duration", "-1h"], "is written --option=VALUE"),
        (["soak", "--duration=-1h"], "argument --duration: '-1h' is not a duration"),
        (["recertify", "gpu-node-1", "--spec", "SPEC", "--wait-timeout", "3d"], "'3d' is not a number"),
        (["certify", "FOLDER"], "argument spec: 'FOLDER' is a folder: name the file"),
        (["certify", "SPEC", "--reports", "SPEC/x"], "is under a file ("),
    ],
)
def test_the_sweeps_instances(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("x", encoding="utf-8")
    swap = {"SPEC": str(spec), "FOLDER": str(tmp_path), "SPEC/x": str(spec / "x")}
    argv = [swap.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says.replace("FOLDER", str(tmp_path)) in err
    assert err.count("\n") == 1
