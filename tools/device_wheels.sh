#!/usr/bin/env bash
# Download the pure-Python wheels that tools/device_check.sh installs on a lent GPU machine (Python 3.12 there, no
# package registry): mmengine and mmcv-lite with the dependencies that image lacks. Usage: bash tools/device_wheels.sh [DEST]
set -euo pipefail
DEST="${1:-.whl}"
mkdir -p "$DEST"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform any -d "$DEST" \
  mmengine==0.10.7 mmcv-lite==2.2.0 addict==2.4.0 yapf==0.43.0 termcolor==3.3.0 platformdirs==4.14.9
ls -l "$DEST"
