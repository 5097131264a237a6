#!/usr/bin/env bash
# The test command (README.md, .ci/run): installs the build dependencies,
# builds everything into build/, and runs every test but those labelled `gpu`
# (which need a GPU host; tests/gpu/gpu_proof.sh runs there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
ctest --test-dir build -LE gpu --output-on-failure -j2
