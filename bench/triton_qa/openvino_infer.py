"""Triton's OpenVINO QA models (qa/common/gen_qa_models.py --openvino) served by pbserve and
checked with Triton's own client helper (qa/common/infer_util.py infer_exact), as L0_infer
sets them up; prints one row per model version and a summary line.

    python bench/triton_qa/openvino_infer.py --server-repo /tmp/triton-server [--out FILE]

The checkout is only read: qa/common is copied into a temporary folder. Its generator
imports `openvino.runtime` (removed in openvino 2025.x): a sitecustomize in the work
folder maps it to `openvino` (and `serialize` to `save_model`); the script itself runs
unmodified. L0_infer's infer_test.py has no OpenVINO case of its own (openvino is in its
BACKENDS list only), so what L0_infer asks of these models is that they load; the rows
below also infer through each of them as infer_test.py's helper does for the other
backends, with the batch size the model takes (8, its fixed batch dimension; 1 without
batching), over HTTP, gRPC and gRPC streaming.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server import Server, pick_host  # noqa: E402

SHIM = """import sys
import openvino
sys.modules.setdefault("openvino.runtime", openvino)
if not hasattr(openvino, "serialize"):
    openvino.serialize = lambda model, xml, bin=None: openvino.save_model(model, xml)
"""

# one unittest per loaded model version, run where qa/common's helpers import
CLIENT = '''
import os, sys, unittest
import numpy as np
import infer_util as iu
import test_util as tu

MODELS = {models!r}  # name -> (loaded version, batching, dtypes)


class OpenVINOInfer(tu.TestResultCollector):
    pass


def make(name, version, batching, dtypes):
    def test(self):
        batch = 8 if batching else 1
        shape = (batch, 16) if batching else (16,)
        iu.infer_exact(self, "openvino" if batching else "openvino_nobatch", shape, batch,
                       *dtypes, model_version=version, swap=version != 1,
                       use_http=True, use_grpc=True, use_streaming=True,
                       skip_request_id_check=True)
    return test


for name, (version, batching, dtypes) in MODELS.items():
    setattr(OpenVINOInfer, f"test_{{name}}_v{{version}}", make(name, version, batching,
            [np.dtype(d).type for d in dtypes]))

if __name__ == "__main__":
    unittest.main(verbosity=2)
'''


def generate(work: Path, common: Path) -> Path:
    """Triton's generator, unmodified, into work/models; L0_infer's instance group."""
    (work / "shim").mkdir()
    (work / "shim" / "sitecustomize.py").write_text(SHIM)
    models = work / "models"
    env = dict(os.environ, PYTHONPATH=f"{work / 'shim'}:{common}")
    subprocess.run([sys.executable, "gen_qa_models.py", "--openvino", "--models_dir",
                    str(models)], cwd=common, env=env, check=True, capture_output=True)
    for config in models.glob("*/config.pbtxt"):  # as L0_infer/test.sh does for openvino
        with config.open("a") as f:
            f.write("\ninstance_group [ { kind: KIND_CPU }]\n")
    return models


def loaded_versions(models: Path) -> dict[str, tuple[int, bool, list[str]]]:
    """Each model's highest version (version_policy latest 1: the one served), whether it
    batches, and its (input, output0, output1) dtypes from its name."""
    found = {}
    for folder in sorted(p for p in models.iterdir() if p.is_dir()):
        versions = sorted(int(v.name) for v in folder.iterdir() if v.name.isdigit())
        batching = not folder.name.startswith("openvino_nobatch_")
        found[folder.name] = (versions[-1], batching, folder.name.split("_")[-3:])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-repo", type=Path, required=True)
    parser.add_argument("--out", type=Path, help="also write the output to this file")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="triton-qa-openvino-"))
    try:
        common = work / "common"
        shutil.copytree(args.server_repo / "qa" / "common", common)
        models = generate(work, common)
        versions = loaded_versions(models)
        (common / "openvino_infer_test.py").write_text(CLIENT.format(models=versions))
        host = pick_host()
        if host is None:
            print("ports 8000-8002 are taken on every loopback address")
            return 1
        server = Server(models, host, work / "server.log")
        try:
            if not server.wait("/v2/health/ready", 120):
                print("server not ready:\n" + server.log_text()[-3000:])
                return 1
            env = dict(os.environ, TRITONSERVER_IPADDR=host, TEST_JETSON="1")
            result = subprocess.run([sys.executable, "openvino_infer_test.py"], cwd=common,
                                    env=env, capture_output=True, text=True, timeout=600)
        finally:
            server.stop()
        text = (f"{len(versions)} models loaded: {', '.join(versions)}\n"
                + result.stderr[-6000:])
        print(text)
        if args.out:
            args.out.write_text(text)
        return result.returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
