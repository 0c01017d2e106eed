/*
 * marker.c — which operations publish a checkpoint *marker*: the file a
 * framework writes last to say "the checkpoint before me is complete".
 *
 *   DeepSpeed   latest
 *   Megatron    latest_checkpointed_iteration.txt
 *   PyTorch DCP .metadata (written as .metadata.tmp, then renamed)
 *   Orbax       commit_success.txt, and the rename of a
 *               *.orbax-checkpoint-tmp-* directory to its final name
 *   HF Trainer  trainer_state.json
 *
 * An administrator's skip of a blocked operation takes every later marker
 * of the same user with it (publish.c), so no marker can name a checkpoint
 * whose files were skipped.
 */
#include "backend/pub.h"

#include <fnmatch.h>
#include <string.h>

static const char *const default_markers[] = {
	"latest", "latest_checkpointed_iteration.txt", ".metadata", "commit_success.txt",
	"trainer_state.json",
};

static bool name_is_marker(const char *name)
{
	for (size_t i = 0; name && i < CKPT_ARRAY_LEN(default_markers); i++)
		if (!strcmp(name, default_markers[i]))
			return true;
	return false;
}

bool op_is_marker(const struct op *op)
{
	switch (op->kind) {
	case OP_VERSION:
		return name_is_marker(op->name);
	case OP_RENAME:
		return name_is_marker(op->name2) ||
		       (op->name && fnmatch("*.orbax-checkpoint-tmp-*", op->name, 0) == 0);
	default:
		return false;
	}
}
