/* SPDX-License-Identifier: MIT */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"

static char load_error[256];
static int load_rc;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#if GPUSYS_HAVE_CUDA_H
static struct gpusys_cuda table;

/* The version asked of cuGetProcAddress is CUDA_VERSION, except where the
 * driver's table gives a newer ABI under the plain name than cuda.h declares
 * for it: cuCtxSynchronize is (void) in cuda.h, but CUDA 13 answers the
 * plain name with cuCtxSynchronize_v2(CUcontext). */
#define ENTRY(name) { #name, offsetof(struct gpusys_cuda, name), CUDA_VERSION, 0 }
#define ENTRY_V(name, version) { #name, offsetof(struct gpusys_cuda, name), version, 0 }
/* An entry point the code can do without: NULL where the driver lacks it. */
#define ENTRY_OPTIONAL(name) { #name, offsetof(struct gpusys_cuda, name), CUDA_VERSION, 1 }
static const struct {
	const char *symbol;
	size_t offset;
	int version;
	int optional;
} entries[] = {
	ENTRY(cuInit),
	ENTRY(cuDriverGetVersion),
	ENTRY(cuGetErrorString),
	ENTRY(cuGetErrorName),
	ENTRY(cuDeviceGet),
	ENTRY(cuDeviceGetCount),
	ENTRY(cuDeviceGetName),
	ENTRY(cuDeviceGetAttribute),
	ENTRY(cuDeviceGetUuid),
	ENTRY(cuDeviceGetPCIBusId),
	ENTRY(cuDevicePrimaryCtxRetain),
	ENTRY(cuDevicePrimaryCtxRelease),
	ENTRY(cuCtxSetCurrent),
	ENTRY(cuCtxGetCurrent),
	ENTRY(cuCtxPushCurrent),
	ENTRY(cuCtxPopCurrent),
	ENTRY_V(cuCtxSynchronize, 2000),
	ENTRY(cuMemCreate),
	ENTRY(cuMemRelease),
	ENTRY(cuMemExportToShareableHandle),
	ENTRY(cuMemImportFromShareableHandle),
	ENTRY(cuMemGetAllocationGranularity),
	ENTRY(cuMemAddressReserve),
	ENTRY(cuMemAddressFree),
	ENTRY(cuMemMap),
	ENTRY(cuMemUnmap),
	ENTRY(cuMemSetAccess),
	ENTRY(cuMemHostRegister),
	ENTRY(cuMemHostUnregister),
	ENTRY(cuMemHostGetDevicePointer),
	ENTRY(cuMemAlloc),
	ENTRY(cuMemFree),
	ENTRY(cuMemsetD8),
	ENTRY(cuMemcpyDtoH),
	ENTRY(cuMemcpyHtoD),
	ENTRY(cuMemcpyDtoHAsync),
	ENTRY(cuStreamCreate),
	ENTRY(cuStreamDestroy),
	ENTRY(cuStreamSynchronize),
	ENTRY(cuStreamQuery),
	ENTRY(cuStreamWaitValue64),
	ENTRY(cuLaunchHostFunc),
	ENTRY(cuMemcpyHtoDAsync),
	ENTRY(cuMemHostAlloc),
	ENTRY(cuMemFreeHost),
	ENTRY(cuMemHostGetFlags),
	ENTRY(cuMemGetAddressRange),
	ENTRY(cuEventCreate),
	ENTRY(cuEventDestroy),
	ENTRY(cuEventRecord),
	ENTRY(cuEventQuery),
	ENTRY(cuEventSynchronize),
	ENTRY(cuStreamWaitEvent),
	ENTRY(cuStreamWriteValue64),
	ENTRY(cuMemcpyAsync),
	ENTRY(cuStreamWriteValue32),
	ENTRY(cuPointerGetAttribute),
#if CUDA_VERSION >= 12080
	ENTRY_OPTIONAL(cuMemcpyBatchAsync),
#endif
};
#undef ENTRY
#undef ENTRY_V
#undef ENTRY_OPTIONAL

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(load_error, sizeof(load_error), "no CUDA driver (%s)", e ? e : "libcuda.so.1: not found");
		load_rc = -ENODEV;
		return;
	}
	/* cuGetProcAddress_v2 (CUDA >= 12) takes a query-result pointer; the
	 * first version does not, and ignores a fifth argument. */
	get_proc_v2_fn get = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
	if (!get)
		get = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress");
	if (!get) {
		snprintf(load_error, sizeof(load_error), "CUDA driver too old (no cuGetProcAddress in libcuda.so.1)");
		load_rc = -ENOTSUP;
		dlclose(lib);
		return;
	}
	for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		void *fn = NULL;
		CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
		CUresult r = get(entries[i].symbol, &fn, entries[i].version, CU_GET_PROC_ADDRESS_DEFAULT, &q);
		if ((r != CUDA_SUCCESS || !fn) && entries[i].optional)
			continue; /* stays NULL */
		if (r != CUDA_SUCCESS || !fn) {
			snprintf(load_error, sizeof(load_error),
				 "CUDA driver lacks %s (error %d, query %d; built for CUDA %d)", entries[i].symbol, (int)r,
				 (int)q, CUDA_VERSION);
			load_rc = -ENOTSUP;
			dlclose(lib);
			return;
		}
		memcpy((char *)&table + entries[i].offset, &fn, sizeof(fn));
	}
	table.cuDriverGetVersion(&table.driver_version);
	/* lib stays open for the life of the process. */
}

