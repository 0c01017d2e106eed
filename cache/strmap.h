/*
 * strmap.h — a chained hash map from NUL-terminated strings (paths,
 * mount ids) to intrusive nodes, with the one operation path maps need
 * beyond get/insert/remove: taking a name and everything below it.
 *
 * The node points at a key the owner stores (and keeps stable while the
 * node is in the map); the map owns only its bucket table (the nodes
 * STRMAP_GET_OR_NEW makes, and their keys, are the owner's too).  Not
 * thread-safe: each user keeps its map private (verify's replay, a
 * manifest compaction).
 */
#ifndef CKPTFS_STRMAP_H
#define CKPTFS_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strmap_node {
	struct strmap_node *next;	/* in its bucket; in a list strmap_take_tree returns */
	const char *key;
};

struct strmap {
	struct strmap_node **b;
	size_t nb, n;
	/*
	 * How many keys lie below each directory prefix, by the prefix's hash
	 * (open addressing): strmap_take_tree answers a miss with nothing
	 * below it at once, not with a walk of the table.
	 */
	struct strmap_dir { uint64_t h; size_t keys; } *dirs;
	size_t ndirs, capdirs;
};

/* The node with this key, or NULL. */
struct strmap_node *strmap_get(const struct strmap *m, const char *key);
/*
 * The object of `type` whose strmap_node member `node` has this key in the
 * map m; if there is none and `create`, a new zeroed one, inserted, keyed by
 * a copy of key that it holds in its `char *` member `keyf` (its owner frees
 * both).  NULL if there is none and not `create`.
 */
#define STRMAP_GET_OR_NEW(m, key, create, type, node, keyf)                                 \
	((type *)strmap_get_or_new((m), (key), (create), sizeof(type), offsetof(type, node), \
				   offsetof(type, keyf)))
void *strmap_get_or_new(struct strmap *m, const char *key, bool create, size_t size,
			size_t node_off, size_t key_off);
/* Insert a node whose key is not in the map (the table grows as needed). */
void strmap_insert(struct strmap *m, struct strmap_node *e);
/* Take a node that is in the map out of it. */
void strmap_remove(struct strmap *m, struct strmap_node *e);
/*
 * Take out the node at `key` and every node whose key lies below it
 * ("key/..."), as a list through ->next.  A key with a node of its own has
 * nothing below it in a path map (a file), and a miss with no key below it
 * costs a lookup of its prefix count; only a directory with keys below it
 * costs a walk of the whole table.
 */
struct strmap_node *strmap_take_tree(struct strmap *m, const char *key);
/* Free the table (not the nodes); the map is empty afterwards. */
void strmap_destroy(struct strmap *m);
/* Visit every node: for (i < m->nb) for (e = m->b[i]; e; e = next) — next read first. */

/*
 * A set of strings that owns copies of them, for sets that can grow to
 * tens of thousands of names (a directory's pending names).  Zeroed is empty.
 */
struct strset {
	struct strmap m;
};

/* Add a copy of key; false if it was there already. */
bool strset_add(struct strset *s, const char *key);
bool strset_has(const struct strset *s, const char *key);
/* Free every key and the table; the set is empty afterwards. */
void strset_clear(struct strset *s);

#endif
