/*
 * fs.h — the front end's shared types: the mount's namespace (nodes and
 * dentries), open handles, and the daemon context.  Used by the files in fs/ only.
 *
 * The mount shows the backend with every pending operation applied on top.
 * A directory's entries are read from the backend the first time it is
 * touched, outside fs->ns; every change made here is both applied to the
 * in-memory table and queued (with its sequence number) for the publisher.
 * Other nodes change the backend too: after attr_timeout, a lookup or
 * listing of a loaded directory has it revalidated against the backend (by
 * the refresher thread, waiting for it only briefly), and what the backend
 * gained or lost is merged in, this node's own unpublished changes keeping
 * precedence (node.c).
 *
 * Lock order: fs->ns -> node->alock -> cfile->lock -> backend locks.
 *   fs->ns     the namespace: dentries, the dentry hash, node lifetimes
 *              (nlookup, refs, dents), directory tables, node->sealed flags,
 *              and sequence-number assignment for namespace operations;
 *   node->alock  a node's attributes and in-memory xattrs (leaf).
 * A handler drops every lock before it replies.
 */
#ifndef CKPTFS_FS_H
#define CKPTFS_FS_H

#include "backend/backend.h"
#include "backend/bsys.h"
#include "cache/cfile.h"
#include "fs/opts.h"

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

struct fsnode;

/* What tells one backend object, or one state of it, from another. */
struct fsdent {
	struct fsdent *hnext;	/* hash chain */
	struct list dlink;	/* parent's entry list, insertion order */
	struct list nlink;	/* node's dentries (hard links) */
	struct fsnode *parent;
	struct fsnode *node;
	char name[];
};

struct xattr {
	char *key;
	void *val;
	size_t len;
};

/*
 * One kernel inode of a node (ns).  The kernel knows a node by its address
 * plus the index of one of these (fs_ino): a file rewritten while
 * passthrough readers hold its kernel inode gets a new one for later
 * lookups (passthrough.c, "Rewrites"), so their mmap(2) is not tied to the
 * backing file of the earlier version.
 */
#define NODE_GENS 4
struct fsgen {
	uint64_t nlookup;	/* the kernel's references on this node id */
	uint32_t pt_handles;	/* handles opened on it with FOPEN_PASSTHROUGH */
	int32_t pt_id;		/* its backing id registered with the kernel, 0: none */
	uint8_t pt_state;	/* PT_IDLE, PT_MAKING */
	struct cfd *pt_base;	/* the backend file behind pt_id (referenced) */
};

struct fsnode {
	struct list all;	/* fs->all_nodes (ns) */
	uint64_t nlookup;	/* kernel references, all node ids together (ns) */
	uint32_t refs;		/* dentries, handles, snapshots (ns) */
	struct list dents;	/* dentries naming it (ns) */
	struct bnode *b;	/* backend presence */
	struct cfile *cf;	/* regular files: contents, created on first use */

	/* directories (ns) */
	struct list entries;	/* child dentries */
	uint32_t nentries;
	uint32_t nsubdirs;
	bool loaded;		/* entries read from the backend */
	bool loading;		/* a thread reads it now; others wait on fs->load_cond */
	bool refreshing;	/* queued for, or in, a revalidation (fs->refresh_q) */
	bool gone;		/* removed from the backend by someone else: nothing is made in it */
	bool track;		/* a revalidation runs: names changed here go to `changed` */
	struct list rlink;	/* fs->refresh_q */
	uint64_t valid_ns;	/* when the read its entries reflect began (monotonic) */
	uint64_t refresh_deadline_ns;	/* requests wait for a revalidation until then */
	uint64_t listed_wall_ns;	/* wall clock when its entries were last read whole */
	struct bstamp stamp;	/* the backend directory as of that read */
	struct strset *changed;	/* names added or removed here while `track` */

	/* regular files (ns) */
	bool ever_sealed;	/* a version was queued or it came from the backend */
	bool new_file;		/* created here and not sealed yet */
	uint32_t writers;	/* open handles that can write */
	uid_t writer_uid;	/* who opened it for writing last */
	uid_t seal_actor;	/* whose order its last version joined */
	uint64_t seal_seq;	/* ... and its sequence number */
	bool bypassed;		/* written past the kernel page cache since it was last dropped (ops.c) */
	uint64_t bypass_gen;	/* bumped by every open that writes past the page cache */

