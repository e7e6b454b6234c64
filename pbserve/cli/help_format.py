"""How `pbserve --help` and a wrong flag read.

Each flag's help ends with its default, unless it has none (None, empty) or hides it
(`hide_default`: a secret taken from the environment). A flag that does not parse prints
a one-line usage, then the error, last (argparse would print every flag's usage first).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import NoReturn

# Placeholders for a value, by type (argparse's default is the flag's name in capitals).
_METAVARS = {int: "<integer>", float: "<float>"}


def hide_default(action: argparse.Action) -> argparse.Action:
    """`action`, whose default --help must not show."""
    action.hide_default = True  # type: ignore[attr-defined]
    return action


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's, with the defaults worth showing and tritonserver's placeholders."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if getattr(action, "hide_default", False) or default is None or default == [] \
                or default == "":
            return action.help
        return super()._get_help_string(action)

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        return _METAVARS.get(action.type, "<string>")  # type: ignore[arg-type]

    # Lines break between words, never within a flag's name.
    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are short: `usage: PROG [options]`, a pointer to
    --help, and the error as the last line (status 2)."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description, usage="%(prog)s [options]",
                         formatter_class=HelpFormatter)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"usage: {self.prog} [options] (see {self.prog} --help)\n"
                     f"{self.prog}: error: {message}\n")
