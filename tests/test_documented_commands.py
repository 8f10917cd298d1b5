"""Every command the documentation shows names flags, subcommands and choices that exist (no attack is run).

The commands are the ``leakattack ...`` (or ``python -m leakattack ...``) and ``python scripts/NAME.py ...``,
``python benchmarks/NAME.py ...``, ``python examples/NAME.py ...`` lines of README.md and docs/**/*.md: in
fenced and indented code blocks (a ``\\`` continues a line, ``$L`` stands for an earlier ``L="leakattack ..."``)
and in inline code spans (which may run over a line break), after shell prefixes (``A=1``, ``/usr/bin/time -v``,
``timeout 600``, ``flock FILE``, ``nohup``...) and around pipes, ``&&`` and ``;``.

* ``leakattack`` commands are parsed by the command line's own parser (:func:`leakattack.cli.parser.build_parser`,
  the attacks' late flags included); an argparse error (unknown flag or subcommand, a value of the wrong type, a
  missing required argument) fails, and so does a value of a flag that takes one of a set of names (``--model``,
  ``--sketch``, ``--attack``, ``--protocol``, ``--query``...) that is none of them, or a sweep file or a
  ``file.py:Name`` model of the repository that does not exist.
* script commands: the file exists, and the documented arguments parse with the script's own argparse parser,
  captured (one interpreter for all scripts, each stopped at its first ``parse_args``) and rebuilt here; a file
  that parses no command line is never run, and takes no flags.
* an inline mention (`leakattack report`) and a command with ``...`` may leave out required arguments.

Placeholders stand for values: ``DIR``, ``N``, ``NAME=VALUE``, ``<...>``, a single letter are replaced by a
value the flag takes (its first choice, ``1`` for an integer...); ``...`` is dropped (or stands for a flag's
value); ``[a | b]`` is expanded into one command per alternative and ``[--flag X]`` is kept as given.  A command
that cannot be checked is skipped with its reason; at least :data:`FLOOR` of those found must be checked.
Besides, every ``--flag`` any code span or block names must be declared by some parser (or be another tool's).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: the share of the documented commands that must be checked (the others are skipped with a reason)
FLOOR = 0.8
#: fences whose lines are not shell commands
NOT_SHELL = {"python", "py", "toml", "bibtex", "json", "yaml", "text", "csv"}

#: wrappers a command may run under: name -> how many positional arguments of their own follow their options
WRAPPERS = {"time": 0, "/usr/bin/time": 0, "timeout": 1, "flock": 1, "nohup": 0, "nice": 0, "env": 0, "exec": 0,
            "srun": 0, "taskset": 1, "stdbuf": 0, "command": 0, "caffeinate": 0}
#: wrapper options that take a value as the next word
WRAPPER_VALUED = {"-n", "-s", "-k", "-c", "-w", "-E", "-o", "-p", "-t", "--signal", "--kill-after", "--timeout"}
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SCRIPT = re.compile(r"^(?:\./)?((?:scripts|benchmarks|examples)/[\w.-]+\.py)$")
#: a placeholder standing for a value: DIR, N, NAME=VALUE, NAME[:WEIGHT], <dir>, {a,b}, a single letter (--round t)
PLACEHOLDER = re.compile(r"^(?:<[^<>]+>|[A-Z][A-Z0-9_]*(?:[=:\[][A-Z0-9_\[\]:=.,]*)?|\{[^{}]*\}|[a-z])$")
#: an optional placeholder (``[PRIOR]``): dropped
OPTIONAL_PLACEHOLDER = re.compile(r"^\[[A-Z][A-Z0-9_ .]*\]$")
ELLIPSIS = {"...", "…"}
#: a subcommand placeholder (``leakattack <cmd> --help``): checked with every subcommand
SUBCOMMAND_PLACEHOLDER = re.compile(r"^(?:<[a-z _-]+>|CMD|COMMAND|SUBCOMMAND)$")


@dataclass
class Command:
    where: str  #: file:line
    text: str  #: the command as the page shows it (alternatives expanded)
    kind: str  #: "leakattack" or "script"
    argv: list[str]  #: the arguments after ``leakattack`` or after the script's path
    script: str = ""  #: scripts/NAME.py
    inline: bool = False  #: an inline code span, which may name a command without its required arguments
    skipped: str = ""  #: why it is not checked ("" when it is)
    substituted: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        """Shown without its required arguments: an inline mention (`leakattack report`), or ``...`` in it."""
        return self.inline or any(w in ELLIPSIS for w in self.argv)

    def __str__(self) -> str:
        return f"{self.where}: `{self.text}`"


# -- finding the commands ------------------------------------------------------------------------------------------
#: an inline code span (it may run over a line break within its paragraph)
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _spans(block: list[tuple[int, str]]):
    """(line number, text, True) of each inline code span of a paragraph's (number, line) pairs."""
    text = "\n".join(line for _, line in block)
    for m in SPAN.finditer(text):
        yield block[text.count("\n", 0, m.start())][0], " ".join(m.group(2).split()), True


