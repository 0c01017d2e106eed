#!/bin/sh
# What the GPU session tests need beyond the build: Debian's PyTorch (CPU)
# and pytest for /usr/bin/python3 (gpu_torch, gpu_install), as for tests/frameworks.
exec sh "$(dirname "$0")/../ensure-packages.sh" gpu python3-torch python3-pytest
