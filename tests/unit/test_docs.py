"""The documentation runs: README.md and docs/*.md, read as a user would copy from them.

- every ```python block executes, each in a fresh namespace;
- every ``foldexp train …`` / ``foldexp bench …`` command, in a ```bash block or an inline code
  span, composes: Hydra accepts its overrides and the schema its values. Composing reads no data
  files, so commands naming files of one's own (``dataset.path=reviews.csv``) are checked too;
  it only looks that word vectors exist, so a command using them is skipped on a machine without
  the data (``FOLDEXP_DATA`` unset). ``$VARS`` are expanded as the shell would. A multirun
  (``-m``) is checked at the first value of each sweep. Commands that cannot compose as
  written, synopses with placeholders, are listed in ``SKIPPED`` with the reason;
- the README stays a guide: at most ``README_MAX_LINES`` lines.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

# The config composers, in one place: if the apps move, only these two imports change.
from foldexp.bench.app import compose_config as compose_bench
from foldexp.config.errors import MissingFileError
from foldexp.train.app import compose_config as compose_train

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250
COMPOSERS = {"train": compose_train, "bench": compose_bench}

#: Commands shown as synopses, not runs: a placeholder (NAME, PRESET, …) or an optional part in
#: brackets is not a value Hydra could compose.
SKIPPED = {
    "foldexp train [experiment=NAME] [key=value …]": "a synopsis: NAME, key=value",
    "foldexp bench [bench=PRESET] [key=value …]": "a synopsis: PRESET, key=value",
    "foldexp train experiment=NAME --cfg job": "NAME stands for any experiment preset",
    "foldexp train -m seed=1,2,3 … hydra.sweep.dir=DIR": "… stands for each results row's command",
}

#: Launcher configs come from optional Hydra plugins; without the plugin a command using the
#: launcher cannot compose, and is skipped with that reason.
LAUNCHER_PLUGINS = {
    "joblib": "hydra_plugins.hydra_joblib_launcher",
    "slurm": "hydra_plugins.hydra_submitit_launcher",
    "submitit_local": "hydra_plugins.hydra_submitit_launcher",
    "submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
}

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
_SHELL_OPERATORS = {"|", "||", "&&", ";", "&"}
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _fences(path: Path) -> list[tuple[str, str, int]]:
    """``(language, body, first line number)`` of each fenced block of ``path``."""
    text = path.read_text(encoding="utf-8")
    return [
        (m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)
    ]


def _inline_spans(path: Path) -> list[tuple[str, int]]:
    """Inline code spans outside fenced blocks, with their line numbers."""
    text = path.read_text(encoding="utf-8")
    # Blank the fenced blocks out, keeping their newlines so that line numbers stay right.
    outside = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [
        (m.group(1).replace("\\|", "|"), outside.count("\n", 0, m.start()) + 1)
        for m in _INLINE.finditer(outside)
    ]


def _commands_in(tokens: list[str]) -> list[tuple[dict[str, str], list[str]]]:
    """``(environment, [train|bench, args…])`` of each foldexp command in a shell line."""
    found = []
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token not in _SHELL_OPERATORS:
            segment.append(token)
            continue
        env = {}  # NAME=value words before the command (``PYTHONPATH=docs/examples foldexp …``)
        for i, word in enumerate(segment):
            if word == "foldexp" and i + 1 < len(segment) and segment[i + 1] in COMPOSERS:
                found.append((env, segment[i + 1 :]))
                break
            if _ENV.match(word):
                key, _, value = word.partition("=")
                env[key] = value
        segment = []
    return found


def _doc_commands() -> list[tuple[str, dict[str, str], list[str]]]:
    """``(where, environment, [train|bench, args…])`` of every command in the docs."""
    commands = []
    for path in DOCS:
        for language, body, line in _fences(path):
            if language not in ("bash", "sh", "shell"):
                continue
            for offset, text in enumerate(body.replace("\\\n", " ").splitlines()):
                for env, args in _commands_in(shlex.split(text, comments=True)):
                    commands.append((f"{path.name}:{line + 1 + offset}", env, args))
        for span, line in _inline_spans(path):
            if re.match(r"foldexp (train|bench)\b", span):
                for env, args in _commands_in(shlex.split(span)):
                    commands.append((f"{path.name}:{line}", env, args))
    return commands


def _python_snippets() -> list[tuple[str, str]]:
    return [
        (f"{path.name}:{line}", body)
        for path in DOCS
        for language, body, line in _fences(path)
        if language == "python"
    ]


def _as_written(args: list[str]) -> str:
    return "foldexp " + " ".join(args)


def _first_sweep_values(overrides: list[str]) -> list[str]:
    """A multirun's overrides at the first value of each sweep (``seed=1,2,3`` → ``seed=1``)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [
        f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
        if o.is_sweep_override()
        else raw
        for raw, o in zip(overrides, parsed)
    ]


def _overrides(args: list[str]) -> list[str]:
    """The Hydra overrides of ``[train|bench, args…]``; flags that only print are dropped."""
    overrides, multirun, rest = [], False, iter(args[1:])
    for arg in rest:
        if arg in ("-m", "--multirun"):
            multirun = True
        elif arg in ("--cfg", "-c", "--package", "-p"):
            next(rest, None)  # prints the config; its argument is not an override
        elif arg == "--resume":
            next(rest, None)  # a run folder: its overrides are the run's own
        elif arg.startswith("-"):
            raise AssertionError(f"{_as_written(args)}: unknown flag {arg}")
        else:
            overrides.append(arg)
    return _first_sweep_values(overrides) if multirun else overrides


COMMANDS = _doc_commands()
SNIPPETS = _python_snippets()


@pytest.mark.parametrize("where, code", SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_python_snippet_runs(where: str, code: str) -> None:
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize(
    "where, env, args", COMMANDS, ids=[f"{w} {_as_written(a)[:60]}" for w, _, a in COMMANDS]
)
def test_command_composes(
    where: str, env: dict[str, str], args: list[str], tmp_path: Path, monkeypatch
) -> None:
    written = _as_written(args)
    if written in SKIPPED:
        pytest.skip(f"{where}: {SKIPPED[written]}")
    overrides = [os.path.expandvars(o) for o in _overrides(args)]  # as the shell passes them
    for override in overrides:
        launcher = override.removeprefix("hydra/launcher=")
        if launcher != override and importlib.util.find_spec(LAUNCHER_PLUGINS[launcher]) is None:
            pytest.skip(f"{where}: the {launcher} launcher plugin is not installed")
    for folder in filter(None, env.get("PYTHONPATH", "").split(":")):
        monkeypatch.syspath_prepend(str(ROOT / folder))  # e.g. docs/examples for model=custom
    try:
        COMPOSERS[args[0]](overrides, output_dir=tmp_path)
    except MissingFileError as err:
        if os.environ.get("FOLDEXP_DATA"):
            raise
        pytest.skip(f"{where}: needs the data folder (FOLDEXP_DATA): {err}")


def test_the_docs_hold_snippets_and_commands() -> None:
    """The extraction itself works: an empty harvest would make the tests above pass vacuously."""
    assert sum(where.startswith("README.md") for where, _ in SNIPPETS) >= 2
    assert len(COMMANDS) >= 20
    assert {args[0] for _, _, args in COMMANDS} == {"train", "bench"}


def test_skipped_commands_are_still_in_the_docs() -> None:
    written = {_as_written(args) for _, _, args in COMMANDS}
    assert not set(SKIPPED) - written, "SKIPPED names commands the docs no longer show"


def test_readme_is_a_short_guide() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"
