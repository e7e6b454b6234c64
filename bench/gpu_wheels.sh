#!/usr/bin/env bash
# The wheels bench/gpu_run.sh needs on the lent GPU machine (its image has numpy, grpcio,
# protobuf, pytest, cupy, torch and cuda-bindings, but not these), for its Python 3.12,
# into .whl (ignored by git: `echo /.whl/ >> .git/info/exclude`). Run here, then call the
# device tool with carry [".whl"] and `bash bench/gpu_run.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 \
         manylinux_2_31 manylinux_2_34 manylinux_2_35; do
    platforms+=(--platform "${p}_x86_64")
done
for pkg in posix_ipc==1.3.2 tritonclient==2.73.0 httptools==0.9.0 orjson==3.13.0 \
           nats-py==2.16.0 zttp==0.0.35 pytest-asyncio==1.5.0 h2==4.4.1 hpack==4.2.0 \
           hyperframe==6.1.0 python-rapidjson==1.25 geventhttpclient==2.6.1 gevent==26.9.0 \
           greenlet==3.3.2 zope.event==6.2 zope.interface==8.7 brotli==1.2.1; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d .whl "$pkg"
done
du -sh .whl
