/*
 * session_hostile.c — the GPU session protocol (gpu/include/ckptfs_ring.h)
 * spoken by unprivileged users through a raw client, not libckptfs: what a
 * hostile user sends the root daemon must not cost it unbounded memory.
 *   - ranges: a session posts one-byte ranges, never ADOPT, over every chunk
 *     of its arena (half a chunk's bytes each): the daemon refuses the
 *     file's entries past pend_ranges_max (counted in the ring's `rejected`,
 *     logged once), its heap does not grow with them (it grew by 32 MiB per
 *     4 MiB chunk), and the unbind reports the error;
 *   - another user's file: a user who may write a file (mode 0666) but does
 *     not own it cannot bind it (EPERM), so cannot have it dropped with
 *     their session; its owner's close publishes it;
 *   - arena shares: a session asking for a petabyte gets at most a quarter
 *     of the cache (one user's share of the half arenas may use), and
 *     another user's session opens meanwhile (it was refused, ENOSPC);
 *   - offsets past INT64_MAX: a chunk posted at index ~2^64 / chunk_size is
 *     refused (EFBIG at unbind, the file dropped), and a drain is ok (the
 *     file's version used to fail its ftruncate and block the user's order);
 *   - silent connections: a user opens SILENT connections and never says
 *     hello: past HANDSHAKES_PER_UID (fs/session.c) the daemon refuses them
 *     at once (EAGAIN), its thread count grows by at most that many (it
 *     started a thread for each, each waiting 5 s), and another user's
 *     session opens meanwhile.
 */
#include "tests/security/sec_util.h"
#include "tests/integrity/integ.h"
#include "gpu/include/ckptfs_ring.h"

#include <grp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define A 61911
#define B 61912
#define SILENT 100
#define HANDSHAKES_PER_UID 16	/* fs/session.c */

static struct tmount m;

/* ---- a raw session client ------------------------------------------------ */

struct raw {
	int sock, fds[4];	/* arena, ring, submission and progress doorbells */
	struct ckptfs_welcome w;
	struct ckptfs_ring_hdr *hd;
	struct ckptfs_sqe *sqe;
	uint32_t tail, mask;
};

/* A connection to the mount's session endpoint, nothing said yet. */
static int raw_connect(void)
{
	struct ckptfs_ioc_info info;
	struct sockaddr_un sa;
	int dfd = CHECK_SYS(open(m.mnt, O_RDONLY | O_DIRECTORY));

	CHECK_SYS(ioctl(dfd, CKPTFS_IOC_INFO, &info));
	close(dfd);
	socklen_t sl = ckptfs_sockaddr(info.addr, &sa);
	int sock = CHECK_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	CHECK_SYS(connect(sock, (struct sockaddr *)&sa, sl));
	return sock;
}

