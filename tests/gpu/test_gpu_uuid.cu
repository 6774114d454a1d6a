/* SPDX-License-Identifier: MIT */
/*
 * Every GPU this process sees, through one gpusysd, at once (issue 17).
 *
 * For each visible GPU (both channel kinds): attach, and run on all of them
 * together kernels whose every lane makes ECHO calls with a value of its own
 * (checked) and NOOPs. Then the daemon's status must place each client on
 * the GPU this process means: the client's "gpu" is our cuDeviceGetUuid, and
 * that GPU's PCI bus id in the daemon's table is the one CUDA gives us: a
 * value only that GPU holds, whatever either side's numbering.
 *
 * Run alone it starts its own daemon. With GPUSYS_TEST_SHARED_DAEMON=DIR it
 * uses the daemon at DIR instead, and with GPUSYS_TEST_ROUNDS=N repeats the
 * kernels N times, so that two processes with opposite CUDA_VISIBLE_DEVICES
 * orders can run it against one daemon at the same time (tests/gpu/multi-gpu.sh).
 */
#include <ctype.h>

#include <jansson.h>

#include "gpu_test.h"
#include "gpusys/device.cuh"

#define MAX_DEV 16

static __global__ void k_calls(gpusys_dev_t dev, int rounds, unsigned salt, int *bad)
{
	unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
	for (int i = 0; i < rounds; i++) {
		unsigned v = salt ^ (id * 2654435761u) ^ (unsigned)i, back = 0;
		uint32_t len = 0;
		int rc = gpusys_echo(dev, &v, sizeof(v), &back, sizeof(back), &len);
		if (rc || len != sizeof(v) || back != v)
			atomicAdd(bad, 1);
		if (gpusys_noop(dev))
			atomicAdd(bad, 1);
	}
}

struct dev_run {
	int device;
	gpusys_t *g;
	cudaStream_t stream;
	int *bad;
	char uuid[48], pci[32];
};

