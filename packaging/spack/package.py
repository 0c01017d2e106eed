# package.py — Spack recipe for ckptfs.  Copy into a Spack repository as
# packages/ckptfs/package.py.  Keep the newest version() equal to
# project(ckptfs VERSION ...) in the top-level CMakeLists.txt; the
# deploy_packages test checks it.
from spack.package import *


class Ckptfs(CMakePackage):
    """FUSE write-back cache file system for training checkpoints: writes
    return at memory speed, files reach the parallel file system whole and
    in order, with XXH3 checksums. Includes Slurm prolog/epilog scripts."""

    # Placeholder location: set homepage and git to the published repository.
    homepage = "https://github.com/ckptfs/ckptfs"
    git = "https://github.com/ckptfs/ckptfs.git"

    version("main", branch="main")
    version("0.1.0", tag="v0.1.0")

    variant("cuda", default=False, description="GPU-aware path (device-to-host copies into the cache)")

    depends_on("c", type="build")
    depends_on("cmake@3.18:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("libfuse@3.12:")
    depends_on("liburing@2.0:")
    depends_on("xxhash@0.8:")
    depends_on("cuda", when="+cuda")

    def cmake_args(self):
        return [
            self.define("BUILD_TESTING", False),
            self.define("CKPTFS_WITH_CUDA", "ON" if self.spec.satisfies("+cuda") else "OFF"),
        ]
