"""Build a case's model repository in a folder, as the L0 test.sh scripts do with cp/sed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from spec import Model


def build(models: tuple[Model, ...], roots: dict[str, Path], checkout: str,
          into: Path) -> None:
    """Copy each model from its checkout into `into/<name>/` (version folder 1)."""
    for model in models:
        src = roots[model.checkout or checkout] / model.src
        dest = into / model.folder
        (dest / "1").mkdir(parents=True, exist_ok=True)
        if model.model is not None:
            shutil.copy(src / model.model, dest / "1" / model.model_file)
        for extra in model.extra:
            shutil.copy(src / extra, dest / "1" / Path(extra).name)
        if model.config is not None:
            text = (src / model.config).read_text()
            (dest / "config.pbtxt").write_text(_edit(text, model))


def _edit(text: str, model: Model) -> str:
    lines = text.splitlines()
    for pattern, replacement in model.subs:
        lines = [re.sub(pattern, replacement, line) for line in lines]
    return "\n".join([*lines, *model.append]) + "\n"


def renamed(name: str) -> tuple[str, str]:
    """The `sed -i "s/^name:.*/name: \\"<name>\\"/"` edit."""
    return (r"^name:.*", f'name: "{name}"')
