"""A 64 MiB tensor through the three-step identity ensemble against one direct call.

    python bench/ensemble.py [--seconds 3] [--mib 64]

bench/ensemble_models: `identity3` (identity_step three times in a row) against
`identity_step` itself, through the backend on the parent's event loop (manager.infer),
outputs viewed, not copied, at the end. The tensor is copied once into shared memory and
then handed from step to step as it is, so the ensemble should cost about what one call
costs. Prints both times and the ratio. Nothing is asserted. Against the real Triton:
`python3 ../shared/perf/vs.py --repo bench/ensemble_models --model identity3 --rows identity`
(the 16 MiB rows; docs/performance.md has a run).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bls import measure  # noqa: E402  (bench/bls.py: the same timing, other models)

REPO = Path(__file__).resolve().parent / "ensemble_models"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    direct, ensemble = run(measure(REPO, args.seconds, args.mib,
                                   ("identity_step", "identity3")))
    print(f"one call (identity_step)            {direct * 1e3:8.2f} ms")
    print(f"three-step ensemble (identity3)     {ensemble * 1e3:8.2f} ms")
    print(f"ensemble / call = {ensemble / direct:.2f}x")


if __name__ == "__main__":
    main()
