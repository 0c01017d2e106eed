/*
 * log.h — the daemon's log: stderr in the foreground, syslog once daemonized.
 *
 * State changes (mounted, degraded, recovered, drained, unmounted) are logged
 * once each; repeated conditions go through ckpt_log_limited(), which lets one
 * line per key through per interval and counts what it suppressed.
 */
#ifndef CKPTFS_LOG_H
#define CKPTFS_LOG_H

#include <stdint.h>
#include <syslog.h>

void ckpt_log_init(const char *ident, int to_syslog, int debug);
void ckpt_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A rate limiter: one message per interval_ns; *state is zero-initialised. */
struct ckpt_ratelimit {
	uint64_t last_ns;
	uint64_t suppressed;
};
void ckpt_log_limited(struct ckpt_ratelimit *rl, uint64_t interval_ns, int prio,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define log_err(...) ckpt_log(LOG_ERR, __VA_ARGS__)
#define log_warn(...) ckpt_log(LOG_WARNING, __VA_ARGS__)
#define log_info(...) ckpt_log(LOG_INFO, __VA_ARGS__)
#define log_debug(...) ckpt_log(LOG_DEBUG, __VA_ARGS__)

#endif
