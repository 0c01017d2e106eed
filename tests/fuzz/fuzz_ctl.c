/*
 * fuzz_ctl.c — libFuzzer target for the control-file command parser
 * (fs/ctl_parse.h).  Beyond memory safety: an accepted command satisfies
 * the grammar's promises (a NUL-free path shorter than CTL_PATH_MAX, a
 * sequence number above 0, a timeout within CTL_TIMEOUT_MAX), and a refused
 * one gets a one-line, printable-ASCII message.  The input is copied to a
 * buffer of exactly its size, so any read past len is caught by ASan.
 */
#include "fs/ctl_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "property failed: %s\n", #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	char *buf = malloc(size ? size : 1), err[160];
	struct ctl_cmd *cmd = malloc(sizeof(*cmd));

	memcpy(buf, data, size);
	if (ctl_cmd_parse(buf, size, cmd, err, sizeof(err)) == 0) {
		switch (cmd->kind) {
		case CTL_CMD_FLUSH: {
			size_t n = strnlen(cmd->path, CTL_PATH_MAX);
			CHECK(n > 0 && n < CTL_PATH_MAX && cmd->path[0] != '/');
			CHECK(memmem(data, size, cmd->path, n) != NULL);
			break;
		}
		case CTL_CMD_SKIP:
			CHECK(cmd->seq > 0);
			break;
		case CTL_CMD_TIMEOUT:
			CHECK(cmd->timeout_ns <= CTL_TIMEOUT_MAX * 1000000000ull + 999999999ull);
			break;
		default:
			CHECK(cmd->kind == CTL_CMD_SYNC || cmd->kind == CTL_CMD_RETRY ||
			      cmd->kind == CTL_CMD_ACK_LOST);
		}
		CHECK(ctl_cmd_name(cmd->kind)[0] != '?');
	} else {
		CHECK(err[0]);
		for (const char *p = err; *p; p++)
			CHECK(*p >= 0x20 && *p < 0x7f);
	}
	free(cmd);
	free(buf);
	return 0;
}
