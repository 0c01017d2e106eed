/*
 * main.c — the ckptfs daemon: check the command line, fork into the
 * background (the parent exits with the child's verdict, so `mount` and a
 * Slurm prolog see failures), map and pre-fault the cache, start the
 * backend threads, mount, serve, and on unmount or SIGTERM drain everything
 * to the backend before exiting.
 *
 * Exit status: 0 mounted and later drained cleanly; 1 a runtime failure
 * (the cache could not be mapped, the mount failed, the drain failed);
 * 2 a usage error, with one line on stderr naming the problem.
 */
#include "fs/bcall.h"
#include "fs/bread.h"
#include "fs/fs.h"
#include "fs/session.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/*
 * Fork; the parent waits for one status byte from the child and exits with
 * it.  Returns the pipe's write end in the child.  The arena is mapped after
 * this, so no page of it is ever shared copy-on-write with a parent.
 */
static int daemon_fork(void)
{
	int p[2];
	pid_t pid;
	unsigned char status = 1;

	if (pipe(p) < 0) {
		perror("ckptfs: pipe");
		exit(1);
	}
	if ((pid = fork()) < 0) {
		perror("ckptfs: fork");
		exit(1);
	}
	if (pid > 0) {
		close(p[1]);
		if (read(p[0], &status, 1) != 1)
			status = 1;	/* the child died before reporting */
		_exit(status);
	}
	close(p[0]);
	setsid();
	return p[1];
}

static void daemon_report(int *fd, unsigned char status)
{
	if (*fd < 0)
		return;
	if (write(*fd, &status, 1) != 1) {
		/* the parent is gone; nothing else to tell */
	}
	close(*fd);
	*fd = -1;
}

static void detach_stdio(void)
{
	int fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	if (chdir("/") < 0) {
		/* cannot happen for "/" */
	}
}

/*
 * Take the namespace lock for the final seal, waiting at most drain_timeout
 * (0: as long as it takes): a request worker left blocked in a backend call
 * may hold it.  false if it could not be taken.
 */
static bool ns_lock_bounded(struct ckptfs *fs)
{
	struct timespec ts;

	if (fs->opt.drain_timeout <= 0) {
		pthread_mutex_lock(&fs->ns);
		return true;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(fs->opt.drain_timeout * 1e9);
	ts.tv_sec += (time_t)(ns / 1000000000);
	ts.tv_nsec = (long)(ns % 1000000000);
	return pthread_mutex_timedlock(&fs->ns, &ts) == 0;
}

/*
 * Files still open for writing at exit: their contents as written so far,
 * sealed for the rescue directory only — never published (contract 4).
 * ns held.
 */
static unsigned partial_collect_locked(struct ckptfs *fs, struct rescue_item **out)
{
	unsigned n = 0;

	*out = NULL;
	for (struct list *e = fs->all_nodes.next; e != &fs->all_nodes; e = e->next) {
		struct fsnode *f = list_entry(e, struct fsnode, all);
		char path[4096];
		if (!f->writers || !node_needs_seal(f) || !node_path(fs, f, path, sizeof(path)))
			continue;
		struct cfile *cf = node_cfile(fs, f);
		if (cfile_base_lazy(cf))
			node_open_base(fs, f);	/* exiting: I/O under the lock is fine */
		struct cver *v = cfile_seal(cf, 0);
		if (!v)
			continue;
		*out = xrealloc(*out, (n + 1) * sizeof(**out));
		(*out)[n].path = xstrdup(path);
		(*out)[n++].ver = v;
	}
	return n;
}

static void partial_free(struct rescue_item *p, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		free(p[i].path);
		cver_free(p[i].ver);
	}
	free(p);
}

/*
 * The last steps of a clean exit still talk to the backend: the refresher
 * may be inside a listing, the node's keeper inside a lease or watermark
 * write, and backend_stop appends the manifest's clean record.  Everything
 * is durable by then (or rescued), so if the backend hangs now the daemon
 * leaves after drain_timeout instead of waiting with it: without the clean
 * record the next mount runs recovery, which finds nothing to redo.
 */
