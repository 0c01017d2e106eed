#!/bin/sh
# What the framework tests need beyond the build: Debian's PyTorch (CPU) and
# pytest for /usr/bin/python3 (the python3 on PATH may be a build without torch).
exec sh "$(dirname "$0")/../ensure-packages.sh" frameworks python3-torch python3-pytest
