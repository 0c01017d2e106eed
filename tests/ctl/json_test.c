/*
 * json_test.c — the one JSON reader (cache/json.h) that recovery, verify,
 * the CLIs and these tests use: it accepts what RFC 8259 allows for a flat
 * object and refuses everything else, so a lenient reading can never let
 * malformed stats or a hostile manifest record pass; and sb_json_str's
 * output reads back to the same bytes for any name.  No mount.
 */
#include "tests/ctl/ctl_util.h"
#include "cache/util.h"

static void accepts(const char *text)
{
	struct json_obj v;
	char err[128];

	if (json_parse(text, strlen(text), &v, err, sizeof(err)) < 0)
		FAILF("refused valid JSON %s: %s", text, err);
	json_free(&v);
}

static void refuses(const char *text, size_t len)
{
	struct json_obj v;
	char err[128];

	if (json_parse(text, len, &v, err, sizeof(err)) == 0)
		FAILF("accepted invalid or non-flat JSON: %.*s", (int)len, text);
	ASSERT_TRUE(err[0] != '\0');
	ASSERT_EQ(v.n, 0);
}

/* sb_json_str(bytes) must parse back to exactly those bytes. */
static void round_trip(const char *bytes)
{
	struct strbuf b = { 0 };
	struct json_obj o;
	char err[128];

	sb_printf(&b, "{\"path\": ");
	sb_json_str(&b, bytes);
	sb_printf(&b, "}");
	for (size_t i = 0; i < b.len; i++)
		if ((unsigned char)b.s[i] < 0x20)
			FAILF("raw control byte 0x%02x in %s", (unsigned char)b.s[i], b.s);
	if (json_parse(b.s, b.len, &o, err, sizeof(err)) < 0)
		FAILF("sb_json_str wrote invalid JSON %s: %s", b.s, err);
	ASSERT_TRUE(json_str(&o, "path") != NULL);
	if (strcmp(json_str(&o, "path"), bytes) != 0)
		FAILF("%s read back as other bytes", b.s);
	json_free(&o);
	sb_free(&b);
}

int main(void)
{
	static const char *const good[] = {
		"{}", " {\"a\": 1}\n", "{\"a\":-0}", "{\"a\": 1.5e10, \"b\": -2E-3, \"c\": 1e+2}",
		"{\"s\": \"\"}", "{\"t\": true, \"f\": false, \"n\": null}",
		"{\"u\": \"\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", "{\"raw\": \"\xdc\xff\"}",
		"{\"esc\": \"\\udc80\\udcff\"}",
	};
	static const char *const bad[] = {
		"", " ", "{", "{\"a\": 1,}", "[]", "[1]", "0", "\"s\"", "true", "null",
		"{\"a\": [1]}", "{\"a\": {\"b\": 1}}", "{\"a\": 01}", "{\"a\": -}", "{\"a\": 1.}",
		"{\"a\": .5}", "{\"a\": 1e}", "{\"a\": +1}", "{a: 1}", "{'a': 1}", "{\"a\": \"\\x\"}",
		"{\"a\": \"\\u12g4\"}", "{\"a\": \"\\udc00\"}", "{\"a\": \"\\udc7f\"}",
		"{\"a\": \"\\ud800x\"}", "{\"a\": \"\\ud800\\u0041\"}", "{\"a\": \"tab\there\"}",
		"{\"a\": 1} x", "{\"a\": 1}{}", "{\"a\": 1, \"a\": 2}", "{\"a\": tru}", "{\"a\": nul}",
		"{\"a\": NaN}", "{\"a\": Infinity}", "{\"a\" 1}", "{\"a\": }", "{\"a\": \"\\u00",
		"{\"a\": \"\\", "{\"a\": \"abc", "{\"a\": 1", "{\"\\u0000\": 1}",
	};
	struct json_obj v;
	char err[128];
	uint64_t u;
	double d;
	bool b;
	const char *doc = "{\"n\": 268435456, \"s\": \"a\\u00e9\", \"b\": false, \"z\": null, "
			  "\"big\": 18446744073709551615, \"neg\": -1, \"frac\": 1.5, \"nul\": \"a\\u0000b\"}";

	for (size_t i = 0; i < CKPT_ARRAY_LEN(good); i++)
		accepts(good[i]);
	for (size_t i = 0; i < CKPT_ARRAY_LEN(bad); i++)
		refuses(bad[i], strlen(bad[i]));
	/* Given with their lengths: a raw newline or NUL inside a string, and a NUL after. */
	refuses("{\"a\": \"x\ny\"}", 12);
	refuses("{\"a\": \"x\0y\"}", 12);
	refuses("{\"a\": 1}\0", 9);
	/* Length-bounded: a prefix is not the object, whatever follows it in memory. */
	refuses("{\"a\": 1}", 7);

	/* Values and lookups. */
	ct_parse_object(doc, strlen(doc), &v, "doc");
	ASSERT_EQ(ct_num(&v, "n"), 268435456);
	ASSERT_STR_EQ(ct_str(&v, "s"), "a\xc3\xa9");
	ASSERT_TRUE(!ct_bool(&v, "b"));
	ASSERT_EQ(json_get(&v, "z")->type, JSON_NULL);
	ASSERT_TRUE(json_get(&v, "missing") == NULL);
	ASSERT_TRUE(json_u64(&v, "big", &u) && u == UINT64_MAX);
	ASSERT_TRUE(!json_u64(&v, "neg", &u) && !json_u64(&v, "frac", &u) && !json_u64(&v, "s", &u));
	ASSERT_TRUE(json_num(&v, "frac", &d) && d == 1.5);
	ASSERT_TRUE(json_bool(&v, "b", &b) && !b);
	/* A string with a NUL inside is never handed out as a (shorter) C string. */
	ASSERT_TRUE(json_str(&v, "nul") == NULL);
	ASSERT_EQ(json_get(&v, "nul")->len, 3);
	json_free(&v);
	/* 2^64 does not fit. */
	ct_parse_object("{\"x\": 18446744073709551616}", 27, &v, "doc");
	ASSERT_TRUE(!json_u64(&v, "x", &u));
	json_free(&v);

	/* Any bytes a name can hold round-trip through sb_json_str. */
	static const char *const names[] = {
		"plain", "quote\"back\\slash", "new\nline\ttab\rcr\bbs\fff", "\x01\x02\x1f\x7f",
		"bad utf8 \xff\xfe \x80 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82", "caf\xc3\xa9 \xf0\x9f\x98\x80",
		"\xdc\x80 looks like an escape", "\\udcff literally",
	};
	for (size_t i = 0; i < CKPT_ARRAY_LEN(names); i++)
		round_trip(names[i]);
	char all[256];
	for (int i = 1; i < 256; i++)
		all[i - 1] = (char)i;
	all[255] = '\0';
	round_trip(all);
	/* Escaped as the docs say: invalid bytes as \udcXX, controls as \u00XX. */
	struct strbuf sb = { 0 };
	sb_json_str(&sb, "\xff\x01");
	ASSERT_STR_EQ(sb.s, "\"\\udcff\\u0001\"");
	sb_free(&sb);
	(void)err;
	printf("json: %zu accepted, %zu refused, %zu names round-tripped\n", CKPT_ARRAY_LEN(good),
	       CKPT_ARRAY_LEN(bad) + 4, CKPT_ARRAY_LEN(names) + 1);
	return 0;
}
