#!/bin/sh
# setup.sh — what the fuzz targets need: Debian's clang and libFuzzer
# (libfuzzer-14-dev; the runtime -fsanitize=fuzzer links comes with
# libclang-rt-14-dev).  Idempotent; without root or apt it says what is
# missing and tests/fuzz/run.sh skips (77).
exec sh "$(dirname "$0")/../ensure-packages.sh" fuzz clang libclang-rt-14-dev libfuzzer-14-dev