	pthread_mutex_t alock;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec atime, mtime, ctime;
	uint64_t loaded_size;	/* size on the backend when loaded (cf == NULL) */
	struct bstamp bid;	/* the backend object as last seen in a listing (ns) */
	bool bknown;		/* bid is set */
	atomic_bool base_stale;	/* its published file was found replaced (node_open_base) */
	char *symlink;
	dev_t rdev;		/* device nodes */
	struct xattr *xattrs;	/* alock */
	uint32_t nxattrs;
	bool xattrs_loaded;
	uint64_t dirty_ns;	/* alock: when it was first modified since its last seal */
	uint64_t sealed_ns;	/* alock: when its last version was sealed */
	uint8_t ctl;		/* enum ctl_kind: a node of the control directory */

	/* open handles and kernel inodes (passthrough.c; ns) */
	uint32_t opens;		/* open handles */
	uint8_t gen;		/* the kernel inode new lookups get (index: node_gen) */
	struct fsgen gen0;	/* the first kernel inode */
	struct fsgen *gens;	/* the others, NODE_GENS - 1, once a rewrite needed one */
};

enum { PT_IDLE = 0, PT_MAKING };
enum pt_mode { PT_NONE = 0, PT_READ, PT_DIRECT, PT_REFUSE };

/* Nodes of the control directory MOUNT/.ckptfs (ctl.c). */
enum ctl_kind { CTL_NONE = 0, CTL_DIR, CTL_STATS, CTL_FILES, CTL_DRAIN, CTL_CMD };

struct fshandle {
	struct list link;	/* fs->handles (ns) */
	struct fsnode *node;
	int flags;
	bool writable;
	bool direct_io;		/* bypasses the kernel's page cache (decided under ns) */
	bool keep_cache;	/* the kernel may keep the page cache it holds (ditto) */
	bool refreshes;		/* its open drops the page cache, which is current after (ops.c) */
	uint64_t refresh_gen;	/* the node's bypass_gen then */
	uid_t uid;		/* who opened it */
	_Atomic uint64_t wowner;	/* lock owner of its writes: 0 none yet, UINT64_MAX several/unknown */
	/* control files */
	struct strbuf out;	/* what reads return */
	bool done;		/* drain: already waited */
	bool waiting;		/* drain: a read is waiting */
	bool drain_all;		/* drain: everyone's operations (root, the owner) */
	unsigned open_files;	/* drain: files left out, still open for writing */
	uint64_t drain_seq;
	uint64_t timeout_ns;	/* drain: 0 = until done, or drain_timeout without progress */
	uint8_t pt;		/* enum pt_mode it was opened with */
	uint8_t gen;		/* the node's kernel inode it was opened on */
	int32_t pt_id;		/* its backing id (pt != PT_NONE) */
};

struct drainer {
	uid_t uid;
	unsigned n;		/* drains of this user waiting */
};

struct ckptfs {
	struct ckptfs_opts opt;
	struct cache cache;
	struct backend be;
	struct fuse_session *se;
	int root_fd;

	pthread_mutex_t ns;
	pthread_cond_t load_cond;	/* a directory load or revalidation ended (ns) */
	struct list refresh_q;		/* directories to revalidate (ns) */
	pthread_cond_t refresh_cond;
	pthread_t refresher;
	bool refresher_started, refresher_stop;
	struct fsnode *root;
	struct fsdent **htab;
	size_t hsize, hcount;
	struct list all_nodes;
	uint64_t nodes;
	struct list handles;	/* open file handles (ns): those never released are freed at exit */
	struct list dirsnaps;	/* open directory handles (ns): the same */

	struct fsnode *ctl_dir;	/* MOUNT/.ckptfs, not in the root's entries */
	pthread_mutex_t rate_lock;
	uint64_t rate_ns, rate_absorbed, rate_persisted;	/* last rate sample */
	double absorb_rate, persist_rate;
	pthread_mutex_t drain_lock;
	struct drainer drainers[64];
	unsigned ndrainers;

	bool own_loop;	/* requests arrive through loop.c's workers (loop=readv|splice) */
	atomic_bool inited;	/* the kernel's INIT has been answered */
	unsigned max_read;	/* the max_read mount option in effect */
	unsigned max_write;	/* what INIT asked the kernel for */
	uint64_t max_file_size;	/* the backend's largest file (bsys_max_file_size), 0: unknown */

