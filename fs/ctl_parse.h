/*
 * ctl_parse.h — the grammar of what is written to MOUNT/.ckptfs/ctl and
 * MOUNT/.ckptfs/drain, as a pure function (no mount state; fuzzed in
 * tests/fuzz).
 *
 * One write is one command.  A single trailing newline is dropped; nothing
 * else is trimmed, so a PATH may hold any byte but NUL (newlines included):
 *
 *   sync               seal and publish everything written so far (ctl)
 *   flush PATH         publish one file now, in order (ctl; PATH relative
 *                      to the mount, leading slashes ignored)
 *   retry              retry a blocked operation now (ctl)
 *   skip SEQ           skip blocked operation SEQ with its dependants (ctl)
 *   ack-lost           acknowledge the files this node lost in an unclean
 *                      stop: peers' later markers pass again (ctl; nodes.h N5)
 *   timeout=SECONDS    bound the wait of this drain handle (drain); also a
 *                      bare SECONDS; decimal, at most 9 fractional digits,
 *                      at most CTL_TIMEOUT_MAX seconds; 0 = do not wait
 */
#ifndef CKPTFS_CTL_PARSE_H
#define CKPTFS_CTL_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define CTL_PATH_MAX 4096
#define CTL_TIMEOUT_MAX 1000000000ull	/* seconds: about 31 years */

enum ctl_cmd_kind { CTL_CMD_SYNC, CTL_CMD_FLUSH, CTL_CMD_RETRY, CTL_CMD_SKIP, CTL_CMD_TIMEOUT,
		    CTL_CMD_ACK_LOST };

struct ctl_cmd {
	enum ctl_cmd_kind kind;
	char path[CTL_PATH_MAX];	/* flush: NUL-terminated, no NUL inside */
	uint64_t seq;			/* skip: > 0 */
	uint64_t timeout_ns;		/* timeout */
};

/*
 * Parse buf[0, len).  0, or -EINVAL with one line (no newline, printable
 * ASCII only) saying what is wrong in err.
 */
int ctl_cmd_parse(const char *buf, size_t len, struct ctl_cmd *out, char *err, size_t errlen);
const char *ctl_cmd_name(enum ctl_cmd_kind k);

#endif