struct exit_guard {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done, started;
	uint64_t deadline_ns;	/* CLOCK_MONOTONIC */
	int rc;
	pthread_t th;
};

static void *exit_guard_main(void *arg)
{
	struct exit_guard *g = arg;
	uint64_t now;

	pthread_mutex_lock(&g->lock);
	while (!g->done && (now = now_ns()) < g->deadline_ns)
		cond_wait_ns(&g->cond, &g->lock, g->deadline_ns - now);
	bool done = g->done;
	pthread_mutex_unlock(&g->lock);
	if (!done) {
		log_err("the backend did not answer the exit's last steps within drain_timeout: "
			"exiting without marking the manifest clean (everything drained is "
			"durable; the next mount runs recovery)");
		_exit(g->rc);
	}
	return NULL;
}

static void exit_guard_arm(struct exit_guard *g, double bound_s, int rc)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->rc = rc;
	g->deadline_ns = now_ns() + (uint64_t)(bound_s * 1e9);
	g->started = bound_s > 0 && pthread_create(&g->th, NULL, exit_guard_main, g) == 0;
}

static void exit_guard_disarm(struct exit_guard *g)
{
	pthread_mutex_lock(&g->lock);
	g->done = true;
	pthread_cond_signal(&g->cond);
	pthread_mutex_unlock(&g->lock);
	if (g->started)
		pthread_join(g->th, NULL);
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
}

/*
 * Seal everything and wait until it is durable.  While the backend makes
 * progress (backend_progress: operations applied, bytes written), wait;
 * once it has made none for drain_timeout seconds of this drain, give up
 * and save what is left in the rescue directory.  0, or -errno.
 */
static int drain_or_rescue(struct ckptfs *fs)
{
	uint64_t seq, t0 = now_ns();
	struct seal_report rep = { 0 };
	struct rescue_item *partial = NULL;
	unsigned npartial = 0;
	char where[4096];
	int r = 0, stalled;

	if (ns_lock_bounded(fs)) {
		seq = seal_all_locked(fs, &rep);
		npartial = partial_collect_locked(fs, &partial);
		pthread_mutex_unlock(&fs->ns);
		r = rep.err;
	} else {
		log_err("a blocked request holds the namespace: files it has not sealed "
			"cannot be saved; draining what was sealed before");
		seq = backend_last_seq(&fs->be);
		r = -EIO;
	}
	for (;;) {
		int w = backend_wait(&fs->be, seq, 1000000000ull);
		if (w == 0) {
			if (!npartial)
				return r;
			long n = backend_rescue(&fs->be, fs->opt.rescue_dir, partial, npartial, where,
						sizeof(where));
			if (n < 0)
				log_err("the rescue into %s failed: %s; what %u files still "
					"open for writing held may be lost (what it saved may not "
					"survive a power cut)", where, strerror((int)-n), npartial);
			else
				log_warn("%u files were still open for writing: their last closed versions "
					 "are on the backend; what was written to them since is saved in %s "
					 "(partial/, see manifest.jsonl)", npartial, where);
			partial_free(partial, npartial);
			return r;
		}
		if (w != -ETIMEDOUT)
			usleep(200000);	/* failing: the publisher is backing off */
		if ((stalled = fs_backend_stalled(fs, now_ns() - t0)) < 0)
			break;
	}
	log_err("the backend made no progress for %.0f s (%s); giving up on it",
		fs->opt.drain_timeout, backend_last_error(&fs->be) ?
		strerror(-stalled) : "no error reported");
	backend_abort(&fs->be);
	long n = backend_rescue(&fs->be, fs->opt.rescue_dir, partial, npartial, where, sizeof(where));
	partial_free(partial, npartial);
	if (n < 0)
		log_err("the rescue into %s failed: %s; unpersisted data may be lost (what it "
			"saved may not survive a power cut)", where, strerror((int)-n));
	else
		log_err("could not persist %ld operations to %s: saved them in %s "
			"(see manifest.jsonl there)", n, fs->opt.backend_real, where);
	return -EIO;
}

