#!/usr/bin/env python3
"""bsys_door.py -- the bsys table is the only door to the backend.

Every backend call must go through backend/bsys.c (issue 10 item 1): there
it is confined -- one name at a time below a directory fd, never following a
symlink, never opening a FIFO or device -- and fault.c can wrap it.  This
test runs `nm -u` on every object file of the daemon (cache/, backend/,
fs/ and the daemon's main) and fails if any object other than bsys.o
references a system call that resolves a path or changes a file's
attributes, except the documented exceptions below, each with its reason.

It checks itself too: bsys.o must reference the calls it wraps, so a
broken symbol filter (a libc renaming, fortify's __*_chk) cannot pass
silently.
"""
import os
import re
import subprocess
import sys

# Calls that resolve a name (and so can meet a planted symlink), change a
# file's attributes, or bypass libc entirely.
FORBIDDEN = {
    "open", "openat", "openat2", "creat", "fopen", "freopen", "opendir", "fdopendir",
    "readdir", "scandir", "scandirat", "nftw", "ftw", "mkdir", "mkdirat", "mknod",
    "mknodat", "mkfifo", "mkfifoat", "rename", "renameat", "renameat2", "unlink",
    "unlinkat", "rmdir", "remove", "link", "linkat", "symlink", "symlinkat",
    "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "lchmod", "chown",
    "fchown", "lchown", "fchownat", "utime", "utimes", "lutimes", "futimes",
    "futimens", "utimensat", "futimesat", "stat", "lstat", "fstatat", "statx",
    "newfstatat", "access", "faccessat", "eaccess", "euidaccess", "truncate",
    "ftruncate", "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr",
    "fgetxattr", "listxattr", "llistxattr", "flistxattr", "removexattr",
    "lremovexattr", "fremovexattr", "name_to_handle_at", "open_by_handle_at",
    "realpath", "chdir", "chroot", "syscall",
}

# (object, symbol) -> reason.  "*" as the symbol: any of FORBIDDEN.
EXCEPTIONS = {
    ("bsys.c.o", "*"): "the door itself: the confined calls (bsys.h C1-C4)",
    ("fault.c.o", "access"): "CKPTFS_FAULT while=PATH: a test's flag file, not on the backend",
    ("fault.c.o", "readlink"): "CKPTFS_FAULT name= on an fsync: the fd's /proc/self/fd link, only compared",
    ("util.c.o", "fopen"): "mem_total/mem_available read /proc/meminfo",
    ("publish.c.o", "fopen"): "the mount id's randomness from /dev/urandom",
    ("mounts.c.o", "fopen"): "reads /proc/self/mountinfo",
    ("opts.c.o", "stat"): "checks the command line's backend and mount point, before any backend call",
    ("opts.c.o", "access"): "checks the command line's backend is writable",
    ("opts.c.o", "realpath"): "where rescue_dir's existing part leads, only compared with the "
                              "backend's resolved path (one inside it is refused), before any "
                              "backend call",
    ("safepath.c.o", "realpath"): "a daemon not run as root resolves its command line's backend "
                                  "and mount point with its own rights (as root: one component at "
                                  "a time through bsys_direct)",
    ("main.c.o", "open"): "/dev/null when daemonizing, the mount's bdi readahead file in /sys",
    ("main.c.o", "stat"): "the mount point's device number, for its bdi",
    ("main.c.o", "chdir"): "chdir(\"/\") when daemonizing",
    # GPU capture sessions: the arena is a memfd, placed by NUMA node from /sys.
    ("session.c.o", "ftruncate"): "sizes a GPU session's arena and ring memfds, not backend files",
    ("session.c.o", "open"): "reads the GPU's numa_node from /sys/bus/pci/devices",
    ("session.c.o", "access"): "checks /sys/devices/system/node/nodeN exists before mbind",
    ("session.c.o", "syscall"): "mbind(2) of a GPU session's arena (no libc wrapper)",
    ("loop.c.o", "fopen"): "reads /proc/sys/fs/fuse/max_pages_limit",
    ("devio.c.o", "syscall"): "capget: may the daemon use FUSE passthrough (CAP_SYS_ADMIN)",
    ("passthrough.c.o", "syscall"): "cachestat(2) of a backend file it holds open, by descriptor "
    "(no libc wrapper): is the file in the page cache",
    ("uring.c.o", "fopen"): "reads /sys/devices/system/cpu/possible (the kernel's queue count)",
    ("uring.c.o", "open"): "reads /sys/module/fuse/parameters/enable_uring",
    ("passthrough.c.o", "open"): "reopens read-only, by its descriptor (/proc/self/fd/N), a backend "
                                 "file bsys already opened: no name is looked up on the backend",
    # The CLI tools (ckptfs-ctl, ckptfs-stat) run as the invoking user, not as
    # the root daemon, and read what that user may read.
    ("cli.c.o", "*"): "CLI tools: run as the invoking user",
    ("verify.c.o", "*"): "ckptfs-ctl verify: runs as the invoking user",
    ("ctl_main.c.o", "*"): "ckptfs-ctl: runs as the invoking user",
    ("stat_main.c.o", "*"): "ckptfs-stat: runs as the invoking user",
}