	pthread_cond_t pt_cond;	/* a node's backing file was made (passthrough.c; ns) */
	atomic_uint_least64_t pt_opens, pt_direct_opens, pt_failures;
	atomic_uint_least64_t pt_from_cache;	/* read from cache memory instead (passthrough.c) */
	atomic_uint_least64_t pt_renewed;	/* rewrites that gave a node a new kernel inode */
	atomic_uint_least64_t rd_opens;	/* read-only opens that bypass the page cache (read_direct) */

	struct {		/* bounded waits (wait.c) */
		atomic_bool stopping;	/* the session is ending: blocked handlers give up */
		pthread_mutex_t lock;	/* the two below */
		uint64_t progress;	/* backend_progress() as a waiter last saw it */
		uint64_t progress_ns;	/* when it last changed (0: never sampled) */
	} waits;
	struct sessions *sessions;	/* GPU capture sessions (session.c) */
	struct bcall_pool *calls;	/* handlers' backend calls (bcall.c), NULL when not serving */

	char *zeros;		/* ZERO segments of read replies */
	size_t zeros_len;
	atomic_uint_least64_t read_bytes;
	uint64_t started_ns;
};

/* ---- namespace (node.c), fs->ns held unless noted ---------------------- */

int fs_init_namespace(struct ckptfs *fs);
void fs_free_namespace(struct ckptfs *fs);
/* Free the directory handles the kernel never released (at exit, ns held). */
void fs_free_dirsnaps(struct ckptfs *fs);
struct fsnode *fs_node(struct ckptfs *fs, fuse_ino_t ino);
/* The node id new lookups of n get (its current kernel inode); that of kernel inode gen. */
fuse_ino_t fs_ino(struct ckptfs *fs, struct fsnode *n);
fuse_ino_t node_ino(struct ckptfs *fs, struct fsnode *n, unsigned gen);
/* Which of a node's kernel inodes a node id names (0 for the root). */
unsigned fs_ino_gen(struct ckptfs *fs, fuse_ino_t ino);
/* Kernel inode i of n (i < NODE_GENS; made on first use). */
struct fsgen *node_gen(struct fsnode *n, unsigned i);
/* The kernel takes a reference on n's node id of kernel inode gen (an entry reply); or not, after all. */
void node_lookup(struct fsnode *n, unsigned gen);
void node_unlookup(struct fsnode *n, unsigned gen);
struct fsnode *node_new(struct ckptfs *fs, mode_t mode, uid_t uid, gid_t gid);
void node_ref(struct fsnode *n);
void node_unref(struct ckptfs *fs, struct fsnode *n);
void node_forget(struct ckptfs *fs, fuse_ino_t ino, uint64_t nlookup);
struct cfile *node_cfile(struct ckptfs *fs, struct fsnode *n);
struct fsdent *dent_find(struct ckptfs *fs, struct fsnode *dir, const char *name);
struct fsdent *dent_add(struct ckptfs *fs, struct fsnode *dir, const char *name, struct fsnode *n);
void dent_remove(struct ckptfs *fs, struct fsdent *d);
struct fsdent *node_first_dent(struct fsnode *n);
/*
 * Read a directory's entries from the backend if not done yet, outside
 * fs->ns (concurrent callers wait for the one read).  0 if the lock was held
 * throughout, DIR_DROPPED if it was dropped (dentries looked up before are
 * stale: look again), or -errno.
 */
#define DIR_DROPPED 1
int dir_load(struct ckptfs *fs, struct fsnode *dir);
/*
 * dir_load, then, if its entries are older than attr_timeout, have the
 * refresher revalidate it against the backend, waiting at most
 * DIR_REFRESH_WAIT_MS for it: a slow backend never stalls a lookup.
 * For lookups and listings.  Same results as dir_load.
 */
#define DIR_REFRESH_WAIT_MS 100
int dir_fresh(struct ckptfs *fs, struct fsnode *dir);
/* Stop the refresher (no lock held), before the backend stops. */
void fs_refresher_stop(struct ckptfs *fs);
void node_fill_stat(struct ckptfs *fs, struct fsnode *n, struct stat *st);
/* Open the backend file behind a loaded file's base (no lock needed). */
int node_open_base(struct ckptfs *fs, struct fsnode *n);
struct bnode *fs_stage_dir(void *fs, struct cfile *cf);
bool name_valid(const char *name);

/* ---- xattrs (xattr.c) ------------------------------------------------ */

void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *key, size_t size);
void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void fs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *key, const char *val,
		 size_t len, int flags);
void fs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *key);
void xattrs_free(struct fsnode *n);
/* Serialise a node's in-memory xattrs for a version (alock held). */
bool xattrs_snapshot(struct fsnode *n, void **buf, size_t *len);

