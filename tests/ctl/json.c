/*
 * json.c — the strict JSON reader of the control-interface tests (json.h).
 *
 * Recursive descent over RFC 8259's grammar, one function per production.
 * The reader keeps a cursor and the first error; once an error is set every
 * function returns at once, so callers check it only at the end.  Nesting
 * is capped (JSON_MAX_DEPTH) so hostile input cannot exhaust the stack.
 */
#include "tests/ctl/json.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

struct reader {
	const char *s;
	size_t len, pos;
	int depth;
	char *err;
	size_t errlen;
	bool failed;
};

/* Record the first error; returns false so callers can `return fail(...)`. */
static bool fail(struct reader *r, const char *what)
{
	if (!r->failed)
		snprintf(r->err, r->errlen, "%s at byte %zu", what, r->pos);
	r->failed = true;
	return false;
}

/* The same, for functions that answer a number or -1. */
static int fail_code(struct reader *r, const char *what)
{
	fail(r, what);
	return -1;
}

static int peek(const struct reader *r)
{
	return r->pos < r->len ? (unsigned char)r->s[r->pos] : -1;
}

static void skip_ws(struct reader *r)
{
	while (r->pos < r->len && strchr(" \t\n\r", r->s[r->pos]) && r->s[r->pos])
		r->pos++;
}

static bool eat(struct reader *r, char c)
{
	if (peek(r) != (unsigned char)c)
		return false;
	r->pos++;
	return true;
}

static bool literal(struct reader *r, const char *word)
{
	size_t n = strlen(word);
	if (r->len - r->pos < n || memcmp(r->s + r->pos, word, n) != 0)
		return fail(r, "unknown literal");
	r->pos += n;
	return true;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* number = [ "-" ] int [ frac ] [ exp ] ; int = "0" / digit1-9 *digit */
static bool number(struct reader *r, struct jval *v)
{
	size_t start = r->pos;
	char buf[128];

	eat(r, '-');
	if (eat(r, '0')) {
		if (is_digit(peek(r)))
			return fail(r, "leading zero in a number");
	} else if (is_digit(peek(r))) {
		while (is_digit(peek(r)))
			r->pos++;
	} else {
		return fail(r, "expected a digit");
	}
	if (eat(r, '.')) {
		if (!is_digit(peek(r)))
			return fail(r, "expected a digit after the decimal point");
		while (is_digit(peek(r)))
			r->pos++;
	}
	if (eat(r, 'e') || eat(r, 'E')) {
		if (!eat(r, '+'))
			eat(r, '-');
		if (!is_digit(peek(r)))
			return fail(r, "expected a digit in the exponent");
		while (is_digit(peek(r)))
			r->pos++;
	}
	if (r->pos - start >= sizeof(buf))
		return fail(r, "number too long");
	memcpy(buf, r->s + start, r->pos - start);
	buf[r->pos - start] = '\0';
	v->type = J_NUM;
	v->num = strtod(buf, NULL);
	return true;
}

static int hex4(struct reader *r)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		int c = peek(r), d;
		if (is_digit(c))
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return fail_code(r, "bad \\u escape");
		v = v * 16 + (unsigned)d;
		r->pos++;
	}
	return (int)v;
}

/* Append code point cp as UTF-8. */
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

/* An escape after the backslash: its code point, or -1. */
static long escape(struct reader *r)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	int c = peek(r);
	const char *k = c > 0 ? strchr(from, c) : NULL;
	int hi, lo;

	r->pos++;
	if (k && *k)
		return (unsigned char)to[k - from];
	if (c != 'u')
		return fail_code(r, "bad escape");
	if ((hi = hex4(r)) < 0)
		return -1;
	if (hi >= 0xDC00 && hi <= 0xDFFF)
		return fail_code(r, "lone low surrogate");
	if (hi < 0xD800 || hi > 0xDBFF)
		return hi;
	if (!eat(r, '\\') || !eat(r, 'u') || (lo = hex4(r)) < 0 || lo < 0xDC00 || lo > 0xDFFF)
		return fail_code(r, "high surrogate without a low one");
	return 0x10000 + ((long)(hi - 0xD800) << 10) + (lo - 0xDC00);
}

