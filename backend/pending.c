/*
 * pending.c — what the queue of unpublished operations says about names,
 * for revalidating a directory against the backend (fs/node.c).
 *
 * When another node changes a directory this node has loaded, the front
 * end merges the backend's entries into its own; this node's unpublished
 * changes keep precedence.  backend_pending_scan() tells which: every name
 * in the directory that a pending operation creates, replaces or removes
 * (a create, mkdir, a rename's source or destination, an unlink: the
 * overlay's additions and whiteouts), and every backend node a pending
 * operation touches, with its ancestors, so that a subdirectory with a
 * pending file anywhere below it is kept as this node sees it.
 *
 * Takes be->lock (and bt_lock to walk up the tree), no system call: the
 * front end calls it with its namespace lock held.
 */
#include "backend/pub.h"

#include <stdlib.h>
#include <string.h>

static size_t ptr_hash(const struct bnode *b, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)b * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 17) & (cap - 1);
}

/* Add b; false if it was there already. */
static bool node_put(struct pending_set *s, const struct bnode *b)
{
	if ((s->nnodes + 1) * 2 > s->cap) {
		struct pending_set g = { .cap = s->cap ? s->cap * 2 : 64 };
		g.nodes = xcalloc(g.cap, sizeof(*g.nodes));
		for (size_t i = 0; i < s->cap; i++)
			if (s->nodes[i])
				node_put(&g, s->nodes[i]);
		free(s->nodes);
		s->nodes = g.nodes;
		s->cap = g.cap;
	}
	size_t i = ptr_hash(b, s->cap);
	while (s->nodes[i] && s->nodes[i] != b)
		i = (i + 1) & (s->cap - 1);
	if (s->nodes[i])
		return false;
	s->nodes[i] = b;
	s->nnodes++;
	return true;
}

bool pending_has_node(const struct pending_set *s, const struct bnode *b)
{
	if (!s->cap || !b)
		return false;
	for (size_t i = ptr_hash(b, s->cap); s->nodes[i]; i = (i + 1) & (s->cap - 1))
		if (s->nodes[i] == b)
			return true;
	return false;
}

static void name_put(struct pending_set *s, const char *name)
{
	if (name)
		strset_add(&s->names, name);	/* hashed: a directory may have 10,000s */
}

bool pending_has_name(const struct pending_set *s, const char *name)
{
	return strset_has(&s->names, name);
}

/* b and its ancestors, through each of its names (bt_lock held). */
static void node_up(struct pending_set *s, const struct bnode *b)
{
	for (uint32_t i = 1; b && i < b->nlinks; i++)	/* a file's other names */
		node_up(s, b->links[i].dir);
	for (unsigned depth = 0; b && depth < BNODE_DEPTH_MAX && node_put(s, b); depth++)
		b = bnode_up_locked(b);
}

void backend_pending_scan(struct backend *be, struct bnode *dir, struct pending_set *out)
{
	pthread_mutex_lock(&be->lock);
	pthread_rwlock_rdlock(&be->bt_lock);
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		const struct op *op = list_entry(e, struct op, link);
		if (op->skipped)
			continue;
		if (op->dir == dir)
			name_put(out, op->name);
		if (op->dir2 == dir)
			name_put(out, op->name2);
		node_up(out, op->node);
		node_up(out, op->victim);
		node_up(out, op->dir);
		node_up(out, op->dir2);
	}
	pthread_rwlock_unlock(&be->bt_lock);
	pthread_mutex_unlock(&be->lock);
}

void pending_free(struct pending_set *s)
{
	strset_clear(&s->names);
	free(s->nodes);
	memset(s, 0, sizeof(*s));
}
