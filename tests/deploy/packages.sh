#!/usr/bin/env bash
# packages.sh — the install layout and the recipes, without installing into
# the machine:
#  - one version everywhere: project(VERSION) in CMakeLists.txt = the
#    daemon's --version = CPack's package version = the RPM spec's Version
#    (rpmspec -q, after rpmspec -P parses the whole spec; grep where rpm is
#    not installed) = the newest numbered version() of the Spack recipe
#    (parsed with Python's ast);
#  - the .deb's Depends names fuse3, libfuse3-3, liburing2, libxxhash0;
#  - the source tarball (the spec's Source0) has the tree under
#    ckptfs-<version>/, the spec included, build directories excluded;
#  - `cmake --install` into a scratch prefix puts the daemon and the mount
#    helpers in sbin, the CLIs in bin, the Slurm scripts, the shell library
#    and the examples in share/ckptfs, man pages in share/man; the installed
#    helpers find their library, and every shell script parses (dash -n),
#    and passes the shell linter at warning level where it is installed;
#  - the systemd example unit passes systemd-analyze verify, and the fstab
#    example turns into a mount unit ordered after the backend's mount with
#    a bounded timeout (systemd-fstab-generator), where systemd is installed.
. "$(dirname "$0")/lib.sh"
dt_scratch
src=$CKPTFS_SOURCE_DIR
pkg=$src/packaging

version=$(sed -n 's/^project(ckptfs VERSION \([0-9][0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || dt_fail "no project(ckptfs VERSION x.y.z) in $src/CMakeLists.txt"
dt_note "version $version"
dt_assert_eq "ckptfs $version" "$("$CKPTFS_BIN" --version)" "ckptfs --version"

cpack_conf=$CKPTFS_BUILD_DIR/CPackConfig.cmake
[ -f "$cpack_conf" ] || dt_fail "no $cpack_conf: packaging/CMakeLists.txt must include(CPack)"
dt_assert_eq "$version" "$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")/\1/p' "$cpack_conf")" "CPack package version"
depends=$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_DEPENDS "\(.*\)")/\1/p' "$cpack_conf")
for d in fuse3 libfuse3-3 liburing2 libxxhash0; do
	dt_assert_match "(^|, )$d( |,|$)" "$depends" ".deb Depends"
done

spec=$pkg/rpm/ckptfs.spec
if command -v rpmspec >/dev/null; then
	err=$(rpmspec -P "$spec" 2>&1 >/dev/null) || dt_fail "rpmspec -P $spec: $err"
	spec_version=$(rpmspec -q --srpm --qf '%{VERSION}\n' "$spec" 2>/dev/null)
else
	dt_note "rpmspec not installed: spec version read with sed, syntax not checked"
	spec_version=$(sed -n 's/^Version:[[:space:]]*//p' "$spec")
fi
dt_assert_eq "$version" "$spec_version" "Version in $spec"
# the spec's Source0: the CPack source tarball, the spec inside (rpmbuild -ta)
err=$(cd "$DT_SCRATCH" && cpack --config "$CKPTFS_BUILD_DIR/CPackSourceConfig.cmake" -B "$DT_SCRATCH/src" 2>&1) ||
	dt_fail "cpack source tarball: $err"
listing=$(tar tzf "$DT_SCRATCH/src/ckptfs-$version.tar.gz") || dt_fail "no ckptfs-$version.tar.gz"
for f in CMakeLists.txt packaging/rpm/ckptfs.spec fs/main.c; do
	dt_assert_match "^ckptfs-$version/$f\$" "$listing" "source tarball"
done
dt_assert_eq "" "$(printf '%s\n' "$listing" | grep -E '/build[^/]*/|/\.git/')" "build or .git files in the source tarball"

spack_version=$(python3 - "$pkg/spack/package.py" <<'EOF'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read(), sys.argv[1])
cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Ckptfs"]
if not cls or not any(getattr(b, "id", "") == "CMakePackage" for b in cls[0].bases):
    sys.exit("no class Ckptfs(CMakePackage)")
found = []
for n in ast.walk(cls[0]):
    if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "version" and n.args:
        v = n.args[0].value
        if all(p.isdigit() for p in v.split(".")):
            found.append(tuple(int(p) for p in v.split(".")))
if not found:
    sys.exit("no numbered version() in the recipe")
