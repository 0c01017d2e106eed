/*
 * strmap.c — the string-keyed hash map (strmap.h): FNV-1a 64 over the key,
 * power-of-two bucket tables doubled at load 1.
 */
#include "cache/strmap.h"
#include "cache/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static size_t slot(const struct strmap *m, const char *key)
{
	return (size_t)fnv1a(key) & (m->nb - 1);
}

/* ---- keys below each directory prefix ---------------------------------- */

/* The slot of prefix hash h (its own, or the empty one it would take). */
static struct strmap_dir *dir_slot(struct strmap_dir *v, size_t cap, uint64_t h)
{
	size_t i = (size_t)(h ^ (h >> 29)) & (cap - 1);
	while (v[i].keys != SIZE_MAX && v[i].h != h)
		i = (i + 1) & (cap - 1);
	return &v[i];
}

/* Grow (or rebuild without the prefixes no key lies below any more). */
static void dirs_rebuild(struct strmap *m)
{
	struct strmap_dir *old = m->dirs;
	size_t oldcap = m->capdirs, live = 0;

	for (size_t i = 0; i < oldcap; i++)
		live += old[i].keys != SIZE_MAX && old[i].keys != 0;
	m->capdirs = 64;
	while (m->capdirs < 4 * (live + 1))
		m->capdirs *= 2;
	m->dirs = xmalloc(m->capdirs * sizeof(*m->dirs));
	for (size_t i = 0; i < m->capdirs; i++)
		m->dirs[i].keys = SIZE_MAX;	/* empty */
	m->ndirs = 0;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].keys != SIZE_MAX && old[i].keys != 0) {
			*dir_slot(m->dirs, m->capdirs, old[i].h) = old[i];
			m->ndirs++;
		}
	free(old);
}

/* Count key in (+1) or out (-1) of every directory prefix above it. */
static void dirs_note(struct strmap *m, const char *key, int d)
{
	uint64_t h = 0xcbf29ce484222325ull;	/* fnv1a of the prefix before each '/' */

	for (const char *s = key; *s; s++) {
		if (*s == '/') {
			if (d > 0 && 2 * (m->ndirs + 1) > m->capdirs)
				dirs_rebuild(m);
			struct strmap_dir *x = m->capdirs ? dir_slot(m->dirs, m->capdirs, h) : NULL;
			if (d > 0 && x->keys == SIZE_MAX) {
				x->h = h;
				x->keys = 0;
				m->ndirs++;
			}
			if (x && x->keys != SIZE_MAX)
				x->keys += (size_t)d;	/* (size_t)-1: one fewer */
		}
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	}
}

/* Might a key lie below `key`?  (A hash shared by two prefixes says yes.) */
static bool dirs_has(const struct strmap *m, const char *key)
{
	if (!m->capdirs)
		return false;
	const struct strmap_dir *x = dir_slot(m->dirs, m->capdirs, fnv1a(key));
	return x->keys != SIZE_MAX && x->keys != 0;
}

struct strmap_node *strmap_get(const struct strmap *m, const char *key)
{
	if (!m->nb)
		return NULL;
	for (struct strmap_node *e = m->b[slot(m, key)]; e; e = e->next)
		if (!strcmp(e->key, key))
			return e;
	return NULL;
}

/* STRMAP_GET_OR_NEW: the object of `size` bytes, its node node_off bytes in, its key's copy key_off. */
void *strmap_get_or_new(struct strmap *m, const char *key, bool create, size_t size,
			size_t node_off, size_t key_off)
{
	struct strmap_node *e = strmap_get(m, key);
	char *obj, *copy;

	if (e || !create)
		return e ? (char *)e - node_off : NULL;
	obj = xcalloc(1, size);
	copy = xstrdup(key);
	*(char **)(obj + key_off) = copy;
	e = (struct strmap_node *)(obj + node_off);
	e->key = copy;
	strmap_insert(m, e);
	return obj;
}

void strmap_insert(struct strmap *m, struct strmap_node *e)
{
	if (m->n + 1 > m->nb) {
		struct strmap bigger = { .nb = m->nb ? m->nb * 2 : 256 };
		bigger.b = xcalloc(bigger.nb, sizeof(*bigger.b));
		for (size_t i = 0; i < m->nb; i++)
			for (struct strmap_node *x = m->b[i], *nx; x; x = nx) {
				nx = x->next;
				size_t s = slot(&bigger, x->key);
				x->next = bigger.b[s];
				bigger.b[s] = x;
			}
		free(m->b);
		m->b = bigger.b;
		m->nb = bigger.nb;
	}
	size_t s = slot(m, e->key);
	e->next = m->b[s];
	m->b[s] = e;
	m->n++;
	dirs_note(m, e->key, +1);
}

void strmap_remove(struct strmap *m, struct strmap_node *e)
{
	struct strmap_node **pp = &m->b[slot(m, e->key)];
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	e->next = NULL;
	m->n--;
	dirs_note(m, e->key, -1);
}

static int below(const char *key, const char *dir, size_t n)
{
	return !strncmp(key, dir, n) && key[n] == '/';
}

struct strmap_node *strmap_take_tree(struct strmap *m, const char *key)
{
	struct strmap_node *out = strmap_get(m, key);
	size_t n = strlen(key);

	if (out) {
		strmap_remove(m, out);
		return out;
	}
	if (!dirs_has(m, key))
		return NULL;	/* nothing below it */
	for (size_t i = 0; i < m->nb; i++)
		for (struct strmap_node *x = m->b[i], *nx; x; x = nx) {
			nx = x->next;
			if (below(x->key, key, n)) {
				strmap_remove(m, x);
				x->next = out;
				out = x;
			}
		}
	return out;
}

void strmap_destroy(struct strmap *m)
{
	free(m->b);
	free(m->dirs);
	memset(m, 0, sizeof(*m));
}

/* ---- the string set ------------------------------------------------------- */

struct strset_entry {
	struct strmap_node node;	/* first: a node is its entry */
	char key[];
};

bool strset_add(struct strset *s, const char *key)
{
	if (strmap_get(&s->m, key))
		return false;
	size_t len = strlen(key) + 1;
	struct strset_entry *e = xmalloc(sizeof(*e) + len);
	memcpy(e->key, key, len);
	e->node.key = e->key;
	strmap_insert(&s->m, &e->node);
	return true;
}

bool strset_has(const struct strset *s, const char *key)
{
	return strmap_get(&s->m, key) != NULL;
}

void strset_clear(struct strset *s)
{
	for (size_t i = 0; i < s->m.nb; i++)
		for (struct strmap_node *e = s->m.b[i], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	strmap_destroy(&s->m);
}
