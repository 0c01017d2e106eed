#!/bin/sh
# setup.sh — what the multi-node tests need beyond the build: GlusterFS
# (glusterd, the gluster CLI and the FUSE client), for gluster.sh, which
# runs the multi-node tests again over a GlusterFS volume on loopback.  The
# package's daemon is not started on install: the test starts and stops
# glusterd itself, and skips (77) where it cannot run.
exec sh "$(dirname "$0")/../ensure-packages.sh" multinode glusterfs-server glusterfs-client
