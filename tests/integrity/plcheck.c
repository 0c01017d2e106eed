/*
 * plcheck.c — the power-loss tests' step of building a strict image of the
 * shadow below their scratch root (plimage.h).
 */
#include "tests/integrity/integ.h"
#include "tests/integrity/plimage.h"

#include <sys/stat.h>

void pl_strict_image(struct tmount *m, const char *shadow, const char *name, char *out,
		     size_t len)
{
	struct pl_image_info info;
	int r;

	snprintf(out, len, "%s/%s", m->root, name);
	CHECK_SYS(mkdir(out, 0755));
	if ((r = pl_image_build(shadow, out, PL_STRICT, 0, &info)) < 0)
		FAILF("building the strict image from %s: %s", shadow, strerror(-r));
}
