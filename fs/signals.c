/*
 * signals.c — the signals that stop the daemon (SIGINT, SIGTERM, SIGHUP),
 * taken by one thread with sigwaitinfo(), never by a handler.
 *
 * A handler runs in whichever thread does not block the signal, and the
 * daemon's backend threads start before the session exists, so they could
 * not block it selectively.  Under ThreadSanitizer a handler is deferred to
 * that thread's next intercepted call, and a thread that exits first (the
 * readahead setter, a bcall helper) drops it: the daemon served on after
 * SIGTERM (test partial hung 1 run in ~40).  So main() blocks the three
 * before it starts any thread, every thread inherits the block, and this
 * thread alone takes them:
 *   - before fs_signals_serve(se): nothing is mounted; the signal ends the
 *     process as it would without ckptfs (default action, re-raised);
 *   - serving: it ends the session (fs_serve returns, main drains);
 *   - fs_signals_serve(NULL), the exit's drain: logged and ignored (the
 *     drain is bounded by drain_timeout, the last steps by the exit guard).
 */
#include "fs/fs.h"
#include "cache/log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

enum { SIG_STARTING, SIG_SERVING, SIG_DRAINING };

static struct {
	pthread_mutex_t lock;	/* se and phase; held while acting on a signal */
	struct fuse_session *se;
	int phase;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void stop_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
}

static void die_by(int sig)
{
	sigset_t one;

	signal(sig, SIG_DFL);
	sigemptyset(&one);
	sigaddset(&one, sig);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	_exit(128 + sig);	/* not reached: the default action of all three ends the process */
}

static void *signals_main(void *arg)
{
	sigset_t set;

	(void)arg;
	stop_set(&set);
	for (;;) {
		int sig = sigwaitinfo(&set, NULL);
		if (sig < 0)
			continue;	/* EINTR: a signal this thread does not block (none is expected) */
		pthread_mutex_lock(&S.lock);
		switch (S.phase) {
		case SIG_STARTING:
			die_by(sig);
			break;
		case SIG_SERVING:
			log_info("%s: unmounting, then draining what was closed", strsignal(sig));
			fuse_session_exit(S.se);
			break;
		default:
			log_info("%s while draining: the drain goes on (bounded by drain_timeout)",
				 strsignal(sig));
			break;
		}
		pthread_mutex_unlock(&S.lock);
	}
	return NULL;
}

int fs_signals_start(void)
{
	sigset_t set;
	pthread_t th;
	int r;

	signal(SIGPIPE, SIG_IGN);	/* a peer that closed a socket or pipe: EPIPE, not death */
	stop_set(&set);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if ((r = pthread_create(&th, NULL, signals_main, NULL)) != 0)
		return -r;
	pthread_detach(th);	/* it lives until the process exits */
	return 0;
}

void fs_signals_serve(struct fuse_session *se)
{
	pthread_mutex_lock(&S.lock);
	S.se = se;
	S.phase = se ? SIG_SERVING : SIG_DRAINING;
	pthread_mutex_unlock(&S.lock);
}
