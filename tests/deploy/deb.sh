#!/usr/bin/env bash
# deb.sh — the Debian package, for real: cpack -G DEB builds
# ckptfs_<version>_<arch>.deb from the build directory; its control fields
# carry the version and the Depends; apt-get installs it on this Debian 12;
# then, using only what the package installed (/usr/sbin/ckptfs through
# mount.fuse3, /usr/sbin/mount.ckptfs, /usr/sbin/umount.fuse.ckptfs,
# /usr/bin/ckptfs-stat), an fstab-style mount and a `mount -t ckptfs` each
# take files that are on the backend when umount returns; dpkg -r removes
# every file again.  Skips where apt/dpkg/cpack are missing, and leaves an
# already installed ckptfs package alone (skip) rather than replace it.
. "$(dirname "$0")/lib.sh"
dt_require_fuse
for b in cpack apt-get dpkg dpkg-deb; do
	command -v $b >/dev/null || dt_skip "$b not installed"
done
if dpkg -s ckptfs >/dev/null 2>&1; then
	dt_skip "a ckptfs package is already installed; not replacing it"
fi
dt_scratch
installed=0
remove_package() {
	[ $installed -eq 1 ] && dpkg -r ckptfs >/dev/null 2>&1
}
DT_EXIT_HOOK=remove_package

version=$(sed -n 's/^project(ckptfs VERSION \([0-9][0-9.]*\).*/\1/p' "$CKPTFS_SOURCE_DIR/CMakeLists.txt")
err=$(cpack -G DEB -B "$DT_SCRATCH/pkg" --config "$CKPTFS_BUILD_DIR/CPackConfig.cmake" 2>&1) ||
	dt_fail "cpack -G DEB: $err"
deb=$(ls "$DT_SCRATCH"/pkg/ckptfs_"$version"_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || dt_fail "no ckptfs_${version}_*.deb in $DT_SCRATCH/pkg: $(ls "$DT_SCRATCH/pkg")"
dt_assert_eq ckptfs "$(dpkg-deb -f "$deb" Package)" "Package field"
dt_assert_eq "$version" "$(dpkg-deb -f "$deb" Version)" "Version field"
dt_assert_match "liburing2" "$(dpkg-deb -f "$deb" Depends)" "Depends field"
dt_note "built $(basename "$deb"): Depends: $(dpkg-deb -f "$deb" Depends)"

err=$(DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" 2>&1) ||
	dt_fail "apt-get install $deb: $(printf '%s' "$err" | tail -n 5)"
installed=1
for f in /usr/sbin/ckptfs /usr/sbin/mount.ckptfs /usr/sbin/umount.fuse.ckptfs /usr/bin/ckptfs-ctl \
	/usr/bin/ckptfs-stat /usr/share/ckptfs/slurm/ckptfs-prolog; do
	[ -x "$f" ] || dt_fail "after apt-get install: $f missing"
done
dt_assert_eq "ckptfs $version" "$(/usr/sbin/ckptfs --version)" "installed daemon's version"

b=$DT_SCRATCH/backend m=$DT_SCRATCH/mnt ref=$DT_SCRATCH/ref
mkdir -p "$b" "$m"
dt_make_files "$ref" 3 1024
echo "$b $m fuse.ckptfs cache_size=64M,_netdev 0 0" >"$DT_SCRATCH/fstab"

# the installed daemon runs, and the installed ckptfs-stat reads it
dt_cycle_check() {
	dt_assert_eq /usr/sbin/ckptfs "$(readlink "/proc/$2/exe")" "$1: the daemon that runs"
	err=$(/usr/bin/ckptfs-stat "$m" 2>&1) || dt_fail "$1: ckptfs-stat: $err"
}
dt_mount_cycle "fstab entry, installed package" "$b" "$m" "$ref" mount -T "$DT_SCRATCH/fstab" "$m"
dt_mount_cycle "mount -t ckptfs, installed package" "$b" "$m" "$ref" mount -t ckptfs -o cache_size=64M,_netdev "$b" "$m"

err=$(dpkg -r ckptfs 2>&1) || dt_fail "dpkg -r ckptfs: $err"
installed=0
for f in /usr/sbin/ckptfs /usr/sbin/mount.ckptfs /usr/sbin/umount.fuse.ckptfs /usr/bin/ckptfs-ctl \
	/usr/share/ckptfs; do
	[ ! -e "$f" ] || dt_fail "after dpkg -r: $f still there"
done
exit 0
