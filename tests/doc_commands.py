"""The commands and code snippets of README.md and docs/*.md, from their fenced blocks
(tests/e2e/test_docs_commands.py runs them).

A block tagged bash/sh/shell/console holds shell commands: every line is one (a trailing
backslash continues it; `&&`, `||`, `;` and `|` separate commands; `#` starts a comment).
In a block of another kind (none, text), a line is a command when it starts with a known
program and a flag (`pbserve --model-repository ...`; a table row `pbserve  16  0.62` is
not). A python block is a snippet, whole."""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "zsh"})
PYTHON_LANGUAGES = frozenset({"python", "py", "python3", "pycon"})
# programs whose lines are commands in a block that is not tagged as shell
PROGRAMS = ("pbserve", "python", "python3", "curl", "nats-server", "pip", "conda", "bash")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+.-]*)")  # (indented too: in a list)


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # its first line of content (1-based)
    language: str
    text: str


@dataclass(frozen=True)
class Command:
    path: str
    line: int
    block: int  # the first line of its block: a block's commands run together
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    @property
    def program(self) -> str:
        """The command's program, past any `VAR=value` before it."""
        return next((word for word in self.argv if not _ASSIGNMENT.match(word)), "")

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line} {self.text}"


@dataclass(frozen=True)
class Snippet:
    path: str
    line: int
    code: str

    @property
    def key(self) -> str:
        """Its first line of code: how the list of snippets not run names it."""
        return next(line.strip() for line in self.code.splitlines() if line.strip())

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line} {self.key}"


def doc_files(root: Path) -> list[Path]:
    """README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def fenced_blocks(path: Path, root: Path) -> list[Block]:
    """Every fenced block of a markdown file, with its language tag ('' if none)."""
    blocks: list[Block] = []
    fence, language, start, body = "", "", 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _FENCE.match(line)
        if not fence and match:
            fence, language, start, body = match.group(1), match.group(2).lower(), number + 1, []
        elif fence and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            blocks.append(Block(str(path.relative_to(root)), start, language,
                                textwrap.dedent("\n".join(body))))
            fence = ""
        elif fence:
            body.append(line)
    return blocks


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(offset of its first line, the line) with backslash continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    first = 0
    for offset, line in enumerate(text.splitlines()):
        if not pending:
            first = offset
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        lines.append((first, " ".join([*pending, line]).strip()))
        pending = []
    if pending:
        lines.append((first, " ".join(pending).strip()))
    return [(offset, line) for offset, line in lines if line]


def split_commands(line: str) -> list[list[str]]:
    """A shell line's commands (words unquoted, comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in _SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _is_command(words: list[str], shell: bool) -> bool:
    if shell:
        return True
    return len(words) > 1 and words[0] in PROGRAMS and words[1].startswith("-")


def extract(root: Path) -> tuple[list[Command], list[Snippet]]:
    """The documented commands and python snippets, in the files' order."""
    commands: list[Command] = []
    snippets: list[Snippet] = []
    for path in doc_files(root):
        for block in fenced_blocks(path, root):
            if block.language in PYTHON_LANGUAGES:
                snippets.append(Snippet(block.path, block.line, block.text))
                continue
            shell = block.language in SHELL_LANGUAGES
            for offset, line in logical_lines(block.text):
                if not shell and line.split()[0] not in PROGRAMS:
                    continue  # (a table or a config: not shell, never split)
                for words in split_commands(line):
                    if _is_command(words, shell):
                        commands.append(Command(block.path, block.line + offset, block.line,
                                                tuple(words)))
    return commands, snippets
