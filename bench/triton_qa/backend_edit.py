"""The cp / sed / echo steps of the L0 test.sh scripts, on generated model folders."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

CPU_GROUP = "instance_group [ { kind: KIND_CPU }]"


def copy(src: Path, repo: Path, name: str = "") -> Path:
    """`cp -r src repo/<name>`; the new folder."""
    dest = repo / (name or src.name)
    repo.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest)
    return dest


def copy_all(srcs: list[Path], repo: Path) -> list[Path]:
    return [copy(src, repo) for src in srcs]


def sed(model: Path, pattern: str, replacement: str) -> None:
    """`sed -i "s/pattern/replacement/" config.pbtxt`: the first match on each line."""
    config = model / "config.pbtxt"
    lines = config.read_text().split("\n")
    config.write_text("\n".join(re.sub(pattern, replacement, line, count=1) for line in lines))


def sed_text(model: Path, pattern: str, replacement: str) -> None:
    """A sed joining lines (`$!N`): the first match in the whole file."""
    config = model / "config.pbtxt"
    config.write_text(re.sub(pattern, replacement, config.read_text(), count=1))


def append(model: Path, text: str) -> None:
    """`echo text >> config.pbtxt`."""
    with (model / "config.pbtxt").open("a") as f:
        f.write(text + "\n")


def rename(model: Path, old: str, new: str) -> None:
    """`sed -i 's/old/new/' config.pbtxt` as the scripts rename a copied model."""
    sed(model, re.escape(old), new)