/* ---- the control directory (ctl.c) ------------------------------------- */

void ctl_init(struct ckptfs *fs);
/* Open a control file: fills h; 0 or -errno.  ns held. */
int ctl_open(struct ckptfs *fs, fuse_req_t req, struct fshandle *h);
void ctl_read(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, size_t size, off_t off);
void ctl_write(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, const char *buf,
	       size_t len, off_t off);
/* Path of n below the mount root into buf ("" for the root); false if unlinked.  ns held. */
bool node_path(struct ckptfs *fs, struct fsnode *n, char *buf, size_t len);

/* ---- the request loop (loop.c) ------------------------------------------ */

/*
 * Can our own loop serve with loop=kind (readv, or splice: can this process
 * size a pipe of at least 1 MiB)?  Also picks the largest request: what the
 * kernel may send, and with splice what fits the pipes this process may
 * make.
 */
bool fs_own_loop_possible(enum fuse_loop_kind kind);
/*
 * Serve requests (our loop, or libfuse's multi-threaded loop) until
 * the session exits (unmount, SIGTERM, SIGINT); then make blocked handlers
 * give up, join the workers within a bound, and unmount.  Returns the
 * number of workers still blocked after the bound (left behind; the caller
 * must not free what they use), or -1 if no worker could start.
 */
int fs_serve(struct ckptfs *fs);

/* ---- the signals that stop the daemon (signals.c) ------------------------ */

/*
 * SIGINT, SIGTERM and SIGHUP go to one thread that takes them with
 * sigwaitinfo(); every other thread blocks them.  fs_signals_start() must
 * be called by main() before it starts any thread (they inherit the block);
 * it also ignores SIGPIPE.  0, or -errno.  Until fs_signals_serve(se) a
 * stop signal ends the process by its default action; from then it ends
 * the session se (fs_serve returns); fs_signals_serve(NULL), once the
 * session is over, makes it a logged no-op (the exit's drain goes on).
 */
int fs_signals_start(void);
void fs_signals_serve(struct fuse_session *se);

/* ---- bounded waits (wait.c) --------------------------------------------- */

/* Install the cache's wait_check hook; fs_waits_destroy() undoes it. */
void fs_waits_init(struct ckptfs *fs);
void fs_waits_destroy(struct ckptfs *fs);
/* The session is ending: every blocked wait gives up (ESHUTDOWN). */
void fs_waits_stop(struct ckptfs *fs);
bool fs_stopping(struct ckptfs *fs);
/* Around a handler's wait for cache space: interrupts of req end the wait (EINTR). */
void fs_req_wait_begin(struct ckptfs *fs, fuse_req_t req);
void fs_req_wait_end(fuse_req_t req);
/*
 * 0 while the backend has made progress within drain_timeout (or the last
 * waited_ns of the caller's wait); else its last error as -errno (-EIO).
 */
int fs_backend_stalled(struct ckptfs *fs, uint64_t waited_ns);
/* The cache's wait_check hook (arg: the ckptfs). */
int fs_cache_wait_check(void *arg, uint64_t waited_ns);

/* max_write for our own loop (after fs_own_loop_possible). */
unsigned fs_loop_max_write(void);
/*
 * loop=readv: is bv the data of the write request this thread is handling,
 * which the loop read into a free cache chunk?  Then returns where the
 * data lie (the chunk, and past its capacity the loop's own buffer), and
 * *ch is that chunk when it holds all of them (else NULL): a file may take
 * it with cfile_write_chunk(); say so with fs_loop_staged_taken().  NULL
 * when bv is what it says.
 */
struct fuse_bufvec *fs_loop_staged(const struct fuse_bufvec *bv, struct chunk **ch);
void fs_loop_staged_taken(void);
/* Write bytes the files took in the chunks the loop read them into (no copy). */
uint64_t fs_loop_adopted_bytes(void);
/* Free chunks the workers hold as spares now (counted used by the cache), bytes. */
uint64_t fs_loop_spare_bytes(void);
/* Requests read from /dev/fuse so far (the ring's are counted by uring.c). */
uint64_t fs_loop_requests(void);
/* This request worker is about to wait: another takes over reading if needed. */
void fs_loop_blocking(void);
/* Read requests are capped likewise, so spliced replies fit a 1 MiB pipe. */
#define READ_MAX 1015808	/* 248 pages: data plus libfuse's header pages fit 256 */

