/*
 * cu.c — loading the CUDA driver API at run time (see cu.h).  One load per
 * process, on first use, under a once-lock; the result (or why it failed)
 * never changes afterwards.
 */
#include "gpu/cu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct ckcu cu;
static const struct ckcu *loaded;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *sym(void *dl, const char *name, bool *ok)
{
	void *p = dlsym(dl, name);
	if (!p && *ok) {
		snprintf(load_error, sizeof(load_error), "%.200s has no %s (a driver too old?)", cu.path,
			 name);
		*ok = false;
	}
	return p;
}

static void load(void)
{
	const char *path = getenv("CKPTFS_LIBCUDA");
	bool ok = true;
	void *dl;

	if (!path || !*path)
		path = "libcuda.so.1";
	snprintf(cu.path, sizeof(cu.path), "%s", path);
	if (!(dl = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		const char *e = dlerror();
		snprintf(load_error, sizeof(load_error), "no CUDA driver: %s", e ? e : path);
		return;
	}
	cu.mock = dlsym(dl, "ckptfs_mock_driver") != NULL;
#define S(field, name) *(void **)&cu.field = sym(dl, name, &ok)
	S(Init, "cuInit");
	S(DeviceGet, "cuDeviceGet");
	S(DeviceGetPCIBusId, "cuDeviceGetPCIBusId");
	S(CtxGetCurrent, "cuCtxGetCurrent");
	S(CtxSetCurrent, "cuCtxSetCurrent");
	S(CtxGetDevice, "cuCtxGetDevice");
	S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	S(StreamCreate, "cuStreamCreate");
	S(StreamDestroy, "cuStreamDestroy_v2");
	S(StreamSynchronize, "cuStreamSynchronize");
	S(StreamQuery, "cuStreamQuery");
	S(StreamWaitEvent, "cuStreamWaitEvent");
	S(EventCreate, "cuEventCreate");
	S(EventRecord, "cuEventRecord");
	S(EventSynchronize, "cuEventSynchronize");
	S(EventQuery, "cuEventQuery");
	S(EventDestroy, "cuEventDestroy_v2");
	S(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	S(LaunchHostFunc, "cuLaunchHostFunc");
	S(MemHostRegister, "cuMemHostRegister_v2");
	S(MemHostUnregister, "cuMemHostUnregister");
	S(PointerGetAttribute, "cuPointerGetAttribute");
	S(GetErrorString, "cuGetErrorString");
#undef S
	if (!ok) {
		dlclose(dl);
		return;
	}
	ckcu_result r = cu.Init(0);
	if (r != CKCU_SUCCESS) {
		snprintf(load_error, sizeof(load_error), "cuInit failed (%s): %s", path,
			 ckcu_strerror(&cu, r));
		dlclose(dl);
		return;
	}
	loaded = &cu;	/* dl stays open for the process's life */
}

const struct ckcu *ckcu_get(char *why, size_t len)
{
	pthread_once(&once, load);
	if (!loaded && why)
		snprintf(why, len, "%s", load_error);
	return loaded;
}

const char *ckcu_strerror(const struct ckcu *c, ckcu_result r)
{
	static __thread char buf[160];
	const char *s = NULL;

	if (c && c->GetErrorString && c->GetErrorString(r, &s) == CKCU_SUCCESS && s)
		snprintf(buf, sizeof(buf), "%s (CUDA error %d)", s, (int)r);
	else
		snprintf(buf, sizeof(buf), "CUDA error %d", (int)r);
	return buf;
}