print(".".join(map(str, max(found))))
EOF
) || dt_fail "Spack recipe: $spack_version"
dt_assert_eq "$version" "$spack_version" "newest version() in packaging/spack/package.py"

# ---- the install layout
prefix=$DT_SCRATCH/prefix
err=$(cmake --install "$CKPTFS_BUILD_DIR" --prefix "$prefix" 2>&1) || dt_fail "cmake --install: $err"
for f in sbin/ckptfs sbin/mount.ckptfs sbin/umount.fuse.ckptfs bin/ckptfs-ctl bin/ckptfs-stat \
	share/ckptfs/slurm/ckptfs-prolog share/ckptfs/slurm/ckptfs-epilog; do
	[ -x "$prefix/$f" ] || dt_fail "install: $f missing or not executable"
done
for f in share/ckptfs/ckptfs-lib.sh share/ckptfs/slurm/ckptfs-slurm.sh share/ckptfs/slurm/ckptfs.conf \
	share/ckptfs/slurm/slurm.conf.snippet share/ckptfs/examples/ckpt.mount \
	share/ckptfs/examples/fstab share/doc/ckptfs/operations.md; do
	[ -f "$prefix/$f" ] || dt_fail "install: $f missing"
done
for page in "$src"/docs/*.[158]; do
	[ -f "$page" ] || continue
	[ -f "$prefix/share/man/man${page##*.}/$(basename "$page")" ] ||
		dt_fail "install: man page $(basename "$page") missing"
done
err=$("$prefix/sbin/umount.fuse.ckptfs" 2>&1)
dt_assert_eq 1 "$?" "installed umount helper without arguments (output: $err)"
dt_assert_match "^usage: umount.fuse.ckptfs" "$err" "installed umount helper finds its library"
err=$(env -i CKPTFS_CONF=/nonexistent "$prefix/share/ckptfs/slurm/ckptfs-prolog" 2>&1)
dt_assert_eq 2 "$?" "installed prolog without a config (output: $err)"
scripts=("$prefix/sbin/mount.ckptfs" "$prefix/sbin/umount.fuse.ckptfs" "$prefix/share/ckptfs/ckptfs-lib.sh"
	"$prefix"/share/ckptfs/slurm/ckptfs-{prolog,epilog,slurm.sh})
for f in "${scripts[@]}"; do
	err=$(dash -n "$f" 2>&1) || dt_fail "dash -n $f: $err"
done
if command -v shellcheck >/dev/null; then
	(cd "$pkg" && shellcheck -s sh -x -P SCRIPTDIR -S warning ckptfs-lib.sh mount.ckptfs \
		umount.fuse.ckptfs slurm/ckptfs-slurm.sh slurm/ckptfs-prolog slurm/ckptfs-epilog) ||
		dt_fail "shellcheck found problems in packaging/"
fi

# ---- systemd
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$DT_SCRATCH/units"
	cp "$pkg/systemd/ckpt.mount" "$DT_SCRATCH/units/"
	err=$(systemd-analyze verify --man=no "$DT_SCRATCH/units/ckpt.mount" 2>&1) ||
		dt_fail "systemd-analyze verify ckpt.mount: $err"
	[ -z "$err" ] || dt_fail "systemd-analyze verify ckpt.mount warns: $err"
fi
gen=/lib/systemd/system-generators/systemd-fstab-generator
if [ -x "$gen" ]; then
	out=$DT_SCRATCH/generated
	mkdir -p "$out"
	grep -v '^#' "$pkg/examples/fstab" >"$DT_SCRATCH/fstab"
	SYSTEMD_FSTAB=$DT_SCRATCH/fstab SYSTEMD_PROC_CMDLINE='' "$gen" "$out" "$out" "$out" 2>/dev/null ||
		dt_fail "systemd-fstab-generator rejected the fstab example"
	unit=$(cat "$out/ckpt.mount" 2>/dev/null) || dt_fail "no ckpt.mount generated from the fstab example"
	dt_assert_match "^Type=fuse.ckptfs$" "$unit" "generated unit type"
	dt_assert_match "^RequiresMountsFor=/lustre/proj/ckpt$" "$unit" "generated unit ordering"
	dt_assert_match "^TimeoutSec=15min$" "$unit" "generated unit timeout"
fi
exit 0
