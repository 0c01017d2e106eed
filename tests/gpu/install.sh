#!/usr/bin/env bash
# install.sh — `cmake --install` delivers the GPU client, and what it
# installed works on its own: libckptfs, its headers, the mock driver and
# the Python package land under the prefix; a C program compiled against
# the installed header captures through the installed daemon's mount; the
# installed Python package finds the installed library by itself (no
# CKPTFS_LIBRARY) and, with Debian's PyTorch, its ckptfs.torch.save loads
# with torch.load; ckptfs-ctl verify agrees after the unmount.  The .deb is
# built from the same install rules (packaging/).  Exit 0, 1, or 77 (skip).
set -u
: "${CKPTFS_BUILD_DIR:?run by ctest}"
name=gpu_install
skip() { echo "SKIP $name: $*" >&2; exit 77; }
fail() {
	echo "FAIL $name: $*" >&2
	[ -f "${tmp:-/nonexistent}/daemon.log" ] && tail -n 20 "$tmp/daemon.log" >&2
	exit 1
}
[ -c /dev/fuse ] || skip "/dev/fuse is missing"
command -v fusermount3 >/dev/null || skip "fusermount3 is not installed"
command -v cc >/dev/null || skip "no C compiler"
tmp=$(mktemp -d /tmp/ckptfs-gpu_install.XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		fusermount3 -u "$tmp/mnt" 2>/dev/null || { kill -9 "$pid"; fusermount3 -uz "$tmp/mnt"; }
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

p=$tmp/prefix
cmake --install "$CKPTFS_BUILD_DIR" --prefix "$p" >"$tmp/install.log" 2>&1 || fail "cmake --install: $(tail -n 5 "$tmp/install.log")"
lib=$(dirname "$(ls "$p"/lib*/libckptfs.so.0 "$p"/lib/*/libckptfs.so.0 2>/dev/null | head -n 1)")
[ -n "$lib" ] && [ -e "$lib/libckptfs.so.0" ] || fail "no libckptfs.so.0 under $p"
py=$p/lib/python3/dist-packages/ckptfs
for f in "$p/include/ckptfs.h" "$p/include/ckptfs_ring.h" "$lib/ckptfs/libckptfs-cudamock.so" \
	"$py/__init__.py" "$py/_lib.py" "$py/_zip.py" "$py/torch.py" "$py/deepspeed.py" "$py/_paths.py" \
	"$p/sbin/ckptfs" "$p/bin/ckptfs-ctl"; do
	[ -e "$f" ] || fail "not installed: $f"
done
grep -q "\"$lib/libckptfs.so.0\"" "$py/_paths.py" || fail "_paths.py does not name $lib: $(cat "$py/_paths.py")"

cc -O1 -o "$tmp/client" -I"$p/include" "$(dirname "$0")/install_client.c" -L"$lib" -lckptfs \
	-Wl,-rpath,"$lib" 2>"$tmp/cc.log" || fail "compiling against the installed header: $(cat "$tmp/cc.log")"

mkdir "$tmp/backend" "$tmp/mnt"
"$p/sbin/ckptfs" "$tmp/backend" "$tmp/mnt" -f -o cache_size=128M >"$tmp/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
	grep -qs " $tmp/mnt fuse.ckptfs " /proc/self/mounts && break
	sleep 0.05
done
grep -qs " $tmp/mnt fuse.ckptfs " /proc/self/mounts || fail "the installed daemon did not mount"

CKPTFS_LIBCUDA=$lib/ckptfs/libckptfs-cudamock.so "$tmp/client" "$tmp/mnt" || fail "the C client failed"

pyver=
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	env -u CKPTFS_LIBRARY -u CKPTFS_LIBCUDA PYTHONPATH="$p/lib/python3/dist-packages" \
		PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 - "$tmp/mnt" <<'PY' || fail "the installed Python package failed"
import os, sys
import ckptfs
os.environ["CKPTFS_LIBCUDA"] = ckptfs.mock_driver()   # found through _paths.py
import ckptfs.torch, torch
mnt = sys.argv[1]
state = {"w": torch.arange(3 << 20, dtype=torch.float32), "step": 5}
ckptfs.torch.save(state, os.path.join(mnt, "installed.pt"))
ckptfs.commit()
assert ckptfs.sessions()[0].driver == "mock"
got = torch.load(os.path.join(mnt, "installed.pt"))
assert torch.equal(got["w"], state["w"]) and got["step"] == 5
ckptfs.close_all()
PY
	pyver=" and installed.pt"
fi
fusermount3 -u "$tmp/mnt" || fail "unmount"
wait "$pid" || fail "the daemon exited with $?"
pid=
out=$("$p/bin/ckptfs-ctl" verify "$tmp/backend") || fail "verify: $out"
echo "$out" | grep -q "^OK  *installed.bin" || fail "verify: $out"
[ -z "$pyver" ] || echo "$out" | grep -q "^OK  *installed.pt" || fail "verify: $out"
echo "$name: installed client wrote installed.bin$pyver; verify OK"
