/*
 * json_test.c — the strict JSON reader that judges the daemon's output
 * (json.c) accepts what RFC 8259 allows and refuses what it does not, so a
 * lenient reader can never let malformed stats pass.  No mount.
 */
#include "tests/ctl/ctl_util.h"

static void accepts(const char *text)
{
	struct jval v;
	char err[128];

	if (json_parse(text, strlen(text), &v, err, sizeof(err)) < 0)
		FAILF("refused valid JSON %s: %s", text, err);
	json_free(&v);
}

static void refuses(const char *text)
{
	struct jval v;
	char err[128];

	if (json_parse(text, strlen(text), &v, err, sizeof(err)) == 0)
		FAILF("accepted invalid JSON: %s", text);
	ASSERT_TRUE(err[0] != '\0');
}

int main(void)
{
	static const char *const good[] = {
		"{}", "[]", " {\"a\": 1}\n", "0", "-0", "1.5e10", "-2E-3", "1e+2", "\"\"", "true",
		"null", "[1, [2, {\"x\": [false]}]]", "\"\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
		"{\"a\": {\"a\": 1}}",
	};
	static const char *const bad[] = {
		"", " ", "{", "{\"a\": 1,}", "[1,]", "[1 2]", "01", "-", "1.", ".5", "1e", "+1",
		"{a: 1}", "{'a': 1}", "\"\\x\"", "\"\\u12g4\"", "\"\\udc00\"", "\"\\ud800x\"",
		"\"tab\there\"", "{\"a\": 1} x", "{\"a\": 1}{}", "{\"a\": 1, \"a\": 2}", "tru",
		"nul", "NaN", "Infinity", "[-]", "{\"a\" 1}", "{\"a\": }",
		"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
	};
	struct jval v;
	char err[128];
	const char *doc = "{\"n\": 268435456, \"s\": \"a\\u00e9\", \"b\": false, \"z\": null}";

	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
		accepts(good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		refuses(bad[i]);
	/* An unescaped control byte inside a string, given with its length. */
	ASSERT_EQ(json_parse("\"a\nb\"", 5, &v, err, sizeof(err)), -EINVAL);

	/* Values and lookups. */
	ct_parse_object(doc, strlen(doc), &v, "doc");
	ASSERT_EQ(ct_num(&v, "n"), 268435456);
	ASSERT_STR_EQ(ct_str(&v, "s"), "a\xc3\xa9");
	ASSERT_TRUE(!ct_bool(&v, "b"));
	ASSERT_EQ(json_get(&v, "z")->type, J_NULL);
	ASSERT_TRUE(json_get(&v, "missing") == NULL);
	json_free(&v);
	printf("json: %zu accepted, %zu refused\n", sizeof(good) / sizeof(*good),
	       sizeof(bad) / sizeof(*bad));
	return 0;
}
