/*
 * json.c — the strict reader of flat JSON objects (json.h).
 *
 * One pass over text[0, len) with a cursor that never goes past len: each
 * byte is looked at a bounded number of times, so hostile input costs time
 * linear in its length.  The first error is recorded with its offset and
 * every step returns at once after it.  Strings are decoded into a buffer
 * sized by the bytes they span (escapes only shrink), so memory is bounded
 * by the input's length.
 */
#include "cache/json.h"
#include "cache/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jreader {
	const char *s;
	size_t len, pos;
	char *err;
	size_t errlen;
	bool failed;
};

static bool jfail(struct jreader *r, const char *what)
{
	if (!r->failed && r->err && r->errlen)
		snprintf(r->err, r->errlen, "%s at byte %zu", what, r->pos);
	r->failed = true;
	return false;
}

static int jpeek(const struct jreader *r)
{
	return r->pos < r->len ? (unsigned char)r->s[r->pos] : -1;
}

static bool jeat(struct jreader *r, char c)
{
	if (jpeek(r) != (unsigned char)c)
		return false;
	r->pos++;
	return true;
}

static void jskip_ws(struct jreader *r)
{
	while (r->pos < r->len && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' ||
				   r->s[r->pos] == '\n' || r->s[r->pos] == '\r'))
		r->pos++;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Four hex digits after "\u": the value, or -1. */
static long jhex4(struct jreader *r)
{
	long v = 0;

	if (r->len - r->pos < 4) {
		jfail(r, "short \\u escape");
		return -1;
	}
	for (int i = 0; i < 4; i++) {
		int d = hexval((unsigned char)r->s[r->pos]);
		if (d < 0) {
			jfail(r, "bad \\u escape");
			return -1;
		}
		v = v * 16 + d;
		r->pos++;
	}
	return v;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/*
 * The escape after a backslash, written to o: its length in bytes, or 0
 * on error.  \udc80..\udcff alone stand for one raw byte (json.h).
 */
static size_t jescape(struct jreader *r, char *o)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	int c = jpeek(r);
	const char *k = c > 0 ? memchr(from, c, sizeof(from) - 1) : NULL;
	long hi, lo;

	if (c < 0) {
		jfail(r, "unterminated escape");
		return 0;
	}
	r->pos++;
	if (k) {
		o[0] = to[k - from];
		return 1;
	}
	if (c != 'u') {
		jfail(r, "bad escape");
		return 0;
	}
	if ((hi = jhex4(r)) < 0)
		return 0;
	if (hi >= 0xDC00 && hi <= 0xDFFF) {
		if (hi < 0xDC80 || hi > 0xDCFF) {
			jfail(r, "lone low surrogate");
			return 0;
		}
		o[0] = (char)(hi - 0xDC00);	/* an escaped raw byte */
		return 1;
	}
	if (hi < 0xD800 || hi > 0xDBFF)
		return put_utf8(o, (uint32_t)hi);
	if (!jeat(r, '\\') || !jeat(r, 'u')) {
		jfail(r, "high surrogate without a low one");
		return 0;
	}
	if ((lo = jhex4(r)) < 0)
		return 0;
	if (lo < 0xDC00 || lo > 0xDFFF) {
		jfail(r, "high surrogate without a low one");
		return 0;
	}
	return put_utf8(o, (uint32_t)(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)));
}

/* string = quotation-mark *char quotation-mark; malloc'd bytes in *out. */
static bool jstring(struct jreader *r, char **out, size_t *outlen)
{
	size_t start, end, n = 0;
	char *o;

	if (!jeat(r, '"'))
		return jfail(r, "expected a string");
	/* Find the closing quote first, so the buffer is sized by the span. */
	start = r->pos;
	for (end = start; end < r->len && r->s[end] != '"'; end++)
		if (r->s[end] == '\\')
			end++;
	if (end >= r->len)
		return jfail(r, "unterminated string");
	o = xmalloc(end - start + 1);
	while (r->pos < end) {
		unsigned char c = (unsigned char)r->s[r->pos];
		if (c < 0x20) {
			free(o);
			return jfail(r, c ? "unescaped control character in a string"
					  : "NUL byte in a string");
		}
		r->pos++;
		if (c != '\\') {
			o[n++] = (char)c;
			continue;
		}
		/* An escape never runs past the closing quote: it was skipped above. */
		size_t k = jescape(r, o + n);
		if (!k || r->pos > end) {
			free(o);
			return r->failed ? false : jfail(r, "escape runs past the string");
		}
		n += k;
	}
	r->pos = end + 1;
	o[n] = '\0';
	*out = o;
	*outlen = n;
	return true;
}

/* number = [ "-" ] int [ frac ] [ exp ] ; int = "0" / digit1-9 *digit */
static bool jnumber(struct jreader *r, struct json_member *m)
{
	size_t start = r->pos;

	jeat(r, '-');
	if (jeat(r, '0')) {
		if (is_digit(jpeek(r)))
			return jfail(r, "leading zero in a number");
	} else if (is_digit(jpeek(r))) {
		while (is_digit(jpeek(r)))
			r->pos++;
	} else {
		return jfail(r, "expected a digit");
	}
	if (jeat(r, '.')) {
		if (!is_digit(jpeek(r)))
			return jfail(r, "expected a digit after the decimal point");
		while (is_digit(jpeek(r)))
			r->pos++;
	}
	if (jeat(r, 'e') || jeat(r, 'E')) {
		if (!jeat(r, '+'))
			jeat(r, '-');
		if (!is_digit(jpeek(r)))
			return jfail(r, "expected a digit in the exponent");
		while (is_digit(jpeek(r)))
			r->pos++;
	}
	if (r->pos - start > 64)
		return jfail(r, "number too long");
	m->type = JSON_NUM;
	m->len = r->pos - start;
	m->str = xmalloc(m->len + 1);
	memcpy(m->str, r->s + start, m->len);
	m->str[m->len] = '\0';
	m->num = strtod(m->str, NULL);
	return true;
}

