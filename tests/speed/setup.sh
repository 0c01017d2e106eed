#!/bin/sh
# What the speed tests need beyond the build: mkfs.xfs, for basecopy's run
# over an XFS image on a loop device (reflink); without it that part skips.
exec sh "$(dirname "$0")/../ensure-packages.sh" speed xfsprogs
