/*
 * cu_check.c — compiled only where the CUDA Toolkit is found: asserts at
 * compile time that gpu/cu.h's own declarations match the toolkit's cuda.h
 * (constants equal, each entry point's type that of its prototype).  It
 * holds no code.
 */
#define CKPTFS_CU_USE_CUDA_H
#include "gpu/cu.h"

#define SAME_FN(field, proto)                                                              \
	_Static_assert(__builtin_types_compatible_p(__typeof__(((struct ckcu *)0)->field),  \
						    __typeof__(&proto)),                    \
		       "gpu/cu.h: " #field " does not match " #proto " in cuda.h")
#define SAME(ours, theirs) _Static_assert((ours) == (theirs), "gpu/cu.h: " #ours " != " #theirs)

SAME_FN(Init, cuInit);
SAME_FN(DeviceGet, cuDeviceGet);
SAME_FN(DeviceGetPCIBusId, cuDeviceGetPCIBusId);
SAME_FN(CtxGetCurrent, cuCtxGetCurrent);
SAME_FN(CtxSetCurrent, cuCtxSetCurrent);
SAME_FN(CtxGetDevice, cuCtxGetDevice);
SAME_FN(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SAME_FN(StreamCreate, cuStreamCreate);
SAME_FN(StreamDestroy, cuStreamDestroy_v2);
SAME_FN(StreamSynchronize, cuStreamSynchronize);
SAME_FN(StreamQuery, cuStreamQuery);
SAME_FN(StreamWaitEvent, cuStreamWaitEvent);
SAME_FN(EventCreate, cuEventCreate);
SAME_FN(EventRecord, cuEventRecord);
SAME_FN(EventSynchronize, cuEventSynchronize);
SAME_FN(EventQuery, cuEventQuery);
SAME_FN(EventDestroy, cuEventDestroy_v2);
SAME_FN(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
SAME_FN(LaunchHostFunc, cuLaunchHostFunc);
SAME_FN(MemHostRegister, cuMemHostRegister_v2);
SAME_FN(MemHostUnregister, cuMemHostUnregister);
SAME_FN(PointerGetAttribute, cuPointerGetAttribute);
SAME_FN(GetErrorString, cuGetErrorString);

SAME(CKCU_SUCCESS, CUDA_SUCCESS);
SAME(CKCU_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME(CKCU_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME(CKCU_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME(CKCU_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(CKCU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME(CKCU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME(CKCU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE);
SAME(CKCU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_CONTEXT);
SAME(CKCU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME(CKCU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
SAME(CKCU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SAME(CKCU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED);
SAME(sizeof(ckcu_deviceptr), sizeof(CUdeviceptr));
