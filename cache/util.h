/*
 * util.h — small helpers every module uses: allocation that never returns
 * NULL, monotonic time, size parsing and formatting, a doubly linked list.
 *
 * This is the bottom of the dependency graph: it includes only libc.  Each
 * helper exists once here; modules call it rather than growing their own.
 */
#ifndef CKPTFS_UTIL_H
#define CKPTFS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <time.h>

#define CKPT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CKPT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CKPT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CKPT_CONTAINER_OF(p, type, member) \
	((type *)((char *)(p) - offsetof(type, member)))

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* Monotonic and wall clocks in nanoseconds. */
uint64_t now_ns(void);
static inline bool ts_eq(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}
uint64_t wall_ns(void);

/*
 * Parse "4096", "64K", "1.5G", "2GiB" into bytes (binary units).  Returns 0
 * and sets *out, or -EINVAL for malformed input, -ERANGE on overflow.
 */
int parse_size(const char *s, uint64_t *out);
/*
 * Seconds as users write them: decimal digits with at most one point and
 * nothing else (strtod alone also takes hex, exponents, signs, spaces,
 * "nan"), from lo to hi.  0 and *out, or -EINVAL.
 */
int parse_seconds(const char *s, double lo, double hi, double *out);
/* A whole number, decimal digits only, from lo to hi: 0 and *out, or -EINVAL. */
int parse_whole(const char *s, unsigned long long lo, unsigned long long hi,
		unsigned long long *out);
/* Format bytes as "1.5 GiB" into buf (at least 16 bytes). */
const char *format_size(uint64_t bytes, char *buf, size_t len);

/* Bytes of MemAvailable / MemTotal from /proc/meminfo, 0 if unknown. */
uint64_t mem_available(void);
uint64_t mem_total(void);

/* Write all of buf to fd (retrying EINTR and short writes): 0 or -errno. */
int write_full(int fd, const void *buf, size_t len);
/* Read exactly len bytes (retrying EINTR and short reads): 0, or -errno (-EIO at EOF). */
int read_full(int fd, void *buf, size_t len);

/*
 * Name the calling thread and lower its priority by `nice` (Linux nice is
 * per thread; raising it needs no privilege), best effort: for the daemon's
 * background threads, so that the threads answering the trainer win a busy
 * CPU.
 */
void thread_background(const char *name, int nice);

/* pthread_cond_timedwait for at most ns nanoseconds from now (mutex held). */
struct timespec;
#include <pthread.h>
void cond_wait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns);

/* A growable string (always NUL-terminated). */
struct strbuf {
	char *s;
	size_t len, cap;
};
void sb_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append n bytes of s as they are (NULs included). */
void sb_put(struct strbuf *b, const char *s, size_t n);
/*
 * Append s as a JSON string literal, quotes included.  Any bytes give valid
 * JSON: bytes that are not well-formed UTF-8 become \udc80..\udcff, which
 * cache/json.h decodes back to the same bytes (docs/manifest.md).
 */
void sb_json_str(struct strbuf *b, const char *s);
void sb_json_strn(struct strbuf *b, const char *s, size_t len);
/*
 * Length of the well-formed UTF-8 sequence at s (at most avail bytes; Unicode
 * Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
 */
size_t utf8_valid_len(const char *s, size_t avail);
void sb_free(struct strbuf *b);

/* Intrusive doubly linked list with a sentinel head. */
struct list {
	struct list *prev, *next;
};
static inline void list_init(struct list *h) { h->prev = h->next = h; }
static inline bool list_empty(const struct list *h) { return h->next == h; }
static inline bool list_linked(const struct list *e) { return e->next != NULL && e->next != e; }
static inline void list_add_tail(struct list *h, struct list *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}
static inline void list_del(struct list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e;
}
#define list_entry(p, type, member) CKPT_CONTAINER_OF(p, type, member)

#endif