# libc spellings: openat64, __openat_2, __readlinkat_chk, __xstat64, ...
SPELLING = re.compile(r"^_*(?:x)?(?P<base>[a-z_0-9]+?)(?:64)?(?:_chk|_2)?(?:@.*)?$")


def base_name(sym):
    m = SPELLING.match(sym)
    if not m:
        return sym
    base = m.group("base")
    if base.startswith("x") and base[1:] in FORBIDDEN:  # __xstat, __lxstat, __fxstatat
        base = base[1:]
    if base.startswith("l") and base[1:] == "xstat":
        base = "lstat"
    return base


def objects(build):
    """(archive or object path, object name) pairs of the daemon's code."""
    found = []
    for sub in ("cache", "backend", "fs"):
        for root, _, files in os.walk(os.path.join(build, sub)):
            for f in files:
                if f.endswith(".a") or (f.endswith(".c.o") and "ckptfs.dir" in root):
                    found.append(os.path.join(root, f))
    return sorted(found)


def undefined(path):
    """{object name: set of undefined symbols} for an archive or object."""
    out = subprocess.run(["nm", "-u", "-A", path], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        # "lib.a:obj.o:                 U sym" or "obj.o:                 U sym"
        head, _, rest = line.partition(": ")
        fields = rest.split()
        if not fields:
            continue
        obj = os.path.basename(head.split(":")[-1])
        syms.setdefault(obj, set()).add(fields[-1])
    return syms


def main():
    build = os.environ.get("CKPTFS_BUILD_DIR")
    if not build or not os.path.isdir(build):
        print("skip: CKPTFS_BUILD_DIR is not set", file=sys.stderr)
        return 77
    paths = objects(build)
    seen = {}
    for p in paths:
        for obj, syms in undefined(p).items():
            seen.setdefault(obj, set()).update(syms)
    for needed in ("bsys.c.o", "node.c.o", "xattr.c.o", "rescue.c.o", "btree.c.o", "main.c.o"):
        if needed not in seen:
            print(f"FAIL: {needed} not found among {paths}")
            return 1
    wrapped = {base_name(s) for s in seen["bsys.c.o"]}
    for call in ("openat", "fchownat", "utimensat", "mkdirat", "readlinkat", "getxattr",
                 "fdopendir", "fchmod"):
        if call not in wrapped:
            print(f"FAIL: the symbol filter is broken: bsys.c.o does not seem to call {call} "
                  f"(saw {sorted(wrapped)})")
            return 1
    bad = []
    used_exceptions = set()
    for obj in sorted(seen):
        for sym in sorted(seen[obj]):
            call = base_name(sym)
            if call not in FORBIDDEN:
                continue
            for key in ((obj, "*"), (obj, call)):
                if key in EXCEPTIONS:
                    used_exceptions.add(key)
                    break
            else:
                bad.append(f"{obj}: {sym}")
    for key in sorted(set(EXCEPTIONS) - used_exceptions):
        print(f"note: exception {key[0]} {key[1]} no longer needed: {EXCEPTIONS[key]}")
    if bad:
        print("FAIL: these objects call the backend around the bsys table (backend/bsys.h):")
        for b in bad:
            print("  " + b)
        print("route them through bsys, or add an exception with its reason to " + __file__)
        return 1
    print(f"ok: {len(seen)} objects; only bsys.c.o and {len(used_exceptions) - 1} documented "
          "exceptions make path-resolving calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
