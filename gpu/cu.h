/*
 * cu.h — the few CUDA driver API entry points libckptfs uses, loaded at run
 * time with dlopen (CKPTFS_LIBCUDA selects the library; default
 * libcuda.so.1), so nothing needs CUDA to build or to run without a GPU.
 *
 * The types and constants below are our own declarations of what the
 * driver API documents, so the library builds without the CUDA Toolkit.
 * When the toolkit is found at configure time, cu_check.c includes its
 * cuda.h and asserts at compile time that every constant here equals the
 * toolkit's and every function type matches its prototype.
 *
 * Symbol names are the versioned ones cuda.h maps the API names to
 * (cuMemcpyDtoHAsync -> cuMemcpyDtoHAsync_v2, ...), without the per-thread
 * default-stream variants: a NULL stream is the legacy default stream.
 */
#ifndef CKPTFS_GPU_CU_H
#define CKPTFS_GPU_CU_H

#include <stdbool.h>
#include <stddef.h>

#ifdef CKPTFS_CU_USE_CUDA_H
#include <cuda.h>
typedef CUresult ckcu_result;
typedef CUdevice ckcu_device;
typedef CUcontext ckcu_context;
typedef CUstream ckcu_stream;
typedef CUevent ckcu_event;
typedef CUdeviceptr ckcu_deviceptr;
typedef CUhostFn ckcu_hostfn;
typedef CUpointer_attribute ckcu_pointer_attribute;
#else
typedef int ckcu_result;
typedef int ckcu_device;
typedef struct CUctx_st *ckcu_context;
typedef struct CUstream_st *ckcu_stream;
typedef struct CUevent_st *ckcu_event;
typedef unsigned long long ckcu_deviceptr;
typedef void (*ckcu_hostfn)(void *user_data);
typedef int ckcu_pointer_attribute;
#endif

#define CKCU_SUCCESS 0
#define CKCU_ERROR_INVALID_VALUE 1
#define CKCU_ERROR_NOT_INITIALIZED 3
#define CKCU_ERROR_NO_DEVICE 100
#define CKCU_ERROR_NOT_READY 600
#define CKCU_STREAM_NON_BLOCKING 0x1
#define CKCU_EVENT_DISABLE_TIMING 0x2
#define CKCU_MEMHOSTREGISTER_PORTABLE 0x1
#define CKCU_POINTER_ATTRIBUTE_CONTEXT 1
#define CKCU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CKCU_MEMORYTYPE_HOST 1
#define CKCU_MEMORYTYPE_DEVICE 2
#define CKCU_MEMORYTYPE_UNIFIED 4

/* The loaded driver.  Every entry is non-NULL once ckcu_load() succeeded. */
struct ckcu {
	bool mock;		/* the library exports ckptfs_mock_driver */
	char path[256];		/* what was loaded */
	ckcu_result (*Init)(unsigned int flags);
	ckcu_result (*DeviceGet)(ckcu_device *dev, int ordinal);
	ckcu_result (*DeviceGetPCIBusId)(char *id, int len, ckcu_device dev);
	ckcu_result (*CtxGetCurrent)(ckcu_context *ctx);
	ckcu_result (*CtxSetCurrent)(ckcu_context ctx);
	ckcu_result (*CtxGetDevice)(ckcu_device *dev);
	ckcu_result (*DevicePrimaryCtxRetain)(ckcu_context *ctx, ckcu_device dev);
	ckcu_result (*StreamCreate)(ckcu_stream *s, unsigned int flags);
	ckcu_result (*StreamDestroy)(ckcu_stream s);
	ckcu_result (*StreamSynchronize)(ckcu_stream s);
	ckcu_result (*StreamQuery)(ckcu_stream s);
	ckcu_result (*StreamWaitEvent)(ckcu_stream s, ckcu_event e, unsigned int flags);
	ckcu_result (*EventCreate)(ckcu_event *e, unsigned int flags);
	ckcu_result (*EventRecord)(ckcu_event e, ckcu_stream s);
	ckcu_result (*EventSynchronize)(ckcu_event e);
	ckcu_result (*EventQuery)(ckcu_event e);
	ckcu_result (*EventDestroy)(ckcu_event e);
	ckcu_result (*MemcpyDtoHAsync)(void *dst, ckcu_deviceptr src, size_t n, ckcu_stream s);
	ckcu_result (*LaunchHostFunc)(ckcu_stream s, ckcu_hostfn fn, void *arg);
	ckcu_result (*MemHostRegister)(void *p, size_t n, unsigned int flags);
	ckcu_result (*MemHostUnregister)(void *p);
	ckcu_result (*PointerGetAttribute)(void *data, ckcu_pointer_attribute a, ckcu_deviceptr p);
	ckcu_result (*GetErrorString)(ckcu_result r, const char **s);
};

/*
 * Load the driver once per process ($CKPTFS_LIBCUDA or libcuda.so.1) and
 * cuInit it.  Returns it, or NULL with why in `why` (no library, a symbol
 * missing, no device).
 */
const struct ckcu *ckcu_get(char *why, size_t len);

/* "CUDA_ERROR_...: text" for r. */
const char *ckcu_strerror(const struct ckcu *cu, ckcu_result r);

#endif