def _texts(path: Path):
    """(line number, text, inline) of each logical shell line in fenced (or indented) code blocks and each inline
    code span outside them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fence, lang, held, start, paragraph, indented = None, "", "", 0, [], False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence is None:
            m = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            indented = bool(stripped) and re.match(r"^(?: {4}|\t)", line) is not None and (
                indented or number == 1 or not lines[number - 2].strip())  # an indented code block's line
            if m or not stripped or indented:
                yield from _spans(paragraph)
                paragraph = []
            if m:
                fence, lang = m.group(1), m.group(2).lower()
            elif indented:
                yield number, stripped, False
            elif stripped:
                paragraph.append((number, line))
            continue
        if stripped.startswith(fence) and stripped.strip("`~") == "":
            if held:
                yield start, held, False
            fence, held = None, ""
            continue
        if lang in NOT_SHELL:
            continue
        if not held:
            start = number
        if stripped.endswith("\\"):
            held += stripped[:-1] + " "
            continue
        yield start, held + stripped, False
        held = ""
    yield from _spans(paragraph)


def _alternatives(text: str) -> list[str]:
    """``text`` once per alternative of its ``[a | b]`` groups; ``[--flag X]`` loses its brackets."""
    m = re.search(r"\[([^\[\]]*\s\|\s[^\[\]]*)\]", text)
    if m:
        return [t for alt in m.group(1).split("|")
                for t in _alternatives(text[:m.start()] + alt.strip() + text[m.end():])]
    return [re.sub(r"(?<!\S)\[(-[^\[\]]*)\](?!\S)", r"\1", text)]


def _words(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars="|&;")
    lex.whitespace_split, lex.commenters = True, "#"
    return list(lex)


def _segments(text: str):
    """(separator before it, words) of each simple command of a shell line: split at unquoted ``|``, ``||``,
    ``&&``, ``;``; comments and redirections dropped.  None when the line does not tokenize (an unclosed quote)."""
    text = re.sub(r"(?:^|(?<=\s))\d?>>?&?\s*\S+", " ", text)  # > file, 2>&1, >> log
    try:
        tokens = _words(text)
    except ValueError:
        try:  # printed output that quotes a command: `leakattack run ... --restarts 8: 6.91 s, the command's wall`
            tokens = _words(text.split(": ", 1)[0]) if ": " in text else None
        except ValueError:
            tokens = None
    if tokens is None:
        return None
    segments, current, after = [], [], ""
    for token in tokens:
        if token and set(token) <= set("|&;"):
            segments.append((after, current))
            current, after = [], token
        else:
            current.append(token)
    return [(sep, words) for sep, words in segments + [(after, current)] if words]


def _strip_prefixes(words: list[str]) -> list[str]:
    """The words from the command on: environment assignments, a ``$`` prompt and wrappers removed."""
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("$", ">") or ENV.match(word):
            i += 1
        elif word in WRAPPERS:
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in WRAPPER_VALUED else 1
            i += WRAPPERS[word]
        elif word in ("uv", "poetry", "pipx") and i + 1 < len(words) and words[i + 1] == "run":
            i += 2
        else:
            break
    return words[i:]


def _command(words: list[str]):
    """(kind, script, argv) of a simple command, or None when it is no leakattack or script command."""
    words = _strip_prefixes(words)
    if not words:
        return None
    colon = next((i for i, w in enumerate(words) if w.endswith(":") and len(w) > 1), None)
    if colon is not None:  # printed output after the command: `... --restarts 8: 6.91 s against 5.30 s`
        words = words[:colon] + [words[colon][:-1]]
    head = words[0]
    if head == "leakattack" or head.endswith("/bin/leakattack"):
        return "leakattack", "", words[1:]
    if re.match(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$", head) and len(words) > 1:
        if words[1] == "-m" and len(words) > 2 and words[2] in ("leakattack", "leakattack.cli"):
            return "leakattack", "", words[3:]
        m = SCRIPT.match(words[1])
        if m:
            return "script", m.group(1), words[2:]
    m = SCRIPT.match(head)
    if m:
        return "script", m.group(1), words[1:]
    return None


def _expand(words: list[str], variables: dict[str, list[str]]) -> list[str]:
    """``words`` with ``$NAME`` / ``${NAME}`` replaced by the words assigned to NAME on an earlier line (which
    records an assignment ``NAME="..."`` standing alone)."""
    if len(words) == 1 and ENV.match(words[0]):
        name, _, value = words[0].partition("=")
        variables[name] = value.split()
    return [v for w in words for v in (variables.get(w[1:].strip("{}"), [w]) if w.startswith("$") else [w])]


def _why_skipped(kind: str, argv: list[str], page: str) -> str:
    """Why a command cannot be checked here ("" when it can)."""
    if kind == "leakattack" and "--attack" in argv[:-1]:
        name = argv[argv.index("--attack") + 1]
        if re.search(rf"register_attack\(\s*[\"']{re.escape(name)}[\"']", page):
            return f"attack {name!r} is registered by the page's own example code (tests/test_doc_examples.py runs it)"
    return ""


def commands_in(path: Path) -> list[Command]:
    """The leakattack and script commands a Markdown page shows, in its order, each once per line."""
    found: list[Command] = []
    seen = set()
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    page = path.read_text(encoding="utf-8")
    variables: dict[str, list[str]] = {}  # L="leakattack train ..." then $L --protocol ...
    for number, text, inline in _texts(path):
        if not re.search(r"leakattack|scripts/|benchmarks/|examples/", text) and not (variables and "$" in text):
            continue
        for alt in _alternatives(text):
            segments = _segments(alt)
            if segments is None:
                m = re.search(r"(?:^|\s)(?:python\S* )?(leakattack|(?:scripts|benchmarks|examples)/\S+\.py)\b", alt)
                if m:
                    kind, script = ("leakattack", "") if m.group(1) == "leakattack" else ("script", m.group(1))
                    found.append(Command(f"{rel}:{number}", alt, kind, [], script, inline,
                                         skipped="it does not split into shell words (an unclosed quote)"))
                continue
            first = bool(segments) and _command(segments[0][1]) is not None
            segments = [(sep, _expand(words, variables)) for sep, words in segments]
            for sep, words in segments:
                cmd = _command(words)
                # a `|` that follows no command separates columns of printed output, not piped commands
                if cmd is None or (sep == "|" and not first):
                    continue
                kind, script, argv = cmd
                if kind == "leakattack" and not argv:
                    continue  # the bare name: the package, not a command
                shown = shlex.join(words) if len(segments) > 1 else alt
                key = (number, kind, script, tuple(argv))
                if key not in seen:
                    seen.add(key)
                    found.append(Command(f"{rel}:{number}", shown, kind, argv, script, inline,
                                         skipped=_why_skipped(kind, argv, page)))
    return found


def documented_commands() -> list[Command]:
    return [cmd for path in DOCS for cmd in commands_in(path)]


# -- placeholders --------------------------------------------------------------------------------------------------
def _action_of(parser: argparse.ArgumentParser, word: str):
    option = word.split("=", 1)[0]
    action = parser._option_string_actions.get(option)
    if action is None and option.startswith("--"):  # an unambiguous prefix, as argparse allows it
        hits = [a for o, a in parser._option_string_actions.items() if o.startswith(option)]
        action = hits[0] if len({id(a) for a in hits}) == 1 else None
    return action


def _stand_in(action) -> str:
    """A value ``action`` accepts in place of a placeholder."""
    if action is None:
        return "x"
    if action.choices:
        return str(next(iter(action.choices)))
    kind = getattr(action.type, "__name__", "")
    if kind in ("int", "threads_value"):  # int, or leakattack.constraints.read_int, which takes its name
        return "1"
    if kind == "float":
        return "0.5"
    if kind == "parse_pair":
        return "name=1"
    return "x"


def substitute(parser: argparse.ArgumentParser, argv: list[str], cmd: Command) -> list[str]:
    """``argv`` with each placeholder replaced by a value its flag (or the positional) accepts."""
    out = []
    for i, word in enumerate(argv):
        before = _action_of(parser, argv[i - 1]) if i and argv[i - 1].startswith("-") else None
        takes = before is not None and before.nargs != 0 and "=" not in argv[i - 1]
        if (word in ELLIPSIS and not takes) or OPTIONAL_PLACEHOLDER.match(word):
            cmd.substituted.append(word)
            continue
        if word.startswith("--") and "=" in word:
            option, value = word.split("=", 1)
            if PLACEHOLDER.match(value):
                cmd.substituted.append(word)
                word = f"{option}={_stand_in(_action_of(parser, option))}"
            out.append(word)
            continue
        if (PLACEHOLDER.match(word) or word in ELLIPSIS) and not word.startswith("-"):
            cmd.substituted.append(word)
            word = _stand_in(before if takes else None)
        out.append(word)
    if cmd.partial and out and out[-1].startswith("-") and "=" not in out[-1]:
        last = _action_of(parser, out[-1])  # `--model` named in a sentence: the flag, without its value
        if last is not None and last.nargs != 0:
            cmd.substituted.append(f"{out[-1]} (no value)")
            out.append(_stand_in(last))
    return out


def relax(parser: argparse.ArgumentParser) -> None:
    """Nothing in ``parser`` is required any more (a partial command: an inline mention, or one with ``...``)."""
    for action in parser._actions:
        if action.option_strings:
            action.required = False
        elif action.nargs is None:
            action.nargs = "?"
        elif action.nargs == "+":
            action.nargs = "*"


# -- leakattack commands -------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _choice_flags():
    """command -> option -> (label, is it accepted, the names) for the flags of run (the attacks' own included),
    train and check that take one of a set of names."""
    from leakattack.config import names
    from leakattack.config.params import PROTOCOL_PARAMS, RUN_PARAMS
    from leakattack.constraints import Choice, DeviceName, ModelName, Optional

    def check(c):
        shown = set(map(str, c.shown))
        if isinstance(c, ModelName):
            return lambda v: v in shown or (":" in v and all(v.split(":", 1)))
        if isinstance(c, DeviceName):
            return lambda v: v in shown or bool(re.fullmatch(r"cuda:\d+", v))
        return lambda v: v in shown or (c.allow_empty and v == "")

    from leakattack import attacks

    options = [p for name in attacks.list_attacks() for p in attacks.attack_class(name).options]
    run = {}
    for p in (*RUN_PARAMS, *PROTOCOL_PARAMS, *options):
        c = p.constraint.inner if isinstance(p.constraint, Optional) else p.constraint
        if p.option and isinstance(c, Choice):
            run[p.option] = (p.label, check(c), sorted(map(str, c.shown)))
    protocols = sorted(names.PROTOCOLS.shown)
    train = {o: run[o] for o in ("--sketch", "--dataset") if o in run}
    train.update({o: v for o, v in run.items() if any(o == p.option for p in PROTOCOL_PARAMS)})
    train["--model"] = run["--model"]
    train["--protocol"] = ("protocol", lambda v: v in protocols, protocols)
    check_targets = sorted(names.CHECK_TARGETS)
    return {"run": run, "train": train,
            "check": {"--model": ("model", lambda v: v in check_targets, check_targets),
                      "--sketch": run["--sketch"]}}


def _given_values(argv: list[str]):
    """(option, value) of each ``--flag value`` / ``--flag=value`` in ``argv`` (a value may not start with -)."""
    for i, word in enumerate(argv):
        if word.startswith("--") and "=" in word:
            yield tuple(word.split("=", 1))
        elif word.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            yield word, argv[i + 1]


def check_leakattack(cmd: Command) -> str | None:
    """None when ``cmd`` parses, else what is wrong (one line)."""
    from leakattack.cli.parser import UsageError, build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    argv = list(cmd.argv)
    index = next((i for i, w in enumerate(argv) if not w.startswith("-")), None)
    if index is not None and SUBCOMMAND_PLACEHOLDER.match(argv[index]):
        for name in subparsers.choices:
            each = Command(cmd.where, cmd.text, cmd.kind, argv[:index] + [name] + argv[index + 1:],
                           inline=cmd.inline)
            wrong = check_leakattack(each)
            if wrong:
                return f"with {name}: {wrong}"
        cmd.substituted.append(argv[index])
        return None
    sub = subparsers.choices.get(argv[index]) if index is not None else None
    if sub is not None:
        sub._add_late_flags()  # the attacks' own flags, for the placeholders' stand-ins
        if cmd.partial:
            relax(sub)
        argv = argv[:index + 1] + substitute(sub, argv[index + 1:], cmd)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            parsed = parser.parse_args(argv)
    except UsageError as e:
        return f"argparse: {e}"
    except SystemExit as e:  # --help, --version
        if e.code not in (0, None):
            return f"exit {e.code}: {err.getvalue().strip()[-300:]}"
        return None
    if sub is None:
        return None
    flags = _choice_flags().get(argv[index], {})
    for option, value in _given_values(cmd.argv[index + 1:]):
        action = _action_of(sub, option)
        name = action.option_strings[-1] if action is not None and action.option_strings else option
        if name in flags and not PLACEHOLDER.match(value) and value not in ELLIPSIS:
            label, ok, shown = flags[name]
            if not ok(value):
                return f"{name} {value}: no {label} of that name (one of {', '.join(shown)})"
    # the files of the repository a command names: a sweep file, a model class's file.py
    files = [getattr(parsed, "config", None) if argv[index] == "sweep" else None,
             str(getattr(parsed, "model", None) or "").partition(".py:")[0] + ".py"
             if ".py:" in str(getattr(parsed, "model", None) or "") else None]
    missing = [f for f in files if f and f in " ".join(cmd.argv) and not Path(f).is_absolute()
               and not f.startswith("path/") and not (ROOT / f).is_file()]
    return f"{missing[0]} does not exist" if missing else None


# -- script commands -----------------------------------------------------------------------------------------------
#: runs each script as __main__ until its first parse_args/parse_known_args and prints its parser's arguments
CAPTURE = r"""
import argparse, contextlib, io, json, runpy, sys
class Captured(BaseException):
    pass
def stop(self, args=None, namespace=None):
    raise Captured(self)
argparse.ArgumentParser.parse_known_args = stop
def describe(parser):
    out = []
    for a in parser._actions:
        kind = type(a).__name__
        out.append({"options": list(a.option_strings), "dest": a.dest, "kind": kind,
                    "nargs": a.nargs if not isinstance(a.nargs, str) or a.nargs in "?*+" else str(a.nargs),
                    "type": getattr(a.type, "__name__", None), "required": a.required,
                    "choices": [str(c) for c in a.choices] if a.choices and kind != "_SubParsersAction" else None})
    return out
found = {}
for path in sys.argv[1:]:
    folder = path.rsplit("/", 1)[0]
    sys.path.insert(0, folder)
    sys.argv = [path, "--help"]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_path(path, run_name="__main__")
        found[path] = "it never parses its arguments with argparse"
    except Captured as c:
        found[path] = describe(c.args[0])
    except SystemExit as e:
        found[path] = f"it exited ({e.code}) before parsing its arguments"
    except BaseException as e:
        found[path] = f"it raised {e!r} before parsing its arguments"
    finally:
        sys.path.remove(folder)
sys.stdout.write(json.dumps(found))
"""

KINDS = {"_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false", "_StoreConstAction": "store_const",
         "_AppendAction": "append", "_AppendConstAction": "append_const", "_CountAction": "count",
         "_ExtendAction": "extend", "BooleanOptionalAction": argparse.BooleanOptionalAction, "_StoreAction": "store"}
TYPES = {"int": int, "float": float}


def parses_arguments(script: str) -> bool:
    """Whether ``script`` (or a module of its own folder that it imports) parses a command line with argparse;
    one that does not is never run here (it would do its work)."""
    path = ROOT / script
    source = path.read_text(encoding="utf-8")
    own = [path.parent / f"{m}.py" for m in re.findall(r"^(?:from|import) (\w+)", source, re.M)]
    return any("parse_args" in text or "parse_known_args" in text
               for text in [source, *(p.read_text(encoding="utf-8") for p in own if p.is_file())])


@lru_cache(maxsize=None)
def script_arguments(scripts: tuple[str, ...]) -> dict:
    """script -> the arguments its parser declares, or the sentence why there are none."""
    found = {s: "it parses no command line" for s in scripts if not parses_arguments(s)}
    run = [s for s in scripts if s not in found]
    if run:
        with tempfile.TemporaryDirectory() as empty:  # a script that wrote a file before parsing would write it there
            done = subprocess.run([sys.executable, "-c", CAPTURE, *(str(ROOT / s) for s in run)], cwd=empty,
                                  capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        found.update(zip(run, json.loads(done.stdout).values()))
    return found


class _Raising(argparse.ArgumentParser):
    def error(self, message):  # a missing required argument too, which argparse < 3.12 exits on
        raise argparse.ArgumentError(None, message)


def script_parser(described: list[dict], script: str) -> argparse.ArgumentParser:
    """A parser that declares the ``described`` arguments as the script's does (types other than int and float
    taken as text)."""
    parser = _Raising(prog=script, add_help=False, exit_on_error=False)
    for a in described:
        if a["kind"] in ("_HelpAction", "_VersionAction"):
            parser.add_argument(*a["options"], action="help" if a["kind"] == "_HelpAction" else "version")
            continue
        kind = KINDS.get(a["kind"], "store")
        kwargs = {"action": kind}
        if kind in ("store_const", "append_const"):
            kwargs["const"] = None
        if kind in ("store", "append", "extend"):
            kwargs.update(nargs=a["nargs"], type=TYPES.get(a["type"]), choices=a["choices"])
        if a["options"]:
            parser.add_argument(*a["options"], dest=a["dest"], required=a["required"], **kwargs)
        else:
            parser.add_argument(a["dest"], **kwargs)
    return parser


def check_script(cmd: Command, described) -> str | None:
    """None when ``cmd`` parses, else what is wrong (one line)."""
    if not (ROOT / cmd.script).is_file():
        return f"{cmd.script} does not exist"
    if isinstance(described, str):
        flags = [w for w in cmd.argv if w.startswith("-") and w not in ("-h", "--help")]
        return f"{cmd.script} takes no flags ({described}) but is given {flags}" if flags else None
    parser = script_parser(described, cmd.script)
    argv = substitute(parser, cmd.argv, cmd)
    if cmd.partial or "-h" in argv or "--help" in argv:
        relax(parser)
        argv = [w for w in argv if w not in ("-h", "--help")]  # the other flags must still exist
    try:
        _, rest = parser.parse_known_args(argv)
    except argparse.ArgumentError as e:
        return f"argparse: {e}"
    if rest:
        return f"argparse: unrecognized arguments: {' '.join(rest)}"
    return None


#: what the capture says of a script whose imports need a package this environment lacks (flwr, breaching...)
MISSING_MODULE = "it raised ModuleNotFoundError"


def all_scripts(commands=()) -> tuple[str, ...]:
    """The Python files of scripts/, benchmarks/ and examples/ (and any other that ``commands`` run)."""
    files = {str(p.relative_to(ROOT)) for folder in ("scripts", "benchmarks", "examples")
             for p in (ROOT / folder).glob("*.py") if not p.name.startswith("_")}
    return tuple(sorted(files | {c.script for c in commands if c.kind == "script" and (ROOT / c.script).is_file()}))


# -- the tests -----------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def checked() -> tuple[list[Command], list[str]]:
    """The documented commands (each with its reason when skipped) and the failures."""
    commands = documented_commands()
    failures = []
    described = script_arguments(all_scripts(commands))
    for cmd in commands:
        if cmd.kind == "script" and str(described.get(cmd.script)).startswith(MISSING_MODULE):
            cmd.skipped = f"{cmd.script} does not start here: {described[cmd.script]}"
        if cmd.skipped:
            continue
        wrong = check_leakattack(cmd) if cmd.kind == "leakattack" else check_script(cmd, described.get(cmd.script))
        if wrong:
            failures.append(f"{cmd}\n    {wrong}")
    return commands, failures


def test_documented_commands_are_found():
    commands, _ = checked()
    kinds = {c.kind for c in commands}
    assert kinds == {"leakattack", "script"}, kinds
    texts = {" ".join(c.argv[:1]) for c in commands if c.kind == "leakattack"}
    assert {"run", "sweep", "train", "check", "list", "report", "collect"} <= texts, texts
    assert len(commands) >= 100, f"only {len(commands)} documented commands were found"


def test_documented_commands_parse():
    commands, failures = checked()
    skipped = [c for c in commands if c.skipped]
    summary = (f"{len(commands)} documented commands: {len(commands) - len(skipped)} checked "
               f"({sum(1 for c in commands if c.substituted)} with placeholders replaced), {len(skipped)} skipped"
               + "".join(f"\n  skipped {c}: {c.skipped}" for c in skipped))
    print(summary)
    assert len(commands) - len(skipped) >= FLOOR * len(commands), f"too few commands were checked: {summary}"
    assert not failures, f"{len(failures)} documented commands do not parse:\n" + "\n".join(failures)


#: flags of other tools the pages show (pip, mkdocs, sbatch), and of the page's own example attack (extending.md)
OTHER_FLAGS = {"--index-url", "--no-deps", "--strict", "--test-only", "--grey-level"}


def test_every_flag_the_docs_name_is_declared():
    # a flag in any code span or block, commands or not (`--restart-model resnet18` after a command in prose),
    # is a flag of leakattack, of one of its subcommands, or of a script, benchmark or example
    from leakattack.cli.parser import build_parser

    parser = build_parser()
    declared = set(parser._option_string_actions) | set(OTHER_FLAGS)
    for sub in next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices.values():
        sub._add_late_flags()
        declared |= set(sub._option_string_actions)
    for script, described in script_arguments(all_scripts()).items():
        if isinstance(described, list):
            declared |= {o for a in described for o in a["options"]}
        else:  # one that does not start here (an optional package missing): the flags its source declares
            declared |= set(re.findall(r"add_argument\(\s*[\"'](-[\w-]+)[\"']", (ROOT / script).read_text("utf-8")))
    unknown, named = [], 0
    for path in DOCS:
        for number, text, _ in _texts(path):
            for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", text):
                named += 1
                if flag not in declared:
                    unknown.append(f"{path.relative_to(ROOT)}:{number}: {flag} in `{text}`")
    assert named > 500, f"only {named} flags were found in the pages"
    assert not unknown, "flags no parser declares:\n" + "\n".join(unknown)


PAGE = """\
Run `leakattack run --model lenet --sketch srht` or, in prose, `leakattack
report` (an inline mention may leave out what is required).