static void uuid_text(const cudaUUID_t *u, char *out, size_t size)
{
	const unsigned char *b = (const unsigned char *)u->bytes;
	snprintf(out, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static bool same_pci(const char *a, const char *b)
{
	for (; *a && *b; a++, b++)
		if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
			return false;
	return !*a && !*b;
}

/* The daemon's view of each of our clients: on our GPU? */
static void check_status(struct dev_run *runs, int n)
{
	static char buf[1 << 20];
	GT_CHECK(gt_control("{\"cmd\":\"status\"}\n", buf, sizeof(buf)) == 0, "control status failed");
	json_error_t e;
	json_t *st = json_loads(buf, 0, &e);
	GT_CHECK(st, "status is not JSON: %s", e.text);
	json_t *clients = json_object_get(st, "clients"), *gpus = json_object_get(st, "gpus"), *c, *g;
	size_t i, j;
	for (int d = 0; d < n; d++) {
		unsigned id = gpusys_client_id(runs[d].g);
		bool found = false;
		json_array_foreach(clients, i, c)
		{
			if ((unsigned)json_integer_value(json_object_get(c, "id")) != id)
				continue;
			found = true;
			const char *gu = json_string_value(json_object_get(c, "gpu"));
			GT_CHECK(gu && !strcmp(gu, runs[d].uuid), "device %d: the daemon has client %u on %s, we are on %s",
				 d, id, gu ? gu : "no GPU", runs[d].uuid);
			bool in_table = false;
			json_array_foreach(gpus, j, g)
			{
				if (strcmp(json_string_value(json_object_get(g, "uuid")), gu))
					continue;
				in_table = true;
				const char *pci = json_string_value(json_object_get(g, "pci_bus_id"));
				GT_CHECK(pci && same_pci(pci, runs[d].pci),
					 "device %d: the daemon's %s is at PCI %s, ours at %s", d, gu, pci ? pci : "?",
					 runs[d].pci);
				printf("  device %d (ours) = daemon's GPU %lld (CUDA ordinal %lld there): %s, %s, NUMA node "
				       "%lld\n",
				       d, (long long)json_integer_value(json_object_get(g, "index")),
				       (long long)json_integer_value(json_object_get(g, "cuda_ordinal")), gu, pci,
				       (long long)json_integer_value(json_object_get(g, "numa_node")));
			}
			GT_CHECK(in_table, "device %d: %s is not in the daemon's GPU table", d, gu);
		}
		GT_CHECK(found, "device %d: client %u not in the daemon's status", d, id);
	}
	json_decref(st);
}

static void run(uint32_t kind, int rounds)
{
	struct dev_run runs[MAX_DEV];
	int n = 0;
	GT_CUDA(cudaGetDeviceCount(&n));
	if (n > MAX_DEV)
		n = MAX_DEV;
	memset(runs, 0, sizeof(runs));
	for (int d = 0; d < n; d++) {
		struct dev_run *r = &runs[d];
		cudaDeviceProp prop;
		r->device = d;
		GT_CUDA(cudaSetDevice(d));
		GT_CUDA(cudaGetDeviceProperties(&prop, d));
		uuid_text(&prop.uuid, r->uuid, sizeof(r->uuid));
		GT_CUDA(cudaDeviceGetPCIBusId(r->pci, sizeof(r->pci), d));
		struct gpusys_options o;
		memset(&o, 0, sizeof(o));
		o.cuda_device = d;
		o.memory_kinds = 1u << kind;
		int rc = gpusys_attach(&o, &r->g);
		GT_CHECK(rc == 0, "attach device %d (%s): %s", d, gt_kind_name(kind), gpusys_strerror(rc));
		GT_CUDA(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
		GT_CUDA(cudaMalloc(&r->bad, sizeof(int)));
		GT_CUDA(cudaMemset(r->bad, 0, sizeof(int)));
	}
	/* Every GPU at once: launch all, then wait for all. */
	double t0 = gt_now();
	for (int d = 0; d < n; d++) {
		GT_CUDA(cudaSetDevice(d));
		k_calls<<<264, 128, 0, runs[d].stream>>>(gpusys_device_on(runs[d].g, runs[d].stream), rounds,
							 0x9e3779b9u * (unsigned)(d + 1), runs[d].bad);
		GT_CUDA(cudaGetLastError());
	}
	for (int d = 0; d < n; d++) {
		int rc = gpusys_synchronize(runs[d].g, runs[d].stream, 120000), bad = -1;
		GT_CHECK(rc == 0, "device %d: synchronize: %s", d, gpusys_strerror(rc));
		GT_CUDA(cudaSetDevice(d));
		GT_CUDA(cudaMemcpy(&bad, runs[d].bad, sizeof(bad), cudaMemcpyDeviceToHost));
		GT_CHECK(bad == 0, "device %d: %d calls wrong", d, bad);
	}
	printf("test_gpu_uuid: %s: %d GPU%s at once, %d ECHO+NOOP rounds from 33792 threads each: %.1f ms\n",
	       gt_kind_name(kind), n, n == 1 ? "" : "s", rounds, (gt_now() - t0) * 1e3);
	check_status(runs, n);
	for (int d = 0; d < n; d++) {
		GT_CUDA(cudaSetDevice(d));
		GT_CUDA(cudaFree(runs[d].bad));
		GT_CUDA(cudaStreamDestroy(runs[d].stream));
		gpusys_detach(runs[d].g);
	}
}

int main(void)
{
	gt_name = "test_gpu_uuid";
	const char *shared = getenv("GPUSYS_TEST_SHARED_DAEMON");
	const char *r = getenv("GPUSYS_TEST_ROUNDS");
	int rounds = r ? atoi(r) : 20;
	if (shared) {
		gt_require_gpu();
		snprintf(gt_dir, sizeof(gt_dir), "%s", shared);
		gt_dir_shared = true;
		setenv(GPUSYS_RUNTIME_DIR_ENV, shared, 1);
	} else {
		gt_require_gpu_forked();
		gt_start_daemon(NULL);
	}
	run(GPUSYS_MEMORY_MEMFD, rounds);
	run(GPUSYS_MEMORY_CUDA_VMM, rounds);
	if (!shared) {
		GT_CHECK(gt_daemon_alive(), "gpusysd died");
		gt_stop_daemon();
	}
	printf("test_gpu_uuid: all passed\n");
	return 0;
}
