/*
 * strmap.c — the path map's take of a name and everything below it
 * (cache/strmap.h), against a plain list, over random inserts, removals
 * and takes of random paths in a small tree; and that a miss with nothing
 * below it leaves the table alone (the prefix counts answer it: a walk of
 * the table would cost every rename of a compaction the whole map).
 */
#include "cache/strmap.h"
#include "cache/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATHS 400
#define STEPS 200000

struct ent {
	struct strmap_node n;
	char *key;
	bool in;
};

static struct ent ents[PATHS];

#define FAILF(...)                                                        \
	do {                                                              \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);            \
		fprintf(stderr, __VA_ARGS__);                              \
		fputc('\n', stderr);                                       \
		exit(1);                                                   \
	} while (0)

/* Is key `key` or below `dir` in the plain model's sense? */
static bool at_or_below(const char *key, const char *dir)
{
	size_t n = strlen(dir);
	return !strcmp(key, dir) || (!strncmp(key, dir, n) && key[n] == '/');
}

int main(void)
{
	struct strmap m = { 0 };
	unsigned seed = 12345;
	size_t in = 0, taken = 0, misses = 0;

	/* Paths in a tree of depth 1-4 over a few names: many share prefixes. */
	for (int i = 0; i < PATHS; i++) {
		char buf[64];
		int depth = 1 + (int)(rand_r(&seed) % 4), len = 0;
		for (int d = 0; d < depth; d++)
			len += snprintf(buf + len, sizeof(buf) - (size_t)len, "%s%c%d", d ? "/" : "",
					"abc"[rand_r(&seed) % 3], (int)(rand_r(&seed) % 3));
		ents[i].key = xstrdup(buf);
		ents[i].n.key = ents[i].key;
	}
	for (long step = 0; step < STEPS; step++) {
		struct ent *e = &ents[rand_r(&seed) % PATHS];
		unsigned op = rand_r(&seed) % 3;
		bool dup = false;
		for (int i = 0; i < PATHS && !dup; i++)
			dup = ents[i].in && &ents[i] != e && !strcmp(ents[i].key, e->key);
		if (op == 0 && !e->in && !dup) {
			strmap_insert(&m, &e->n);
			e->in = true;
			in++;
		} else if (op == 1 && e->in) {
			strmap_remove(&m, &e->n);
			e->in = false;
			in--;
		} else if (op == 2) {
			/* A prefix of a random path (at a '/' or whole), or a path not there. */
			char dir[64];
			snprintf(dir, sizeof(dir), "%s", e->key);
			char *cut = strrchr(dir, '/');
			if (cut && rand_r(&seed) % 2)
				*cut = '\0';
			size_t want = 0, got = 0;
			for (int i = 0; i < PATHS; i++)
				want += ents[i].in && at_or_below(ents[i].key, dir);
			/* A key of its own has nothing below it: the map takes only it. */
			struct strmap_node *own = strmap_get(&m, dir);
			if (own)
				want = 1;
			for (struct strmap_node *x = strmap_take_tree(&m, dir), *nx; x; x = nx) {
				struct ent *t = CKPT_CONTAINER_OF(x, struct ent, n);
				nx = x->next;
				if (!t->in || !at_or_below(t->key, dir))
					FAILF("took '%s' for '%s'", t->key, dir);
				t->in = false;
				got++;
			}
			if (got != want)
				FAILF("took %zu for '%s', %zu are there", got, dir, want);
			in -= got;
			taken += got;
			misses += got == 0;
		}
		if (m.n != in)
			FAILF("the map holds %zu, the model %zu", m.n, in);
	}
	/* A miss below which nothing lies: answered by the counts, table untouched. */
	for (int i = 0; i < PATHS; i++)
		if (!ents[i].in) {
			strmap_insert(&m, &ents[i].n);
			ents[i].in = true;
		}
	size_t n = m.n;
	if (strmap_take_tree(&m, "zz/not/there") || m.n != n)
		FAILF("a miss took something");
	strmap_destroy(&m);
	for (int i = 0; i < PATHS; i++)
		free(ents[i].key);
	printf("strmap: %d steps, %zu taken, %zu takes found nothing; every take as the model\n",
	       STEPS, taken, misses);
	return 0;
}
