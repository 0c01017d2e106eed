#!/usr/bin/env bash
# run.sh [SECONDS] — build the libFuzzer targets (tests/fuzz) with clang in
# build-fuzz and run each for SECONDS (default $CKPTFS_FUZZ_SECONDS or 15)
# through ctest (label "fuzz"), from the seed corpus in tests/fuzz/corpus.
# Prints, per target, the executions run and whether it crashed; a crash
# leaves its input in build-fuzz/tests/fuzz/ (crash-*), to reproduce with
# `build-fuzz/tests/fuzz/TARGET crash-...`.
# Exit: 0 no crash, 1 a crash or a build failure, 77 clang or libFuzzer missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-${CKPTFS_FUZZ_SECONDS:-15}}

sh tests/fuzz/setup.sh || true
if ! command -v clang >/dev/null; then
	echo "tests/fuzz: clang is not installed; skipping the fuzz targets" >&2
	exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' >"$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
	echo "tests/fuzz: clang cannot link libFuzzer ($(head -1 "$probe/err")); skipping" >&2
	exit 77
fi
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCKPTFS_FUZZ=ON \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPTFS_FUZZ_SECONDS="$secs" >/dev/null || exit 1
cmake --build build-fuzz -j"$(nproc)" --target fuzz_all >/dev/null || exit 1
rc=0
(cd build-fuzz/tests/fuzz && ctest -L fuzz --output-on-failure) || rc=1
log=build-fuzz/tests/fuzz/Testing/Temporary/LastTest.log
total=0
for t in fuzz_manifest fuzz_opts fuzz_ctl fuzz_json; do
	runs=$(awk -v t="$t" '$0 ~ "^[0-9]+/[0-9]+ Test: "t"$" {on=1} on && /stat::number_of_executed_units/ {print $2; exit}' "$log")
	crashed=$(awk -v t="$t" '$0 ~ "^[0-9]+/[0-9]+ Test: "t"$" {on=1} on && /Test Failed|Test Passed/ {print ($0 ~ /Failed/) ? "CRASHED" : "no crash"; exit}' "$log")
	printf 'fuzz: %-14s %10s executions in %ss, %s\n' "$t" "${runs:-?}" "$secs" "${crashed:-?}"
	total=$((total + ${runs:-0}))
done
echo "fuzz: $total executions in all"
exit $rc