/* The publisher's hooks for the node's peers (backend/nodes.h). */
static uint64_t fs_hold(void *arg, const struct op *op)
{
	return nodes_hold(((struct ckptfs *)arg)->be.nodes, op);
}

static void fs_published(void *arg, uint64_t seq_durable, uint64_t durable_wall_ns)
{
	nodes_published(((struct ckptfs *)arg)->be.nodes);
}

/*
 * The kernel gives a FUSE mount a 128 KiB readahead; a restore reads whole
 * multi-GiB files.  Once INIT is answered, set the mount's own readahead
 * through its bdi (root only; best effort).
 */
#define STR_(x) #x
#define STR(x) STR_(x)

static void *readahead_setter(void *arg)
{
	struct ckptfs *fs = arg;
	struct stat st;
	char path[128], val[32];

	for (int i = 0; i < 200 && !atomic_load(&fs->inited); i++)
		usleep(10000);
	usleep(20000);	/* the kernel applies INIT's readahead after our reply */
	if (stat(fs->opt.mountpoint_real, &st) < 0)
		return NULL;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
		 minor(st.st_dev));
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		int n = snprintf(val, sizeof(val), "%llu", (unsigned long long)(fs->opt.readahead >> 10));
		if (write(fd, val, (size_t)n) != n)
			log_debug("could not set %s", path);
		close(fd);
	}
	return NULL;
}

/*
 * Take every descriptor the administrator allows: the soft limit is often
 * 1024 (systemd's default for services and mount units), and the daemon
 * holds one per file open through the mount, per version being written and
 * per recently used backend directory.  No select(2) here, so a high
 * limit costs nothing.
 */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("cannot raise the open file limit to %llu: %s",
				 (unsigned long long)rl.rlim_max, strerror(errno));
	}
}

