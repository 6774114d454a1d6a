/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver API, loaded at run time: dlopen("libcuda.so.1") and every
 * entry point through cuGetProcAddress, so that gpusysd, libgpusys and the
 * tests start on machines with no GPU (or no driver) and say so. Nothing
 * links against libcuda. cuda.h from the toolkit is used for types only;
 * without it (GPUSYS_HAVE_CUDA_H == 0) gpusys_cuda_load() always fails with
 * -ENOTSUP and says the build has no CUDA support.
 */
#ifndef GPUSYS_CUDA_DRIVER_H
#define GPUSYS_CUDA_DRIVER_H

#include "config.h"

#if GPUSYS_HAVE_CUDA_H
#include <cuda.h>

/* Each member has the type of the cuda.h prototype of the same name (the
 * header maps cuMemAlloc to cuMemAlloc_v2 and so on; __typeof__ follows), and
 * is fetched with the CUDA_VERSION of that header, so the ABI matches. */
#define GPUSYS_CUDA_FN(name) __typeof__(name) *name
struct gpusys_cuda {
	int driver_version;
	GPUSYS_CUDA_FN(cuInit);
	GPUSYS_CUDA_FN(cuDriverGetVersion);
	GPUSYS_CUDA_FN(cuGetErrorString);
	GPUSYS_CUDA_FN(cuGetErrorName);
	GPUSYS_CUDA_FN(cuDeviceGet);
	GPUSYS_CUDA_FN(cuDeviceGetCount);
	GPUSYS_CUDA_FN(cuDeviceGetName);
	GPUSYS_CUDA_FN(cuDeviceGetAttribute);
	/* GPUs named by UUID, never by ordinal (wire.h, daemon/core/gpus.c) */
	GPUSYS_CUDA_FN(cuDeviceGetUuid);
	GPUSYS_CUDA_FN(cuDeviceGetPCIBusId);
	GPUSYS_CUDA_FN(cuDevicePrimaryCtxRetain);
	GPUSYS_CUDA_FN(cuDevicePrimaryCtxRelease);
	GPUSYS_CUDA_FN(cuCtxSetCurrent);
	GPUSYS_CUDA_FN(cuCtxGetCurrent);
	GPUSYS_CUDA_FN(cuCtxPushCurrent);
	GPUSYS_CUDA_FN(cuCtxPopCurrent);
	GPUSYS_CUDA_FN(cuCtxSynchronize);
	GPUSYS_CUDA_FN(cuMemCreate);
	GPUSYS_CUDA_FN(cuMemRelease);
	GPUSYS_CUDA_FN(cuMemExportToShareableHandle);
	GPUSYS_CUDA_FN(cuMemImportFromShareableHandle);
	GPUSYS_CUDA_FN(cuMemGetAllocationGranularity);
	GPUSYS_CUDA_FN(cuMemAddressReserve);
	GPUSYS_CUDA_FN(cuMemAddressFree);
	GPUSYS_CUDA_FN(cuMemMap);
	GPUSYS_CUDA_FN(cuMemUnmap);
	GPUSYS_CUDA_FN(cuMemSetAccess);
	GPUSYS_CUDA_FN(cuMemHostRegister);
	GPUSYS_CUDA_FN(cuMemHostUnregister);
	GPUSYS_CUDA_FN(cuMemHostGetDevicePointer);
	GPUSYS_CUDA_FN(cuMemAlloc);
	GPUSYS_CUDA_FN(cuMemFree);
	GPUSYS_CUDA_FN(cuMemsetD8);
	GPUSYS_CUDA_FN(cuMemcpyDtoH);
	GPUSYS_CUDA_FN(cuMemcpyHtoD); /* the callback channel's device handle (libclient/attach/cuda.c) */
	GPUSYS_CUDA_FN(cuMemcpyDtoHAsync);
	GPUSYS_CUDA_FN(cuStreamCreate);
	GPUSYS_CUDA_FN(cuStreamDestroy);
	GPUSYS_CUDA_FN(cuStreamSynchronize);
	GPUSYS_CUDA_FN(cuStreamQuery);
	/* gpusysd's GPU watch of a client's doorbell (daemon/core/wake_cuda.c) */
	GPUSYS_CUDA_FN(cuStreamWaitValue64);
	GPUSYS_CUDA_FN(cuLaunchHostFunc);
	/* libgpusys's bulk copies (libclient/copy/copy.c) */
	GPUSYS_CUDA_FN(cuMemcpyHtoDAsync);
	GPUSYS_CUDA_FN(cuMemHostAlloc);
	GPUSYS_CUDA_FN(cuMemFreeHost);
	GPUSYS_CUDA_FN(cuMemHostGetFlags);
	GPUSYS_CUDA_FN(cuMemGetAddressRange);
	GPUSYS_CUDA_FN(cuEventCreate);
	GPUSYS_CUDA_FN(cuEventDestroy);
	GPUSYS_CUDA_FN(cuEventRecord);
	GPUSYS_CUDA_FN(cuEventQuery);
	GPUSYS_CUDA_FN(cuEventSynchronize);
	GPUSYS_CUDA_FN(cuStreamWaitEvent);
	GPUSYS_CUDA_FN(cuStreamWriteValue64);
	/* libgpusys's DMA agent (libclient/dma/dma_cuda.c) */
	GPUSYS_CUDA_FN(cuMemcpyAsync);
	GPUSYS_CUDA_FN(cuStreamWriteValue32);
	GPUSYS_CUDA_FN(cuPointerGetAttribute);
	/* Optional (NULL where the driver or cuda.h predates it; the agent
	 * then starts its copies one by one): a batch of copies in one call,
	 * CUDA 12.8 */
#if CUDA_VERSION >= 12080
	GPUSYS_CUDA_FN(cuMemcpyBatchAsync);
#else
	void *cuMemcpyBatchAsync;
#endif
};
#undef GPUSYS_CUDA_FN

/* "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" into buf. */
const char *gpusys_cuda_describe(const struct gpusys_cuda *cu, CUresult r, const char *what, char *buf,
				 size_t size);

/* A CUresult as a negative errno (the closest one). */
int gpusys_cuda_errno(CUresult r);
#else
struct gpusys_cuda;
#endif

/*
 * Load the driver once per process (thread-safe; later calls return the
 * same table or the same error). Does not call cuInit. 0, or -ENODEV (no
 * driver: libcuda.so.1 cannot be opened), -ENOTSUP (built without cuda.h, or
 * the driver lacks an entry point); gpusys_cuda_load_error() then says why.
 */
int gpusys_cuda_load(const struct gpusys_cuda **ret);
const char *gpusys_cuda_load_error(void);

/* Load, cuInit(0) and check that device ordinal exists. 0 or -errno with a
 * message in msg (the reason a GPU cannot be used: tests skip with it). */
int gpusys_cuda_probe(int device, const struct gpusys_cuda **ret, char *msg, size_t msg_size);

#endif /* GPUSYS_CUDA_DRIVER_H */
