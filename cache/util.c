/*
 * util.c — allocation, clocks, size parsing and /proc/meminfo.  See util.h.
 */
#include "cache/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/resource.h>

static void oom(size_t n)
{
	fprintf(stderr, "ckptfs: out of memory allocating %zu bytes\n", n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom(n * size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

void cond_wait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ns / 1000000000);
	ts.tv_nsec += (long)(ns % 1000000000);
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(c, m, &ts);
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
/*
 * Tests only: CKPTFS_TEST_WALL_AHEAD="MS:UNTIL" runs the wall clock MS
 * milliseconds ahead until CLOCK_MONOTONIC reads UNTIL milliseconds, then
 * steps it back to the real time (tests/multinode/clockstep.c).
 */
static struct {
	uint64_t ahead_ns, until_ns;
} wall_test;
static pthread_once_t wall_test_once = PTHREAD_ONCE_INIT;

static void wall_test_init(void)
{
	const char *e = getenv("CKPTFS_TEST_WALL_AHEAD");
	char *end;
	unsigned long ahead, until;

	if (!e)
		return;
	ahead = strtoul(e, &end, 10);
	if (*end != ':')
		return;
	until = strtoul(end + 1, &end, 10);
	if (*end || !ahead || !until)
		return;
	wall_test.ahead_ns = (uint64_t)ahead * 1000000;
	wall_test.until_ns = (uint64_t)until * 1000000;
}

uint64_t wall_ns(void)
{
	uint64_t w = clock_ns(CLOCK_REALTIME);

	pthread_once(&wall_test_once, wall_test_init);
	if (wall_test.ahead_ns && now_ns() < wall_test.until_ns)
		w += wall_test.ahead_ns;
	return w;
}

int parse_seconds(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	if (!s || !*s || strspn(s, "0123456789.") != strlen(s) || strchr(s, '.') != strrchr(s, '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || end == s || !(v >= lo && v <= hi))
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_whole(const char *s, unsigned long long lo, unsigned long long hi,
		unsigned long long *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || strspn(s, "0123456789") != strlen(s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	uint64_t mult = 1;

	if (!s || !*s || isspace((unsigned char)*s) || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	/* A decimal number (strtod also takes hex, exponents, a sign), then the unit. */
	if (errno || end == s || v < 0 || isnan(v) || strspn(s, "0123456789.") != (size_t)(end - s))
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case 'K': mult = 1ull << 10; end++; break;
	case 'M': mult = 1ull << 20; end++; break;
	case 'G': mult = 1ull << 30; end++; break;
	case 'T': mult = 1ull << 40; end++; break;
	case '\0': break;
	default: return -EINVAL;
	}
	if (mult > 1) {
		if (*end == 'i' && end[1] == 'B')
			end += 2;
		else if (*end == 'B' || *end == 'b')
			end++;
	} else if (*end == 'B' || *end == 'b') {
		end++;
	}
	if (*end)
		return -EINVAL;
	if (v * (double)mult >= 18446744073709551615.0)
		return -ERANGE;
	*out = (uint64_t)(v * (double)mult);
	return 0;
}

const char *format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024 && u + 1 < CKPT_ARRAY_LEN(unit)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

static uint64_t meminfo_field(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[256];
	size_t klen = strlen(key);
	uint64_t kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
			kb = strtoull(line + klen + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return kb * 1024;
}

uint64_t mem_available(void) { return meminfo_field("MemAvailable"); }
uint64_t mem_total(void) { return meminfo_field("MemTotal"); }

int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;	/* EOF before len bytes */
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void sb_printf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		n = vsnprintf(b->s ? b->s + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		b->cap = CKPT_MAX(b->cap * 2, b->len + (size_t)n + 64);
		b->s = xrealloc(b->s, b->cap);
	}
}

void sb_put(struct strbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = CKPT_MAX(b->cap * 2, b->len + n + 64);
		b->s = xrealloc(b->s, b->cap);
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

size_t utf8_valid_len(const char *str, size_t avail)
{
	const unsigned char *s = (const unsigned char *)str;
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return avail >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
	if (c >= 0xE0 && c <= 0xEF) {
		unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
		return avail >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
		return avail >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 &&
		       (s[3] & 0xC0) == 0x80 ? 4 : 0;
	}
	return 0;
}

/*
 * Any bytes make valid JSON: quotes, backslashes and control characters
 * are escaped, well-formed UTF-8 is copied, and every byte that is not
 * part of well-formed UTF-8 is written as the lone surrogate \udcXX (as
 * Python's "surrogateescape" does), which cache/json.c decodes back to the
 * byte.  NUL bytes (sb_json_strn only) are written as \u0000.
 */
void sb_json_str(struct strbuf *b, const char *s)
{
	sb_json_strn(b, s, strlen(s));
}

void sb_json_strn(struct strbuf *b, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	char esc[8];

	sb_put(b, "\"", 1);
	while (p < end) {
		size_t run = 0, k;
		/* Copy the longest run that needs no escaping at once. */
		while (p + run < end && p[run] >= 0x20 && p[run] != '"' && p[run] != '\\' &&
		       (k = utf8_valid_len((const char *)p + run, (size_t)(end - p) - run)))
			run += k;
		if (run) {
			sb_put(b, (const char *)p, run);
			p += run;
			continue;
		}
		switch (*p) {
		case '"': sb_put(b, "\\\"", 2); break;
		case '\\': sb_put(b, "\\\\", 2); break;
		case '\n': sb_put(b, "\\n", 2); break;
		case '\t': sb_put(b, "\\t", 2); break;
		case '\r': sb_put(b, "\\r", 2); break;
		case '\b': sb_put(b, "\\b", 2); break;
		case '\f': sb_put(b, "\\f", 2); break;
		default:
			snprintf(esc, sizeof(esc), "\\u%04x", *p < 0x20 ? *p : 0xDC00u + *p);
			sb_put(b, esc, 6);
		}
		p++;
	}
	sb_put(b, "\"", 1);
}

void sb_free(struct strbuf *b)
{
	free(b->s);
	memset(b, 0, sizeof(*b));
}

void thread_background(const char *name, int nice)
{
	pthread_setname_np(pthread_self(), name);
	if (nice > 0 && setpriority(PRIO_PROCESS, (id_t)gettid(), nice) < 0)
		fprintf(stderr, "ckptfs: %s: cannot lower its priority: %s\n", name, strerror(errno));
}