int main(int argc, char **argv)
{
	struct ckptfs *fs = xcalloc(1, sizeof(*fs));
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	int status_fd = -1, r, rc = 1;
	struct exit_guard guard;
	char sz[32];

	r = opts_parse(argc, argv, &fs->opt);
	if (!r)
		r = opts_validate(&fs->opt);
	if (!r && (bsys_powerloss_from_env(fs->opt.backend_real) < 0 || bsys_faults_from_env() < 0))
		r = CKPTFS_USAGE_ERROR;
	if (r) {
		opts_free(&fs->opt);
		free(fs);
		return r == -1 ? 0 : r;	/* -1: help or version was printed */
	}
	/* By its resolved path, never through a symlink: one swapped in since fails. */
	fs->root_fd = bsys_open_dir_path(fs->opt.backend_real);
	if (fs->root_fd < 0) {
		fprintf(stderr, "ckptfs: backend '%s': %s\n", fs->opt.backend, strerror(-fs->root_fd));
		return CKPTFS_USAGE_ERROR;
	}
	/* Writes past it fail at once (EFBIG), as on the backend, not at publication. */
	fs->max_file_size = bsys_max_file_size(fs->root_fd);
	if (!fs->opt.foreground)
		status_fd = daemon_fork();
	/* Before any other thread starts: they inherit its block of the stop signals. */
	if ((r = fs_signals_start()) < 0) {
		fprintf(stderr, "ckptfs: cannot start the signal thread: %s\n", strerror(-r));
		daemon_report(&status_fd, 1);
		return 1;
	}
	/* Modes on the backend are the mount's exactly: the callers' umask is applied. */
	umask(0);
	ckpt_log_init("ckptfs", 0, fs->opt.debug);

	if ((r = cache_init(&fs->cache, fs->opt.cache_size, fs->opt.chunk_size)) < 0) {
		fprintf(stderr, "ckptfs: cannot map a cache of %s: %s\n",
			format_size(fs->opt.cache_size, sz, sizeof(sz)), strerror(-r));
		daemon_report(&status_fd, 1);
		return 1;
	}
	raise_fd_limit();
	fs_waits_init(fs);
	list_init(&fs->handles);
	list_init(&fs->dirsnaps);
	fs->own_loop = fs->opt.loop != LOOP_LIBFUSE && fs_own_loop_possible(fs->opt.loop);
	if (fs->opt.loop != LOOP_LIBFUSE && !fs->own_loop)
		log_warn("cannot size a 1 MiB pipe (fs.pipe-max-size): write data is copied twice");
	fs->zeros_len = 1u << 20;
	fs->zeros = xcalloc(1, fs->zeros_len);
	fs->started_ns = now_ns();

	struct backend_opts bo = {
		.io = fs->opt.io,
		.flush_threads = fs->opt.flush_threads,
		.flush_nice = fs->opt.flush_nice,
		.queue_depth = fs->opt.queue_depth,
		.chown = geteuid() == 0,
		.direct = fs->opt.direct,
		.no_manifest = !fs->opt.manifest,
		.base_copy = fs->opt.base_copy,
		.nodes = &fs->opt.nodes,
		.ledger_dir = fs->opt.rescue_dir,
	};
	struct backend_hooks hooks = { .stage_dir = fs_stage_dir, .hold = fs_hold,
				       .published = fs_published, .arg = fs };
	if ((r = backend_start(&fs->be, fs->root_fd, &fs->cache, &bo, &hooks)) < 0) {
		/*
		 * Metadata on the backend that is not ours, or a node another live
		 * daemon holds: the line is printed already.
		 */
		rc = r == -MANIFEST_EREFUSED || r == -EADDRINUSE ? CKPTFS_USAGE_ERROR : 1;
		if (rc == 1)
			fprintf(stderr, "ckptfs: cannot start: %s\n", strerror(-r));
		daemon_report(&status_fd, (unsigned char)rc);
		cache_destroy(&fs->cache);
		free(fs->zeros);
		opts_free(&fs->opt);
		free(fs);
		return rc;
	}
	if ((r = fs_init_namespace(fs)) < 0) {
		fprintf(stderr, "ckptfs: cannot start: %s\n", strerror(-r));
		daemon_report(&status_fd, 1);
		fs_refresher_stop(fs);
		backend_stop(&fs->be);	/* nothing was queued: the log closes clean */
		return 1;
	}
	ctl_init(fs);

	char opts[3 * PATH_MAX];
	const char *mr = fs->opt.fuse_opts ? strstr(fs->opt.fuse_opts, "max_read=") : NULL;
	fs->max_read = mr ? (unsigned)strtoul(mr + 9, NULL, 10) : READ_MAX;
	/* The backend's path may hold what FUSE's option syntax means: escape it. */
	char fsname[2 * PATH_MAX + 1], *o = fsname;
	for (const char *c = fs->opt.backend_real; *c && o < fsname + sizeof(fsname) - 2; c++) {
		if (*c == ',' || *c == '\\')
			*o++ = '\\';
		*o++ = *c;
	}
	*o = '\0';
	snprintf(opts, sizeof(opts), "fsname=%s,subtype=ckptfs,default_permissions%s%s%s",
		 fsname, mr ? "" : ",max_read=" STR(READ_MAX),
		 fs->opt.fuse_opts ? "," : "", fs->opt.fuse_opts ? fs->opt.fuse_opts : "");
	if (fuse_opt_add_arg(&args, argv[0]) || fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, opts) || (fs->opt.debug && fuse_opt_add_arg(&args, "-d"))) {
		daemon_report(&status_fd, 1);
		return 1;
	}
	fs->se = fuse_session_new(&args, &ckptfs_ops, sizeof(ckptfs_ops), fs);
	if (!fs->se) {
		fprintf(stderr, "ckptfs: FUSE rejected the options '%s'\n", opts);
		daemon_report(&status_fd, CKPTFS_USAGE_ERROR);
		fs_refresher_stop(fs);
		backend_stop(&fs->be);	/* nothing was queued: the log closes clean */
		return CKPTFS_USAGE_ERROR;
	}
	fs_signals_serve(fs->se);	/* a stop signal ends the session from now on */
	if (fuse_session_mount(fs->se, fs->opt.mountpoint_real) != 0) {
		fs_signals_serve(NULL);
		fprintf(stderr, "ckptfs: cannot mount on '%s'\n", fs->opt.mountpoint);
		daemon_report(&status_fd, 1);
		goto out_session;
	}
	if (!fs->opt.foreground) {
		ckpt_log_init("ckptfs", 1, fs->opt.debug);
		detach_stdio();
	}
	log_info("mounted %s on %s (cache %s, chunk %u KiB, %u flushers, io %s, fsync %s)",
		 fs->opt.backend_real, fs->opt.mountpoint_real,
		 format_size(fs->cache.size, sz, sizeof(sz)), fs->cache.chunk_size >> 10,
		 fs->opt.flush_threads, bio_kind_name(fs->be.io_in_use),
		 fs->opt.fsync_lazy ? "lazy" : "durable");
	session_start(fs);
	daemon_report(&status_fd, 0);
	pthread_t ra;
	bool ra_started = fs->opt.readahead && pthread_create(&ra, NULL, readahead_setter, fs) == 0;

	bcall_start(fs);
	fs->cache.read_fd = bread_fd;	/* a writer's fill from the backend: bounded too */
	fs->cache.read_arg = fs;
	int stuck = fs_serve(fs);
	fs_signals_serve(NULL);	/* the session is over: the drain is not cut short */
	if (ra_started)
		pthread_join(ra, NULL);	/* bounded: it gives up after 2 s, and stat()s an unmounted path */

	session_stop(fs);
	/* From here backend calls are made inline; helpers still in one are left behind. */
	unsigned helpers_stuck = bcall_stop(fs, BCALL_STOP_BOUND_NS);
	log_info("unmounted %s; draining %llu pending operations to %s", fs->opt.mountpoint_real,
		 (unsigned long long)(backend_last_seq(&fs->be) - backend_durable_seq(&fs->be)),
		 fs->opt.backend_real);
	r = drain_or_rescue(fs);
	if (r == 0)
		log_info("drained: everything is durable on %s", fs->opt.backend_real);
	rc = r < 0 || stuck < 0 ? 1 : 0;
	if (stuck > 0 || helpers_stuck || backend_threads_stuck(&fs->be)) {
		/*
		 * Workers left blocked still use the session, the namespace, the
		 * cache and the backend's locks: free nothing.  Without
		 * backend_stop the manifest is not marked clean, so the next
		 * mount runs recovery; what was drained is durable all the same.
		 */
		log_err("exiting with %s still blocked; the next mount runs recovery",
			stuck > 0 ? "a request worker" : helpers_stuck ? "a backend call of a request"
								       : "backend threads");
		_exit(rc);
	}
out_session:
	exit_guard_arm(&guard, fs->opt.drain_timeout, rc);
	fuse_session_destroy(fs->se);
	fs_refresher_stop(fs);
	backend_stop(&fs->be);
	exit_guard_disarm(&guard);
	pthread_mutex_lock(&fs->ns);
	/* Files still open when the session ended never get their RELEASE. */
	while (!list_empty(&fs->handles)) {
		struct fshandle *h = list_entry(fs->handles.next, struct fshandle, link);
		struct pt_drop drop;
		list_del(&h->link);
		pt_release_locked(fs, h->node, h, &drop);	/* a passthrough backing file */
		pt_drop_finish(&drop);
		handle_free(h);
	}
	fs_free_dirsnaps(fs);
	fs_free_namespace(fs);
	pthread_mutex_unlock(&fs->ns);
	session_free(fs);
	fs_waits_destroy(fs);
	cache_destroy(&fs->cache);
	fuse_opt_free_args(&args);
	free(fs->zeros);
	opts_free(&fs->opt);
	free(fs);
	return rc;
}
