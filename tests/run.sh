#!/usr/bin/env bash
# The test command: install what the build and the tests need (Debian 12),
# build ckptfs, and run the whole suite with ctest — then once more under
# AddressSanitizer + UndefinedBehaviorSanitizer, and the core and integrity
# tests a third time under ThreadSanitizer.
#
#   tests/run.sh            everything (as root: installs packages, mounts),
#                           then the libFuzzer targets for 15 s each (tests/fuzz)
#   tests/run.sh --quick    the plain build only, no sanitizer or fuzz pass
#   CTEST_ARGS="-R core" tests/run.sh --quick    a subset
#   CTEST_JOBS=1 tests/run.sh                  one test at a time
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1

sh tests/ensure-packages.sh --required build build-essential cmake pkg-config \
   libfuse3-dev fuse3 liburing-dev libxxhash-dev attr python3 util-linux
# Test areas that need more (Slurm, PyTorch, ...) install it in their own setup.
for setup in tests/*/setup.sh; do
  [ -f "$setup" ] && bash "$setup"
done

# Tests run as many at once as there are CPUs (CTEST_JOBS overrides): most
# of their time is waiting (a mount, a drain, a held backend call), so on 2
# cores -j2 halves each pass (plain 948 s -> ~500 s).  Each test owns its
# scratch mount and backend; those that share something lock it
# (RESOURCE_LOCK); their deadlines are bounds (seconds), not timings.
jobs=$(nproc)
ctest_jobs=${CTEST_JOBS:-$jobs}
run_suite() {
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  ${RUN_PREFIX:-} ctest --test-dir "$dir" -j"$ctest_jobs" --output-on-failure ${CTEST_ARGS:-}
}
run_suite build
if [ $quick -eq 0 ]; then
  # Sanitizer pass: leaks are reported at daemon exit, so every mount test
  # also checks for leaks.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    CTEST_ARGS="${CTEST_ARGS:-} -LE nosan" run_suite build-asan -DCKPTFS_ASAN=ON
  # ThreadSanitizer pass: the daemon's threads (request workers, flushers,
  # spiller, publisher) under the core and integrity tests, and libckptfs's
  # capture threads with the daemon's GPU sessions under the gpu tests,
  # selected by their area labels (tests/CMakeLists.txt); nosan and notsan
  # tests stay out, and
  # so do the .pwrite twins of I/O tests (same threads as .uring; saves a
  # third of the time).  It stops at the first race.  fs/tsan.c tells TSan
  # about the ordering that /dev/fuse provides.  Address-space randomisation
  # is off for it: TSan's fixed layout fails with large mmap_rnd_bits.
  prefix=""
  command -v setarch >/dev/null && prefix="setarch $(uname -m) -R"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 RUN_PREFIX="$prefix" \
    CTEST_ARGS="${CTEST_ARGS:-} -L core|integrity|gpu -LE nosan|notsan -E \.pwrite$" \
    run_suite build-tsan -DCKPTFS_TSAN=ON
fi
if [ $quick -eq 0 ]; then
  # Fuzzing: each libFuzzer target for a bounded time (clang; 77 = not available).
  fuzz_rc=0
  bash tests/fuzz/run.sh || fuzz_rc=$?
  case $fuzz_rc in
    0) ;;
    77) echo "tests/run.sh: fuzz targets skipped (clang or libFuzzer unavailable)" >&2 ;;
    *) exit "$fuzz_rc" ;;
  esac
fi
