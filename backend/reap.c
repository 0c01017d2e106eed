/*
 * reap.c — the last references of replaced files, put on a thread of their
 * own.
 *
 * Closing the last descriptor of a file that a rename replaced frees its
 * blocks inside close(2): 26-48 ms each for the multi-GiB sparse files of
 * bench/run's randio on this machine's ext4, 1.1-1.3 s of a 2.5 s run spent
 * in the publisher, where every later operation waited for it.  The
 * publisher hands such references over (reap_give) once it has answered the
 * batch's waiters; the reaper puts them.  At most REAP_MAX wait: beyond, the
 * giver puts them itself, so the descriptors held stay bounded.  reap_stop
 * puts whatever is left before the backend is torn down.  A temporary file
 * whose last reference is given (a spill's stage that was not the version's
 * output) loses its name at the give, on the publisher: the next batch may
 * remove its directory, which must not still hold it.
 */
#include "backend/backend.h"

#include <stdlib.h>

#define REAP_MAX 1024

static void *reaper_main(void *arg)
{
	struct backend *be = arg;

	thread_background("ckptfs-reap", (int)be->opt.flush_nice);
	pthread_mutex_lock(&be->reap_lock);
	for (;;) {
		if (be->reapq.n) {
			struct cfd_bin mine = be->reapq;
			be->reapq = (struct cfd_bin){ 0 };
			pthread_mutex_unlock(&be->reap_lock);
			cfd_bin_empty(&mine);
			pthread_mutex_lock(&be->reap_lock);
		} else if (be->reap_stop) {
			break;
		} else {
			pthread_cond_wait(&be->reap_cond, &be->reap_lock);
		}
	}
	pthread_mutex_unlock(&be->reap_lock);
	return NULL;
}

int reap_start(struct backend *be)
{
	pthread_mutex_init(&be->reap_lock, NULL);
	pthread_cond_init(&be->reap_cond, NULL);
	if (pthread_create(&be->reaper, NULL, reaper_main, be) != 0)
		return -EAGAIN;
	be->reaper_started = true;
	return 0;
}

void reap_give(struct backend *be, struct cfd_bin *b)
{
	cfd_bin_untag_last(b);	/* names go now, on the giver's side; closes later */
	pthread_mutex_lock(&be->reap_lock);
	bool room = be->reaper_started && !be->reap_stop && be->reapq.n + b->n <= REAP_MAX;
	if (room) {
		for (size_t i = 0; i < b->n; i++)
			cfd_bin_add(&be->reapq, b->f[i]);
		if (b->n)
			pthread_cond_signal(&be->reap_cond);
		b->n = 0;	/* the references moved to the queue */
	}
	pthread_mutex_unlock(&be->reap_lock);
	cfd_bin_empty(b);	/* what did not fit is put here */
}

bool reap_stop(struct backend *be, uint64_t deadline_ns)
{
	pthread_mutex_lock(&be->reap_lock);
	if (!be->reaper_started) {
		pthread_mutex_unlock(&be->reap_lock);
		return true;
	}
	be->reap_stop = true;
	pthread_cond_signal(&be->reap_cond);
	pthread_mutex_unlock(&be->reap_lock);
	if (!join_until(be->reaper, deadline_ns))
		return false;
	pthread_mutex_lock(&be->reap_lock);	/* a stuck publisher may still give */
	be->reaper_started = false;
	pthread_mutex_unlock(&be->reap_lock);
	return true;
}