const char *gpusys_cuda_describe(const struct gpusys_cuda *cu, CUresult r, const char *what, char *buf,
				 size_t size)
{
	const char *name = NULL, *text = NULL;
	if (cu) {
		cu->cuGetErrorName(r, &name);
		cu->cuGetErrorString(r, &text);
	}
	snprintf(buf, size, "%s: %s (%s)", what, name ? name : "CUDA error", text ? text : "?");
	return buf;
}

int gpusys_cuda_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS: return 0;
	case CUDA_ERROR_OUT_OF_MEMORY: return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE: return -EINVAL;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE: return -ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED: return -ENOTSUP;
	case CUDA_ERROR_NOT_PERMITTED: return -EPERM;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return -EEXIST;
	case CUDA_ERROR_NOT_READY: return -EAGAIN;
	default: return -EIO;
	}
}
#else
static void load(void)
{
	snprintf(load_error, sizeof(load_error), "built without CUDA support (cuda.h was not found at build time)");
	load_rc = -ENOTSUP;
}
#endif

int gpusys_cuda_load(const struct gpusys_cuda **ret)
{
	pthread_once(&load_once, load);
#if GPUSYS_HAVE_CUDA_H
	if (!load_rc && ret)
		*ret = &table;
#else
	(void)ret;
#endif
	return load_rc;
}

const char *gpusys_cuda_load_error(void)
{
	pthread_once(&load_once, load);
	return load_rc ? load_error : "";
}

int gpusys_cuda_probe(int device, const struct gpusys_cuda **ret, char *msg, size_t msg_size)
{
	const struct gpusys_cuda *cu = NULL;
	int r = gpusys_cuda_load(&cu);
	if (r < 0) {
		snprintf(msg, msg_size, "%s", gpusys_cuda_load_error());
		return r;
	}
#if GPUSYS_HAVE_CUDA_H
	CUresult cr = cu->cuInit(0);
	if (cr != CUDA_SUCCESS) {
		gpusys_cuda_describe(cu, cr, "cuInit", msg, msg_size);
		return cr == CUDA_ERROR_NO_DEVICE ? -ENODEV : gpusys_cuda_errno(cr);
	}
	int count = 0;
	cr = cu->cuDeviceGetCount(&count);
	if (cr != CUDA_SUCCESS) {
		gpusys_cuda_describe(cu, cr, "cuDeviceGetCount", msg, msg_size);
		return gpusys_cuda_errno(cr);
	}
	if (device < 0 || device >= count) {
		snprintf(msg, msg_size, "no CUDA device %d (%d present)", device, count);
		return -ENODEV;
	}
	if (ret)
		*ret = cu;
	if (msg_size)
		msg[0] = 0;
	return 0;
#else
	(void)device;
	(void)ret;
	return -ENOTSUP;
#endif
}
