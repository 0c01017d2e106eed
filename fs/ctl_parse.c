/*
 * ctl_parse.c — the control-file command parser (see ctl_parse.h).
 *
 * Everything is bounded by len: the buffer need not be NUL-terminated and
 * is never read past its end; numbers are parsed digit by digit with
 * explicit overflow checks (no strtod, so no NaN, infinities, exponents or
 * out-of-range conversions).  Error messages quote at most a short,
 * sanitised prefix of the input, so a hostile write cannot put a newline
 * or a control character into the answer.
 */
#include "fs/ctl_parse.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *ctl_cmd_name(enum ctl_cmd_kind k)
{
	static const char *const names[] = { "sync", "flush", "retry", "skip", "timeout",
					      "ack-lost" };
	return (unsigned)k < sizeof(names) / sizeof(*names) ? names[k] : "?";
}

/* The start of s[0, n) made printable, for a message. */
static void shown(const char *s, size_t n, char *out, size_t outlen)
{
	size_t k = 0;

	for (size_t i = 0; i < n && i < 24 && k + 4 < outlen; i++)
		out[k++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (n > 24 && k + 4 < outlen) {
		memcpy(out + k, "...", 3);
		k += 3;
	}
	out[k] = '\0';
}

static int fail(char *err, size_t errlen, const char *fmt, const char *what, size_t n)
{
	char s[40];

	shown(what, n, s, sizeof(s));
	if (errlen)
		snprintf(err, errlen, fmt, s);
	return -EINVAL;
}

static bool word(const char *b, size_t n, const char *w)
{
	size_t k = strlen(w);
	return n == k && memcmp(b, w, k) == 0;
}

static bool prefix(const char *b, size_t n, const char *w)
{
	size_t k = strlen(w);
	return n >= k && memcmp(b, w, k) == 0;
}

/* A decimal SECONDS[.FRACTION] into ns; false if malformed or too large. */
static bool seconds_ns(const char *s, size_t n, uint64_t *ns)
{
	uint64_t sec = 0, frac = 0, scale = 1000000000ull;
	size_t i = 0, digits = 0;

	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
		sec = sec * 10 + (uint64_t)(s[i] - '0');
		if (sec > CTL_TIMEOUT_MAX)
			return false;
	}
	if (i < n && s[i] == '.') {
		size_t f = 0;
		for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++, f++) {
			if (f >= 9)
				return false;
			scale /= 10;
			frac += (uint64_t)(s[i] - '0') * scale;
		}
		if (!f)
			return false;
		digits += f;
	}
	if (!digits || i != n)
		return false;
	*ns = sec * 1000000000ull + frac;
	return true;
}

int ctl_cmd_parse(const char *buf, size_t len, struct ctl_cmd *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (errlen)
		err[0] = '\0';
	if (len && buf[len - 1] == '\n')
		len--;
	if (memchr(buf, '\0', len))
		return fail(err, errlen, "a NUL byte in the command '%s'", buf, len);
	if (word(buf, len, "sync")) {
		out->kind = CTL_CMD_SYNC;
		return 0;
	}
	if (word(buf, len, "retry")) {
		out->kind = CTL_CMD_RETRY;
		return 0;
	}
	if (word(buf, len, "ack-lost")) {
		out->kind = CTL_CMD_ACK_LOST;
		return 0;
	}
	if (prefix(buf, len, "flush ")) {
		const char *p = buf + 6;
		size_t n = len - 6;
		while (n && *p == '/') {
			p++;
			n--;
		}
		if (!n)
			return fail(err, errlen, "flush needs a PATH inside the mount%s", "", 0);
		if (n >= CTL_PATH_MAX)
			return fail(err, errlen, "flush: the PATH is too long%s", "", 0);
		out->kind = CTL_CMD_FLUSH;
		memcpy(out->path, p, n);
		out->path[n] = '\0';
		return 0;
	}
	if (prefix(buf, len, "skip ")) {
		const char *p = buf + 5;
		size_t n = len - 5;
		uint64_t v = 0;
		if (!n || n > 20)
			return fail(err, errlen, "skip needs a sequence number, not '%s'", p, n);
		for (size_t i = 0; i < n; i++) {
			unsigned d = (unsigned)(p[i] - '0');
			if (d > 9 || v > (UINT64_MAX - d) / 10)
				return fail(err, errlen, "skip needs a sequence number, not '%s'", p, n);
			v = v * 10 + d;
		}
		if (!v)
			return fail(err, errlen, "skip: sequence numbers start at 1, not '%s'", p, n);
		out->kind = CTL_CMD_SKIP;
		out->seq = v;
		return 0;
	}
	{
		const char *v = prefix(buf, len, "timeout=") ? buf + 8 : buf;
		size_t n = len - (size_t)(v - buf);
		if (seconds_ns(v, n, &out->timeout_ns)) {
			out->kind = CTL_CMD_TIMEOUT;
			return 0;
		}
		if (v != buf)
			return fail(err, errlen, "timeout= needs seconds (0 to 1000000000, "
				    "e.g. 2.5), not '%s'", v, n);
	}
	return fail(err, errlen, "unknown command '%s'; try: sync | flush PATH | retry | skip SEQ | "
		    "ack-lost",
		    buf, len);
}
