/*
 * fuzz_json.c — libFuzzer target for the one JSON reader (cache/json.h)
 * and the writer it must agree with (sb_json_strn).
 *
 * Properties checked on every input, beyond "no crash, no leak, no
 * undefined behaviour":
 *  - whatever parses re-serialises (sb_json_strn for strings, the literal
 *    for numbers) to text that parses to the same members, bytes for bytes;
 *  - the input taken as raw bytes, written with sb_json_strn, is valid JSON
 *    without raw control bytes that reads back to exactly those bytes.
 */
#include "cache/json.h"
#include "cache/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "property failed: %s\n", #c); abort(); } } while (0)

static void reserialise(const struct json_obj *o)
{
	struct strbuf b = { 0 };
	struct json_obj p;

	sb_printf(&b, "{");
	for (size_t i = 0; i < o->n; i++) {
		const struct json_member *m = &o->m[i];
		sb_printf(&b, "%s", i ? ", " : "");
		sb_json_strn(&b, m->key, m->key_len);
		sb_printf(&b, ": ");
		if (m->type == JSON_STR)
			sb_json_strn(&b, m->str, m->len);
		else if (m->type == JSON_NUM)
			sb_printf(&b, "%s", m->str);
		else if (m->type == JSON_BOOL)
			sb_printf(&b, "%s", m->b ? "true" : "false");
		else
			sb_printf(&b, "null");
	}
	sb_printf(&b, "}");
	CHECK(json_parse(b.s, b.len, &p, NULL, 0) == 0);
	CHECK(p.n == o->n);
	for (size_t i = 0; i < o->n; i++) {
		CHECK(p.m[i].key_len == o->m[i].key_len);
		CHECK(!memcmp(p.m[i].key, o->m[i].key, o->m[i].key_len));
		CHECK(p.m[i].type == o->m[i].type);
		if (o->m[i].type == JSON_STR || o->m[i].type == JSON_NUM) {
			CHECK(p.m[i].len == o->m[i].len);
			CHECK(!memcmp(p.m[i].str, o->m[i].str, o->m[i].len));
		}
		if (o->m[i].type == JSON_BOOL)
			CHECK(p.m[i].b == o->m[i].b);
	}
	json_free(&p);
	sb_free(&b);
}

static void bytes_round_trip(const char *data, size_t size)
{
	struct strbuf b = { 0 };
	struct json_obj o;

	sb_printf(&b, "{\"v\": ");
	sb_json_strn(&b, data, size);
	sb_printf(&b, "}");
	for (size_t i = 0; i < b.len; i++)
		CHECK((unsigned char)b.s[i] >= 0x20);
	CHECK(json_parse(b.s, b.len, &o, NULL, 0) == 0);
	const struct json_member *v = json_get(&o, "v");
	CHECK(v && v->type == JSON_STR && v->len == size && !memcmp(v->str, data, size));
	CHECK((json_str(&o, "v") != NULL) == (memchr(data, '\0', size) == NULL));
	json_free(&o);
	sb_free(&b);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct json_obj o;
	char err[128];

	if (json_parse((const char *)data, size, &o, err, sizeof(err)) == 0) {
		reserialise(&o);
		for (size_t i = 0; i < o.n; i++) {
			uint64_t u;
			double d;
			bool b;
			json_u64(&o, o.m[i].key, &u);
			json_num(&o, o.m[i].key, &d);
			json_bool(&o, o.m[i].key, &b);
			json_str(&o, o.m[i].key);
		}
		json_free(&o);
	} else {
		CHECK(err[0] && !strchr(err, '\n'));
		CHECK(o.n == 0 && o.m == NULL);
	}
	if (size <= 4096)
		bytes_round_trip((const char *)data, size);
	return 0;
}