/* string = quotation-mark *char quotation-mark; returns malloc'd UTF-8. */
static char *string(struct reader *r)
{
	char *out = malloc(r->len - r->pos + 1);	/* escapes only shrink */
	size_t n = 0;

	if (!out || !eat(r, '"')) {
		free(out);
		fail(r, "expected a string");
		return NULL;
	}
	for (;;) {
		int c = peek(r);
		if (c < 0) {
			fail(r, "unterminated string");
			break;
		}
		if (c < 0x20) {
			fail(r, "unescaped control character in a string");
			break;
		}
		r->pos++;
		if (c == '"')
			break;
		if (c != '\\') {
			out[n++] = (char)c;
			continue;
		}
		long cp = escape(r);
		if (cp < 0)
			break;
		n += put_utf8(out + n, (uint32_t)cp);
	}
	out[n] = '\0';
	if (r->failed) {
		free(out);
		return NULL;
	}
	return out;
}

static bool value(struct reader *r, struct jval *v);

static struct jval *push(struct jval *v)
{
	v->items = realloc(v->items, (v->n + 1) * sizeof(*v->items));
	if (v->type == J_OBJ)
		v->keys = realloc(v->keys, (v->n + 1) * sizeof(*v->keys));
	memset(&v->items[v->n], 0, sizeof(*v->items));
	return &v->items[v->n++];
}

/* The members or elements between the brackets: `open` already eaten. */
static bool container(struct reader *r, struct jval *v, char close)
{
	skip_ws(r);
	if (eat(r, close))
		return true;
	for (;;) {
		char *key = NULL;
		skip_ws(r);
		if (v->type == J_OBJ) {
			if (!(key = string(r)))
				return false;
			if (json_get(v, key)) {
				free(key);
				return fail(r, "duplicate key");
			}
			skip_ws(r);
			if (!eat(r, ':')) {
				free(key);
				return fail(r, "expected ':'");
			}
		}
		struct jval *item = push(v);
		if (key)
			v->keys[v->n - 1] = key;
		if (!value(r, item))
			return false;
		skip_ws(r);
		if (eat(r, close))
			return true;
		if (!eat(r, ','))
			return fail(r, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static bool value(struct reader *r, struct jval *v)
{
	bool ok;
	int c;

	memset(v, 0, sizeof(*v));
	if (r->depth >= JSON_MAX_DEPTH)
		return fail(r, "nested too deeply");
	r->depth++;
	skip_ws(r);
	c = peek(r);
	if (c == '{' || c == '[') {
		r->pos++;
		v->type = c == '{' ? J_OBJ : J_ARR;
		ok = container(r, v, c == '{' ? '}' : ']');
	} else if (c == '"') {
		v->type = J_STR;
		ok = (v->str = string(r)) != NULL;
	} else if (c == 't' || c == 'f') {
		v->type = J_BOOL;
		v->b = c == 't';
		ok = literal(r, v->b ? "true" : "false");
	} else if (c == 'n') {
		ok = literal(r, "null");
	} else if (c == '-' || is_digit(c)) {
		ok = number(r, v);
	} else {
		ok = fail(r, c < 0 ? "unexpected end of input" : "unexpected character");
	}
	r->depth--;
	return ok;
}

int json_parse(const char *text, size_t len, struct jval *out, char *err, size_t errlen)
{
	struct reader r = { .s = text, .len = len, .err = err, .errlen = errlen };

	if (errlen)
		err[0] = '\0';
	if (value(&r, out)) {
		skip_ws(&r);
		if (r.pos != len)
			fail(&r, "text after the value");
	}
	if (r.failed) {
		json_free(out);
		return -EINVAL;
	}
	return 0;
}

void json_free(struct jval *v)
{
	for (size_t i = 0; i < v->n; i++) {
		if (v->keys)
			free(v->keys[i]);
		json_free(&v->items[i]);
	}
	free(v->keys);
	free(v->items);
	free(v->str);
	memset(v, 0, sizeof(*v));
}

const struct jval *json_get(const struct jval *v, const char *key)
{
	if (v->type != J_OBJ)
		return NULL;
	for (size_t i = 0; i < v->n; i++)
		if (v->keys[i] && strcmp(v->keys[i], key) == 0)
			return &v->items[i];
	return NULL;
}

const char *json_type_name(enum jtype t)
{
	static const char *const names[] = { "null", "boolean", "number", "string", "array",
					     "object" };
	return names[t];
}
