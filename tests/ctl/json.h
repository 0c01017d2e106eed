/*
 * json.h — a small, strict JSON reader for the control-interface tests.
 *
 * The tests must not trust the daemon's own JSON reader (fs/cli.c reads
 * flat objects leniently) to judge the daemon's JSON, so this one follows
 * RFC 8259's grammar to the letter and refuses anything else: trailing
 * commas, leading zeros, bare words, unescaped control characters, bad
 * escapes or lone surrogates, and any text after the value; it also refuses
 * duplicate keys in an object (which the RFC only discourages).  Raw bytes
 * inside strings are passed through without checking that they are UTF-8.
 * It builds a tree; the tests look values up by key.
 */
#ifndef CKPTFS_TESTS_CTL_JSON_H
#define CKPTFS_TESTS_CTL_JSON_H

#include <stdbool.h>
#include <stddef.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype type;
	bool b;			/* J_BOOL */
	double num;		/* J_NUM */
	char *str;		/* J_STR (UTF-8, NUL-terminated) */
	size_t n;		/* J_ARR, J_OBJ: number of items */
	char **keys;		/* J_OBJ: n keys */
	struct jval *items;	/* J_ARR, J_OBJ: n values */
};

/*
 * Parse exactly one JSON value filling text[0, len) (white space around it
 * allowed).  0, or -EINVAL with a message naming the byte offset in err.
 */
int json_parse(const char *text, size_t len, struct jval *out, char *err, size_t errlen);
void json_free(struct jval *v);
/* The member `key` of an object, or NULL (also when v is not an object). */
const struct jval *json_get(const struct jval *v, const char *key);
const char *json_type_name(enum jtype t);

#endif
