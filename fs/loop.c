/*
 * loop.c — the request loop: worker threads that move each request from
 * /dev/fuse into a pipe with splice(2) and hand it to libfuse.
 *
 * Why our own loop: libfuse's splice path wants a pipe larger than 1 MiB,
 * which needs CAP_SYS_RESOURCE or a raised fs.pipe-max-size; without it it
 * silently falls back to reading every request into a buffer, and the data
 * of each write is then copied twice (kernel to buffer, buffer to cache).
 * Here every thread owns a pipe of exactly 1 MiB (256 page slots) and the
 * session's max_write is 254 pages, so a write request — one header slot
 * plus at most 255 data pages, however its offset is aligned — always fits.
 * splice() moves the request's page references into the pipe without
 * copying; fuse_session_process_buf() reads the header from the pipe, and
 * write_buf (ops.c) reads the data straight into cache chunks: one copy.
 *
 * Threads: `nthreads` workers, all reading the same fd (the kernel hands
 * each request to one of them).  A blocked handler (backpressure, a drain)
 * occupies one worker; the others go on.  The loop ends when the session
 * exits: on unmount splice() fails with ENODEV in every worker; on SIGTERM
 * the main thread wakes them with WAKE_SIGNAL, joins them, then unmounts.
 */
#include "fs/fs.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define PIPE_BYTES (1u << 20)

struct worker {
	struct fuse_session *se;
	int pipe[2];
	pthread_t th;
	atomic_bool done;
};

#define WAKE_SIGNAL SIGUSR1

/* Interrupts a worker's splice() (no SA_RESTART) so it sees the session exit. */
static void on_wake(int sig) { (void)sig; }

/* Throw away whatever a handler left in the pipe (it must start empty). */
static void pipe_drain(int fd)
{
	char sink[65536];
	int left = 0;

	while (ioctl(fd, FIONREAD, &left) == 0 && left > 0)
		if (read(fd, sink, CKPT_MIN((size_t)left, sizeof(sink))) <= 0)
			break;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int fd = fuse_session_fd(w->se);

	while (!fuse_session_exited(w->se)) {
		ssize_t n = splice(fd, NULL, w->pipe[1], NULL, PIPE_BYTES + 4096, 0);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
				continue;	/* ENOENT: the request was interrupted */
			if (errno != ENODEV)
				log_err("reading /dev/fuse: %s", strerror(errno));
			fuse_session_exit(w->se);
			break;
		}
		if (n == 0) {
			fuse_session_exit(w->se);
			break;
		}
		struct fuse_buf buf = { .size = (size_t)n, .flags = FUSE_BUF_IS_FD, .fd = w->pipe[0] };
		fuse_session_process_buf(w->se, &buf);
		pipe_drain(w->pipe[0]);
	}
	atomic_store(&w->done, true);
	return NULL;
}

bool fs_splice_loop_possible(void)
{
	int p[2];
	bool ok;

	if (pipe2(p, O_CLOEXEC) < 0)
		return false;
	ok = fcntl(p[0], F_SETPIPE_SZ, PIPE_BYTES) >= (int)PIPE_BYTES;
	close(p[0]);
	close(p[1]);
	return ok;
}

int fs_splice_loop(struct fuse_session *se, unsigned nthreads)
{
	struct worker *w = xcalloc(nthreads, sizeof(*w));
	struct sigaction sa = { .sa_handler = on_wake };
	sigset_t block, old;
	unsigned started = 0;

	sigemptyset(&sa.sa_mask);
	sigaction(WAKE_SIGNAL, &sa, NULL);
	/* Workers leave SIGINT/SIGTERM/SIGHUP to libfuse's handlers in this thread. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (unsigned i = 0; i < nthreads; i++) {
		w[i].se = se;
		atomic_init(&w[i].done, false);
		if (pipe2(w[i].pipe, O_CLOEXEC) < 0 ||
		    fcntl(w[i].pipe[0], F_SETPIPE_SZ, PIPE_BYTES) < (int)PIPE_BYTES ||
		    pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
			log_err("cannot start request worker %u: %s", i, strerror(errno));
			break;
		}
		started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!started) {
		free(w);
		return -1;
	}
	/* Wait for a signal (SIGTERM, SIGINT) or for the workers to see unmount. */
	while (!fuse_session_exited(se))
		usleep(100000);
	/* Wake workers still blocked in splice() until all have left their loop. */
	for (bool all = false; !all; usleep(20000)) {
		all = true;
		for (unsigned i = 0; i < started; i++)
			if (!atomic_load(&w[i].done)) {
				all = false;
				pthread_kill(w[i].th, WAKE_SIGNAL);
			}
	}
	for (unsigned i = 0; i < started; i++) {
		pthread_join(w[i].th, NULL);
		close(w[i].pipe[0]);
		close(w[i].pipe[1]);
	}
	free(w);
	fuse_session_unmount(se);
	return 0;
}