static bool jliteral(struct jreader *r, const char *word)
{
	size_t n = strlen(word);
	if (r->len - r->pos < n || memcmp(r->s + r->pos, word, n) != 0)
		return jfail(r, "unknown literal");
	r->pos += n;
	return true;
}

static bool jvalue(struct jreader *r, struct json_member *m)
{
	int c = jpeek(r);

	if (c == '"') {
		m->type = JSON_STR;
		return jstring(r, &m->str, &m->len);
	}
	if (c == 't' || c == 'f') {
		m->type = JSON_BOOL;
		m->b = c == 't';
		return jliteral(r, m->b ? "true" : "false");
	}
	if (c == 'n') {
		m->type = JSON_NULL;
		return jliteral(r, "null");
	}
	if (c == '-' || is_digit(c))
		return jnumber(r, m);
	if (c == '{' || c == '[')
		return jfail(r, "nested value (only flat objects are read)");
	return jfail(r, c < 0 ? "unexpected end of input" : "unexpected character");
}

static bool jmembers(struct jreader *r, struct json_obj *o)
{
	size_t cap = 0;

	jskip_ws(r);
	if (jeat(r, '}'))
		return true;
	for (;;) {
		struct json_member m = { 0 };
		jskip_ws(r);
		if (!jstring(r, &m.key, &m.key_len))
			return false;
		if (json_get(o, m.key) || memchr(m.key, '\0', m.key_len)) {
			free(m.key);
			return jfail(r, "duplicate or NUL-containing key");
		}
		jskip_ws(r);
		if (!jeat(r, ':')) {
			free(m.key);
			return jfail(r, "expected ':'");
		}
		jskip_ws(r);
		if (!jvalue(r, &m)) {
			free(m.key);
			free(m.str);
			return false;
		}
		if (o->n == JSON_MAX_MEMBERS) {
			free(m.key);
			free(m.str);
			return jfail(r, "too many members");
		}
		if (o->n == cap) {
			cap = cap ? cap * 2 : 16;
			o->m = xrealloc(o->m, cap * sizeof(*o->m));
		}
		o->m[o->n++] = m;
		jskip_ws(r);
		if (jeat(r, '}'))
			return true;
		if (!jeat(r, ','))
			return jfail(r, "expected ',' or '}'");
	}
}

int json_parse(const char *text, size_t len, struct json_obj *o, char *err, size_t errlen)
{
	struct jreader r = { .s = text, .len = len, .err = err, .errlen = errlen };

	memset(o, 0, sizeof(*o));
	if (err && errlen)
		err[0] = '\0';
	if (len > JSON_MAX_LEN) {
		jfail(&r, "object too large");
	} else {
		jskip_ws(&r);
		if (!jeat(&r, '{'))
			jfail(&r, jpeek(&r) < 0 ? "empty input" : "expected '{'");
		else if (jmembers(&r, o)) {
			jskip_ws(&r);
			if (r.pos != len)
				jfail(&r, "text after the object");
		}
	}
	if (r.failed) {
		json_free(o);
		return -EINVAL;
	}
	return 0;
}

void json_free(struct json_obj *o)
{
	for (size_t i = 0; i < o->n; i++) {
		free(o->m[i].key);
		free(o->m[i].str);
	}
	free(o->m);
	memset(o, 0, sizeof(*o));
}

const struct json_member *json_get(const struct json_obj *o, const char *key)
{
	for (size_t i = 0; i < o->n; i++)
		if (strcmp(o->m[i].key, key) == 0)
			return &o->m[i];
	return NULL;
}

const char *json_str(const struct json_obj *o, const char *key)
{
	const struct json_member *m = json_get(o, key);
	if (!m || m->type != JSON_STR || memchr(m->str, '\0', m->len))
		return NULL;
	return m->str;
}

bool json_num(const struct json_obj *o, const char *key, double *out)
{
	const struct json_member *m = json_get(o, key);
	if (!m || m->type != JSON_NUM)
		return false;
	*out = m->num;
	return true;
}

bool json_u64(const struct json_obj *o, const char *key, uint64_t *out)
{
	const struct json_member *m = json_get(o, key);
	uint64_t v = 0;

	if (!m || m->type != JSON_NUM || !m->len)
		return false;
	for (size_t i = 0; i < m->len; i++) {
		unsigned d = (unsigned)(m->str[i] - '0');
		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return false;	/* sign, fraction, exponent or overflow */
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

bool json_bool(const struct json_obj *o, const char *key, bool *out)
{
	const struct json_member *m = json_get(o, key);
	if (!m || m->type != JSON_BOOL)
		return false;
	*out = m->b;
	return true;
}

double json_num_or0(const struct json_obj *o, const char *key)
{
	double v = 0;
	return json_num(o, key, &v) ? v : 0;
}

bool json_is_true(const struct json_obj *o, const char *key)
{
	bool b = false;
	return json_bool(o, key, &b) && b;
}

const char *json_type_name(enum json_type t)
{
	static const char *const names[] = { "null", "boolean", "number", "string" };
	return (unsigned)t < CKPT_ARRAY_LEN(names) ? names[t] : "?";
}
