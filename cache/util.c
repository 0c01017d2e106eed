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
uint64_t wall_ns(void) { return clock_ns(CLOCK_REALTIME); }

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	uint64_t mult = 1;

	if (!s || !*s || isspace((unsigned char)*s) || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0 || isnan(v))
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

void sb_json_str(struct strbuf *b, const char *s)
{
	sb_printf(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			sb_printf(b, "\\%c", c);
		else if (c < 0x20)
			sb_printf(b, "\\u%04x", c);
		else
			sb_printf(b, "%c", c);
	}
	sb_printf(b, "\"");
}

void sb_free(struct strbuf *b)
{
	free(b->s);
	memset(b, 0, sizeof(*b));
}