/* Largest pages per request the kernel allows (fs.fuse.max_pages_limit). */
unsigned fs_kernel_max_pages(void);

/* ---- what goes to /dev/fuse (devio.c) ------------------------------------ */

/* Route the session's replies through devio (before INIT is read): 0 or -errno. */
int devio_install(struct ckptfs *fs, struct fuse_session *se);
/* The loop saw the raw INIT request (the flags libfuse 3.14 drops). */
void devio_note_init(const void *req, size_t len);
/* Amend this thread's next open/create reply: open_flags |= add, &= ~clear, backing id. */
void devio_open_patch(uint32_t add, uint32_t clear, int32_t backing_id);
void devio_open_patch_clear(void);
bool devio_passthrough(void);	/* negotiated at INIT */
bool devio_uring(void);		/* negotiated at INIT */
bool devio_dio_mmap(void);	/* negotiated at INIT: FUSE_DIRECT_IO_ALLOW_MMAP */
bool fs_read_direct(const struct ckptfs *fs);	/* read_direct=on and the kernel allows it */
int devio_fd(void);
unsigned devio_max_pages(void);

/* ---- FUSE requests over io_uring (uring.c) -------------------------------- */

/* Does the kernel let FUSE use io_uring (fuse.enable_uring)? */
bool fsu_kernel_enabled(void);
/* Start the threads and rings before INIT is answered: 0, or -errno (not used). */
int fsu_prepare(struct ckptfs *fs, struct fuse_session *se, unsigned max_threads);
bool fsu_offerable(void);	/* every ring is up: INIT may ask for io_uring */
void fsu_start(void);		/* INIT accepted it: register the entries */
void fsu_cancel(void);		/* not used: the threads leave */
void fsu_stop(void);		/* the session ended: wake, join */
/* A reply for a request that came through a ring entry: bytes taken, or 0 (not ours). */
ssize_t fsu_reply(struct iovec *iov, int count);
ssize_t fsu_reply_pipe(int pipefd, size_t len);
/* Stats fields (appended to the stats JSON). */
void fsu_describe(struct strbuf *b);

/* ---- passthrough (passthrough.c), ns held unless noted ------------------ */

/*
 * How h (new, counted in n->opens) opens; may drop and retake fs->ns.
 * PT_REFUSE: the open must fail with ETXTBSY (read-write while passthrough
 * readers hold the file).
 */
enum pt_mode pt_open_locked(struct ckptfs *fs, struct fsnode *n, struct fshandle *h);
/* Set fi and the reply amendment for h (no lock). */
void pt_setup(struct fshandle *h, struct fuse_file_info *fi);
/* h goes away; what to close after fs->ns is dropped goes into drop. */
struct pt_drop {
	int32_t id;
	struct cfd *base;
};
void pt_release_locked(struct ckptfs *fs, struct fsnode *n, struct fshandle *h,
		       struct pt_drop *drop);
void pt_drop_finish(struct pt_drop *drop);	/* no lock */
/*
 * n's contents are about to change (a write-capable open of it, a
 * truncate): if passthrough readers hold its kernel inode, later lookups
 * get another one (passthrough.c, "Rewrites").
 */
void pt_changing_locked(struct ckptfs *fs, struct fsnode *n);

/* ---- sealing versions (seal.c), ns held ---------------------------------- */

/* Queue op for the backend as a change made by `actor`: backend_submit's result. */
int fs_submit(struct ckptfs *fs, uid_t actor, struct op *op);
/* Seal a file's current contents as a version of `actor`: 0 or -errno. */
int seal_locked(struct ckptfs *fs, struct fsnode *n, uid_t actor);
bool node_needs_seal(struct fsnode *n);
/* Modified and still being written: open for writing, or bound to a capture session. */
bool node_open_for_writing(struct fsnode *n);
struct seal_report {
	unsigned sealed;	/* versions queued */
	unsigned open_files;	/* modified but open for writing: left out */
	int err;		/* first failure */
};
/* Seal every modified *closed* file; returns the sequence number to wait for. */
uint64_t seal_all_locked(struct ckptfs *fs, struct seal_report *rep);
/* dirty | flushing | blocked | skipped | durable (user.ckptfs.state, files, stats). */
const char *node_state_name(struct ckptfs *fs, struct fsnode *n);

/* ---- handlers (ops.c) ------------------------------------------------- */

/* Free a handle after it left fs->handles (its RELEASE, or exit). */
void handle_free(struct fshandle *h);

extern const struct fuse_lowlevel_ops ckptfs_ops;

#endif
