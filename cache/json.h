/*
 * json.h — the one JSON reader of ckptfs: flat objects only.
 *
 * Everything ckptfs writes as JSON is a flat object — a manifest record's
 * payload, state.json, the control files (stats, files, drain, ctl), the
 * rescue manifest's lines — so everything that reads it back (recovery,
 * `ckptfs-ctl verify`, the CLIs, the tests) uses this reader and no other.
 *
 * It is strict and length-bounded: it reads exactly text[0, len) (no NUL
 * terminator needed, NUL bytes refused), follows RFC 8259's grammar for an
 * object whose values are strings, numbers, true, false or null, and refuses
 * everything else: nested objects and arrays, trailing commas, leading
 * zeros, bare words, unescaped control characters, bad escapes, duplicate
 * keys, and any text after the object (white space aside).
 *
 * Strings are decoded to bytes.  Raw bytes are passed through unchecked;
 * \uXXXX escapes become UTF-8, except the lone low surrogates \udc80 to
 * \udcff, which decode to the single byte 0x80..0xff: that is how
 * sb_json_str (util.h) writes bytes that are not valid UTF-8, as Python's
 * "surrogateescape" does, so any file name round-trips.  Other lone
 * surrogates are refused.  A decoded string may contain a NUL byte
 * (\u0000); json_str() then answers NULL, so no caller can mistake a
 * truncated name for the real one.
 */
#ifndef CKPTFS_JSON_H
#define CKPTFS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR };

struct json_member {
	char *key;		/* decoded, NUL-terminated */
	size_t key_len;
	enum json_type type;
	char *str;		/* JSON_STR: decoded bytes; JSON_NUM: the literal; NUL-terminated */
	size_t len;		/* of str */
	double num;		/* JSON_NUM */
	bool b;			/* JSON_BOOL */
};

struct json_obj {
	size_t n;
	struct json_member *m;
};

/* Objects larger than this, or with more members, are refused. */
#define JSON_MAX_LEN (16u << 20)
#define JSON_MAX_MEMBERS 1024

/*
 * Parse text[0, len) as one flat object.  0, or -EINVAL with a one-line
 * message naming the byte offset in err (which may be NULL).  On error *o
 * is empty (json_free is still safe).
 */
int json_parse(const char *text, size_t len, struct json_obj *o, char *err, size_t errlen);
void json_free(struct json_obj *o);

/* The member `key`, or NULL. */
const struct json_member *json_get(const struct json_obj *o, const char *key);
/* A string member without NUL bytes, or NULL (absent, another type, or NUL inside). */
const char *json_str(const struct json_obj *o, const char *key);
/* A number member as a double; false if absent or not a number. */
bool json_num(const struct json_obj *o, const char *key, double *out);
/* A number member that is a non-negative integer below 2^64, exactly. */
bool json_u64(const struct json_obj *o, const char *key, uint64_t *out);
/* A true/false member. */
bool json_bool(const struct json_obj *o, const char *key, bool *out);
/* Shorthands: the number (0 when absent), the bool (false when absent). */
double json_num_or0(const struct json_obj *o, const char *key);
bool json_is_true(const struct json_obj *o, const char *key);
const char *json_type_name(enum json_type t);

#endif