/* Open a session asking for arena_bytes: 0, or the welcome's -errno. */
static int raw_open(struct raw *r, uint64_t arena_bytes)
{
	struct ckptfs_hello h = { .magic = CKPTFS_HELLO_MAGIC, .version = CKPTFS_PROTO_VERSION,
				  .numa_node = -1, .arena_bytes = arena_bytes };
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { &r->w, sizeof(r->w) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	r->sock = raw_connect();
	ASSERT_EQ(send(r->sock, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ASSERT_EQ(recvmsg(r->sock, &mh, MSG_WAITALL), (ssize_t)sizeof(r->w));
	if (r->w.error)
		return r->w.error;
	memcpy(r->fds, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(r->fds));
	char *ring = mmap(NULL, r->w.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fds[1], 0);
	if (ring == MAP_FAILED)
		FAILF("mmap ring: %s", strerror(errno));
	r->hd = (struct ckptfs_ring_hdr *)ring;
	r->sqe = (struct ckptfs_sqe *)(ring + r->hd->sq_off);
	r->mask = r->hd->sq_entries - 1;
	r->tail = 0;
	return 0;
}

static void raw_kick(struct raw *r)
{
	uint64_t one = 1;
	ASSERT_EQ(write(r->fds[2], &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* Post e, waiting for room in the ring. */
static void raw_post(struct raw *r, struct ckptfs_sqe e)
{
	while (r->tail - atomic_load(&r->hd->sq_head) > r->mask) {
		raw_kick(r);
		usleep(50);
	}
	r->sqe[r->tail & r->mask] = e;
	atomic_store(&r->hd->sq_tail, ++r->tail);
}

/* Until the daemon consumed everything posted. */
static void raw_sync(struct raw *r)
{
	raw_kick(r);
	while (atomic_load(&r->hd->sq_head) != r->tail)
		usleep(1000);
}

/* Bind fd: its token, or -errno. */
static long raw_bind(struct raw *r, int fd, uint64_t limit)
{
	struct ckptfs_ioc_bind b = { .session = r->w.session, .key = { r->w.key[0], r->w.key[1] },
				     .limit = limit };
	return ioctl(fd, CKPTFS_IOC_BIND, &b) < 0 ? -errno : (long)b.token;
}

static int raw_unbind(struct raw *r, int fd, uint32_t token, struct ckptfs_ioc_unbind *u)
{
	*u = (struct ckptfs_ioc_unbind){ .session = r->w.session,
					 .key = { r->w.key[0], r->w.key[1] }, .token = token };
	return ioctl(fd, CKPTFS_IOC_UNBIND, u) < 0 ? -errno : 0;
}

/* ---- a user's process that reports and then holds on ------------------ */

struct peer {
	pid_t pid;
	int from, to;
};

/*
 * Run fn as uid in a child: it reports numbers (peer_say), may wait for the
 * test (peer_wait, peer_go), and holds its session until peer_end.
 */
static void peer_start(struct peer *p, uid_t uid, void (*fn)(int out, int in))
{
	int up[2], down[2];

	CHECK_SYS(pipe(up));
	CHECK_SYS(pipe(down));
	if ((p->pid = CHECK_SYS(fork())) == 0) {
		char c;
		close(up[0]);
		close(down[1]);
		if (setgroups(0, NULL) || setgid(uid) || setuid(uid))
			_exit(3);
		fn(up[1], down[0]);
		while (read(down[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	p->from = up[0];
	p->to = down[1];
}

static void peer_say(int out, long long v)
{
	if (write(out, &v, sizeof(v)) != sizeof(v))
		_exit(4);
}

static void peer_wait(int in)
{
	char c;
	if (read(in, &c, 1) != 1)
		_exit(4);
}

static void peer_go(struct peer *p)
{
	ASSERT_EQ(write(p->to, "g", 1), 1);
}

static long long peer_read(struct peer *p)
{
	long long v;
	if (read(p->from, &v, sizeof(v)) != sizeof(v)) {
		int st;
		waitpid(p->pid, &st, 0);
		FAILF("the user's process ended before it reported (status 0x%x)", st);
	}
	return v;
}

static void peer_end(struct peer *p)
{
	int st;
	close(p->to);
	close(p->from);
	CHECK_SYS(waitpid(p->pid, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAILF("the user's process failed (status 0x%x)", st);
}

/*
 * The daemon's anonymous memory outside its cache mapping (the heap and
 * malloc's arenas), in KiB: what a client could make it allocate.
 */
static long long daemon_heap_kib(void)
{
	char path[64], line[512];
	long long total = 0, size = 0;
	bool anon = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)m.pid);
	if (!(f = fopen(path, "r")))
		FAILF("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char name[256] = "";
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %255s", &lo, &hi, name) >= 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			size = (long long)(hi - lo);
			anon = (!name[0] || !strcmp(name, "[heap]")) &&
			       (uint64_t)size != 64 * MiB;	/* the cache (cache_size=64M) */
		} else if (anon && !strncmp(line, "Rss:", 4)) {
			total += atoll(line + 4);
		}
	}
	fclose(f);
	return total;
}

/* Until the earlier cases' sessions ended and their arenas went back. */
static void sessions_gone(void)
{
	ASSERT_TRUE(it_wait_stat(&m, "gpu_sessions_active", "0", 10000));
	ASSERT_TRUE(it_wait_stat(&m, "gpu_arena_bytes", "0", 10000));
}

/* ---- ranges ------------------------------------------------------------- */

static void ranges_user(int out, int in)
{
	struct raw r;
	struct ckptfs_ioc_unbind u;

	if (raw_open(&r, 1ull << 50))
		_exit(5);
	int fd = CHECK_SYS(open(tm_path(&m, "h/ranges"), O_CREAT | O_EXCL | O_WRONLY, 0600));
	long token = raw_bind(&r, fd, 0);
	if (token < 0)
		_exit(6);
	peer_say(out, r.w.nchunks);
	peer_say(out, r.w.chunk_size);
	raw_sync(&r);
	peer_say(out, 0);	/* the baseline may be taken */
	for (uint32_t c = 0; c < r.w.nchunks; c++)
		for (uint32_t lo = 0; lo + 1 <= r.w.chunk_size; lo += 2)
			raw_post(&r, (struct ckptfs_sqe){ .op = CKPTFS_SQE_DATA,
				.token = (uint32_t)token, .chunk = c, .lo = lo, .hi = lo + 1 });
	raw_sync(&r);
	peer_say(out, r.tail);
	peer_say(out, (long long)atomic_load(&r.hd->rejected));
	peer_wait(in);		/* held while the test looks at the daemon */
	if (raw_unbind(&r, fd, (uint32_t)token, &u) < 0)
		_exit(8);
	peer_say(out, u.error);
}

static void ranges(void)
{
	struct peer p;

	peer_start(&p, A, ranges_user);
	long long nchunks = peer_read(&p), cs = peer_read(&p);
	peer_read(&p);
	long long before = daemon_heap_kib();
	long long posted = peer_read(&p), rejected = peer_read(&p);
	long long after = daemon_heap_kib();
	printf("ranges: %lld entries over %lld chunks of %lld bytes: daemon heap %lld -> %lld KiB, "
	       "%lld refused\n", posted, nchunks, cs, before, after, rejected);
	if (after - before > 16 * 1024)
		FAILF("the daemon's heap grew by %lld KiB for one session's ranges", after - before);
	ASSERT_GE(rejected, nchunks);
	peer_go(&p);
	ASSERT_EQ(peer_read(&p), -E2BIG);
	peer_end(&p);
	ASSERT_EQ(sec_log_count(&m, "ranges for one arena chunk: refused"), 1);
	ASSERT_TRUE(!file_exists(tm_path(&m, "h/ranges")));
}

/* ---- another user's file ---------------------------------------------- */

static void victim_user(int out, int in)
{
	umask(0);
	int fd = CHECK_SYS(open(tm_path(&m, "h/victim"), O_CREAT | O_EXCL | O_WRONLY, 0666));
	ASSERT_EQ(write(fd, "mine", 4), 4);
	peer_say(out, 0);
	peer_wait(in);		/* open, never closed: still a new file, bindable */
	peer_say(out, close(fd) < 0 ? -errno : 0);
}

static void binder_user(int out, int in)
{
	struct raw r;

	(void)in;
	if (raw_open(&r, 8 * MiB))
		_exit(5);
	int fd = open(tm_path(&m, "h/victim"), O_WRONLY);
	peer_say(out, fd < 0 ? -errno : raw_bind(&r, fd, 0));
}

static void foreign_file(void)
{
	struct peer v, b;

	peer_start(&v, A, victim_user);
	peer_read(&v);
	peer_start(&b, B, binder_user);
	long long r = peer_read(&b);
	peer_end(&b);		/* its session ends: a bound file would be dropped */
	printf("foreign: uid %d binding uid %d's file: %lld\n", B, A, r);
	if (r != -EPERM)
		FAILF("uid %d bound uid %d's file: %lld, expected -EPERM", B, A, r);
	ASSERT_TRUE(file_exists(tm_path(&m, "h/victim")));
	peer_go(&v);
	ASSERT_EQ(peer_read(&v), 0);
	peer_end(&v);
	tm_sync(&m);
	cu_check_content(tm_bpath(&m, "h/victim"), "mine", 4);
}

/* ---- arena shares ------------------------------------------------------- */

static void greedy_user(int out, int in)
{
	struct raw r, again;

	ASSERT_EQ(raw_open(&r, 1ull << 50), 0);
	peer_say(out, (long long)r.w.nchunks * r.w.chunk_size);
	peer_wait(in);
	peer_say(out, raw_open(&again, 1ull << 50));
}

static void other_user(int out, int in)
{
	struct raw r;

	(void)in;
	int e = raw_open(&r, 8 * MiB);
	peer_say(out, e);
	peer_say(out, e ? 0 : (long long)r.w.nchunks * r.w.chunk_size);
}

static void arena_shares(void)
{
	struct peer a, b;

	peer_start(&a, A, greedy_user);
	long long got_a = peer_read(&a);
	peer_start(&b, B, other_user);
	long long err_b = peer_read(&b), got_b = peer_read(&b);
	printf("shares: uid %d asked for 1 PiB and got %lld bytes; uid %d then: %lld (%lld bytes)\n",
	       A, got_a, B, err_b, got_b);
	if (err_b)
		FAILF("uid %d's session was refused (%lld) while uid %d holds %lld bytes of arena",
		      B, err_b, A, got_a);
	ASSERT_LE(got_a, 16 * MiB);	/* a quarter of cache_size=64M */
	ASSERT_EQ(got_b, 8 * MiB);
	peer_go(&a);
	ASSERT_EQ(peer_read(&a), -ENOSPC);	/* A's share is spent, not B's */
	peer_end(&b);		/* first: it holds a copy of a's pipe */
	peer_end(&a);
	ASSERT_EQ(sec_log_count(&m, "GPU arenas already use a quarter of cache_size"), 1);
}

/* ---- offsets past off_t ------------------------------------------------ */

static void huge_user(int out, int in)
{
	struct raw r;
	struct ckptfs_ioc_unbind u;

	(void)in;
	ASSERT_EQ(raw_open(&r, 8 * MiB), 0);
	int fd = CHECK_SYS(open(tm_path(&m, "h/huge"), O_CREAT | O_EXCL | O_WRONLY, 0600));
	long token = raw_bind(&r, fd, 0);
	ASSERT_GE(token, 1);
	raw_post(&r, (struct ckptfs_sqe){ .op = CKPTFS_SQE_DATA, .flags = CKPTFS_SQE_ADOPT,
		.token = (uint32_t)token, .chunk = 0, .lo = 0, .hi = r.w.chunk_size,
		.index = UINT64_MAX / r.w.chunk_size - 1 });
	raw_kick(&r);
	ASSERT_EQ(raw_unbind(&r, fd, (uint32_t)token, &u), 0);
	peer_say(out, u.error);
	peer_say(out, (long long)u.adopted);
	close(fd);
	size_t len;
	char *d = read_file(tm_path(&m, ".ckptfs/drain"), &len);
	peer_say(out, d && strstr(d, "\"ok\": true"));
}

static void huge_offset(void)
{
	struct peer p;

	peer_start(&p, A, huge_user);
	long long err = peer_read(&p), adopted = peer_read(&p), drained = peer_read(&p);
	printf("huge: a chunk at file offset ~2^64: unbind error %lld, %lld bytes adopted, "
	       "drain %s\n", err, adopted, drained ? "ok" : "NOT ok");
	if (err != -EFBIG || adopted)
		FAILF("a chunk past INT64_MAX: unbind error %lld, %lld bytes adopted; expected -EFBIG, 0",
		      err, adopted);
	ASSERT_TRUE(drained);
	peer_end(&p);
	ASSERT_TRUE(!file_exists(tm_path(&m, "h/huge")));
}

/* ---- connections that never say hello ------------------------------- */

/* The daemon's threads, from /proc/PID/status. */
static long daemon_threads(void)
{
	char path[64], line[256];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)m.pid);
	if (!(f = fopen(path, "r")))
		FAILF("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Threads:", 8))
			n = atol(line + 8);
	fclose(f);
	return n;
}

static void silent_user(int out, int in)
{
	int fd[SILENT], refused = 0;

	for (int i = 0; i < SILENT; i++)
		fd[i] = raw_connect();
	peer_say(out, 0);	/* the daemon's threads may be counted */
	peer_wait(in);
	/* Refused ones get a welcome saying EAGAIN, at once; the others nothing yet. */
	for (int i = 0; i < SILENT; i++) {
		struct pollfd pf = { .fd = fd[i], .events = POLLIN };
		struct ckptfs_welcome w;
		if (poll(&pf, 1, i < HANDSHAKES_PER_UID ? 200 : 2000) == 1 &&
		    recv(fd[i], &w, sizeof(w), MSG_DONTWAIT) == (ssize_t)sizeof(w) &&
		    w.error == -EAGAIN)
			refused++;
	}
	peer_say(out, refused);
	peer_wait(in);		/* silent until the test looked */
	for (int i = 0; i < SILENT; i++)
		close(fd[i]);
}

static void silent(void)
{
	struct peer a, b;
	long before = daemon_threads();

	peer_start(&a, A, silent_user);
	peer_read(&a);
	usleep(300 * 1000);	/* the acceptor took them all (a backlog of 64) */
	long during = daemon_threads();
	peer_go(&a);
	long long refused = peer_read(&a);
	peer_start(&b, B, other_user);
	long long err_b = peer_read(&b), got_b = peer_read(&b);
	printf("silent: %d connections without a hello: %lld refused at once; daemon threads "
	       "%ld -> %ld; uid %d's session meanwhile: %lld (%lld bytes)\n", SILENT, refused,
	       before, during, B, err_b, got_b);
	if (during - before > HANDSHAKES_PER_UID + 1)
		FAILF("the daemon started %ld threads for %d silent connections", during - before,
		      SILENT);
	ASSERT_EQ(refused, SILENT - HANDSHAKES_PER_UID);
	ASSERT_EQ(err_b, 0);
	peer_end(&b);
	peer_go(&a);
	peer_end(&a);
	ASSERT_TRUE(sec_log_count(&m, "connections are already in the handshake") >= 1);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	sec_init_user_dir(&m, "session_hostile", "h", A);
	tm_mount(&m, "allow_other,cache_size=64M", NULL);
	ranges();
	sessions_gone();
	foreign_file();
	sessions_gone();
	arena_shares();
	sessions_gone();
	huge_offset();
	sessions_gone();
	silent();
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
