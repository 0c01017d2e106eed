/*
 * log.c — stderr or syslog, with a small rate limiter.  See log.h.
 *
 * Lock order: log_lock is a leaf; nothing is called while holding it.
 */
#include "cache/log.h"
#include "cache/util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int log_syslog;
static int log_debug;
static const char *log_ident = "ckptfs";
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void ckpt_log_init(const char *ident, int to_syslog, int debug)
{
	log_ident = ident;
	log_syslog = to_syslog;
	log_debug = debug;
	if (to_syslog)
		openlog(ident, LOG_PID, LOG_DAEMON);
}

static void vlog(int prio, const char *fmt, va_list ap)
{
	if (prio == LOG_DEBUG && !log_debug)
		return;
	if (log_syslog) {
		vsyslog(prio, fmt, ap);
		return;
	}
	char line[1024];
	vsnprintf(line, sizeof(line), fmt, ap);
	pthread_mutex_lock(&log_lock);
	fprintf(stderr, "%s: %s\n", log_ident, line);
	pthread_mutex_unlock(&log_lock);
}

void ckpt_log(int prio, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(prio, fmt, ap);
	va_end(ap);
}

void ckpt_log_limited(struct ckpt_ratelimit *rl, uint64_t interval_ns, int prio,
		      const char *fmt, ...)
{
	uint64_t now = now_ns(), suppressed;
	va_list ap;

	pthread_mutex_lock(&log_lock);
	if (rl->last_ns && now - rl->last_ns < interval_ns) {
		rl->suppressed++;
		pthread_mutex_unlock(&log_lock);
		return;
	}
	suppressed = rl->suppressed;
	rl->suppressed = 0;
	rl->last_ns = now;
	pthread_mutex_unlock(&log_lock);
	va_start(ap, fmt);
	vlog(prio, fmt, ap);
	va_end(ap);
	if (suppressed)
		ckpt_log(prio, "(%llu similar messages suppressed)",
			 (unsigned long long)suppressed);
}
