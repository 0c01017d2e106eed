/*
 * marker.h — configuring which operations are checkpoint markers (marker.c);
 * the publisher asks op_is_marker() (pub.h).
 */
#ifndef CKPTFS_MARKER_H
#define CKPTFS_MARKER_H

#include <stddef.h>

/*
 * Install the marker patterns from -o markers= (NULL: the defaults):
 * "p1:p2" replaces them, "+p1:p2" adds to them, "none" empties them; a
 * pattern "from=GLOB" matches a rename by its source name.  Call before any
 * thread starts.  0, or -EINVAL with one line in why.
 */
int marker_configure(const char *spec, char *why, size_t len);
/* The patterns in effect, ':'-separated, for stats and the log. */
void marker_describe(char *buf, size_t len);

#endif
