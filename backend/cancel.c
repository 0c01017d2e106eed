/*
 * cancel.c — answering every durability waiter at once, when the front end
 * stops serving requests (fs/loop.c, at the end of a session).
 *
 * A waiter (backend_wait_async: an fsync or fsyncdir waiting for its
 * sequence number) is answered exactly once: whoever takes it off
 * be->waiters under be->lock answers it.  The publisher takes those it can
 * answer; this takes all the others, so that their replies go out while the
 * session's descriptor is still open, before the unmount.
 */
#include "backend/backend.h"

void backend_cancel_waiters(struct backend *be, int err)
{
	struct list all;

	list_init(&all);
	pthread_mutex_lock(&be->lock);
	be->waiters_closed = err;	/* a request's waiter put back after this: answered at once */
	while (!list_empty(&be->waiters)) {
		struct list *e = be->waiters.next;
		list_del(e);
		list_add_tail(&all, e);
	}
	pthread_mutex_unlock(&be->lock);
	while (!list_empty(&all)) {
		struct pub_waiter *w = list_entry(all.next, struct pub_waiter, link);
		list_del(&w->link);
		w->result = err;	/* backend_wait's answer is read from here */
		w->done(w, err);
	}
}