```bash
/usr/bin/time -v timeout 600 flock /tmp/x OMP_NUM_THREADS=1 leakattack run --model M \\
    --iterations N --no-such-flag 3 | tee log && leakattack list  # a comment
leakattack run --sketch nosuch [--restarts 2 | --dtype float32]
python -m leakattack train --protocol nosuch --out DIR
leakattack nosuch
leakattack report
leakattack run --attack imprint --query nosuch --model examples/no_such_file.py:Net
leakattack sweep examples/no_such_sweep.toml --jobs 2
python scripts/rgap_margins.py --images 3 --no-such-flag
python benchmarks/no_such_benchmark.py
```

```
start-up  import torch 2.05 s | leakattack run --iterations 1   3.47 s
```

    L="leakattack run --model lenet"
    $L --sketch srht
"""


def test_the_check_finds_and_refuses_stale_commands(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    commands = commands_in(page)
    described = script_arguments(("scripts/rgap_margins.py",))
    found = [(int(c.where.rsplit(":", 1)[1]), " ".join(c.argv) if c.kind == "leakattack" else c.script,
              check_leakattack(c) if c.kind == "leakattack" else check_script(c, described.get(c.script)))
             for c in commands]
    expected = [
        (1, "run --model lenet --sketch srht", None),
        (1, "report", None),  # an inline mention, over a line break: its required arguments may be left out
        (5, "run --model M --iterations N --no-such-flag 3", "unrecognized arguments: --no-such-flag 3"),
        (5, "list", None),
        (7, "run --sketch nosuch --restarts 2", "--sketch nosuch: no sketch of that name"),
        (7, "run --sketch nosuch --dtype float32", "--sketch nosuch: no sketch of that name"),
        (8, "train --protocol nosuch --out DIR", "--protocol nosuch: no protocol of that name"),
        (9, "nosuch", "invalid choice: 'nosuch'"),
        (10, "report", "the following arguments are required"),  # in a block a command is whole
        (11, "run --attack imprint --query nosuch --model examples/no_such_file.py:Net", "--query nosuch"),
        (12, "sweep examples/no_such_sweep.toml --jobs 2", "examples/no_such_sweep.toml does not exist"),
        (13, "scripts/rgap_margins.py", "unrecognized arguments: --no-such-flag"),
        (14, "benchmarks/no_such_benchmark.py", "benchmarks/no_such_benchmark.py does not exist"),
        (22, "run --model lenet --sketch srht", None),  # an indented block, through a shell variable
    ]
    assert [(n, text) for n, text, _ in found] == [(n, text) for n, text, _ in expected]
    for (n, text, wrong), (_, _, want) in zip(found, expected):
        assert (wrong is None) if want is None else (wrong is not None and want in wrong), (n, text, wrong)
    assert commands[2].substituted == ["M", "N"] and commands[6].substituted == ["DIR"]
    model = Command("x:1", "", "leakattack", ["run", "--model", "examples/no_such_file.py:Net"])
    assert check_leakattack(model) == "examples/no_such_file.py does not exist"
