/*
 * marker.c — which operations publish a checkpoint *marker*: the file a
 * framework writes last to say "the checkpoint before me is complete".
 *
 * The default patterns:
 *
 *   DeepSpeed   latest
 *   Megatron    latest_checkpointed_iteration.txt
 *   PyTorch DCP .metadata (written as .metadata.tmp, then renamed)
 *   Orbax       commit_success.txt, and the rename of a
 *               *.orbax-checkpoint-tmp* directory to its final name
 *   HF Trainer  trainer_state.json
 *
 * A pattern is a file name in which '*' matches any characters (fnmatch(3),
 * no '?' or brackets), matched against the name an operation
 * gives a file: a version's name, a rename's destination, a symlink's or
 * a hard link's new name; a pattern
 * written "from=GLOB" matches a rename by its *source* name (Orbax's
 * temporary directory).  `-o markers=` replaces the list ("p1:p2:..."),
 * adds to it ("+p1:p2"), or empties it ("none").
 *
 * Two users: an administrator's skip of a blocked operation takes every
 * later marker of each user who loses an operation to it, and keeps those
 * users' removals off the backend until their next marker is queued
 * (publish.c, P4); and
 * with peers, the hold hook holds a marker until every peer's watermark
 * has passed it (peers.c, nodes.h N4), and holds for good a marker sealed
 * after a skip on a peer (N6), so no marker can name a checkpoint whose
 * files were skipped, unless marker_policy=release lets it go.
 *
 * The set is installed once, before any thread starts, and only read
 * afterwards (like the bsys table).
 */
#include "backend/pub.h"
#include "backend/marker.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const default_markers[] = {
	"latest", "latest_checkpointed_iteration.txt", ".metadata", "commit_success.txt",
	"trainer_state.json", "from=*.orbax-checkpoint-tmp*",
};

struct marker_pat {
	char *glob;
	bool from;		/* match a rename's source name */
};

static struct marker_pat *pats;
static size_t npats;
static bool installed;

static void pats_clear(void)
{
	for (size_t i = 0; i < npats; i++)
		free(pats[i].glob);
	free(pats);
	pats = NULL;
	npats = 0;
}

static int pat_add(const char *p, char *why, size_t len)
{
	bool from = !strncmp(p, "from=", 5);
	const char *g = from ? p + 5 : p;

	if (!*g || strlen(g) > 255 || strpbrk(g, "/?[]\\:,")) {
		snprintf(why, len, "option 'markers': '%.64s' is not a marker pattern (a file name, "
			 "'*' matching any characters; from=PATTERN for a rename's source)", p);
		return -EINVAL;
	}
	pats = xrealloc(pats, (npats + 1) * sizeof(*pats));
	pats[npats].glob = xstrdup(g);
	pats[npats].from = from;
	npats++;
	return 0;
}

int marker_configure(const char *spec, char *why, size_t len)
{
	int r = 0;

	pats_clear();
	installed = spec != NULL;
	if (spec && !strcmp(spec, "none"))
		return 0;
	if (!spec || *spec == '+')
		for (size_t i = 0; i < CKPT_ARRAY_LEN(default_markers) && r == 0; i++)
			r = pat_add(default_markers[i], why, len);
	if (!spec || r < 0)
		return r;
	if (*spec == '+')
		spec++;
	if (!*spec) {
		snprintf(why, len, "option 'markers' needs patterns separated by ':', '+' and "
			 "patterns to add to the defaults, or 'none'");
		return -EINVAL;
	}
	char *dup = xstrdup(spec), *save = NULL;
	for (char *t = strtok_r(dup, ":", &save); t && r == 0; t = strtok_r(NULL, ":", &save))
		r = pat_add(t, why, len);
	free(dup);
	return r;
}

void marker_describe(char *buf, size_t len)
{
	size_t k = 0;

	buf[0] = '\0';
	if (!installed) {
		for (size_t i = 0; i < CKPT_ARRAY_LEN(default_markers) && k < len; i++)
			k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? ":" : "", default_markers[i]);
		return;
	}
	for (size_t i = 0; i < npats && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, "%s%s%s", i ? ":" : "",
				      pats[i].from ? "from=" : "", pats[i].glob);
	if (!npats)
		snprintf(buf, len, "none");
}

static bool name_matches(const char *name, bool from)
{
	if (!name)
		return false;
	if (!installed) {	/* no -o markers=: the defaults, read as they are */
		for (size_t i = 0; i < CKPT_ARRAY_LEN(default_markers); i++) {
			const char *p = default_markers[i];
			bool pf = !strncmp(p, "from=", 5);
			if (pf == from && fnmatch(pf ? p + 5 : p, name, 0) == 0)
				return true;
		}
		return false;
	}
	for (size_t i = 0; i < npats; i++)
		if (pats[i].from == from && fnmatch(pats[i].glob, name, 0) == 0)
			return true;
	return false;
}

bool op_is_marker(const struct op *op)
{
	switch (op->kind) {
	case OP_VERSION:
		return name_matches(op->name, false);
	case OP_RENAME:
		return name_matches(op->name2, false) || name_matches(op->name, true);
	case OP_SYMLINK:	/* Lightning's save_last="link": last.ckpt names the checkpoint */
		return name_matches(op->name, false);
	case OP_LINK:		/* a hard link is a name given too */
		return name_matches(op->name2, false);
	default:
		return false;
	}
}
