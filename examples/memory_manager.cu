/* SPDX-License-Identifier: MIT */
/*
 * gpusys-memory-manager: the memory-manager test of "GPU-to-CPU Callbacks"
 * (Stuart, Cox, Owens 2010). Many blocks each ask the host for a page big
 * enough for three n x n matrices, multiply two pseudo-random matrices
 * into the third, check a sample of the result against a straight
 * recomputation, and free the page. The heap starts small and grows while
 * the kernel runs; each time a block sees it bigger than anyone has printed
 * so far, it says so with gpusys_printf (the lines appear while the kernel
 * runs).
 *
 *     gpusysd --runtime-dir /tmp/g &       # alloc_chunk_bytes = 4M, say
 *     GPUSYS_RUNTIME_DIR=/tmp/g gpusys-memory-manager [--n 96] [--jobs 8192] [--blocks-per-sm 4]
 *
 * Exit status 0 when every sampled element matched and every page was
 * freed; the host prints a summary.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

#define THREADS 256
#define SAMPLES 16

struct tally {
	unsigned long long pages, checked, wrong, failed_mallocs, failed_frees;
	unsigned long long printed_mib; /* the largest heap size printed so far */
};

static __device__ float value(unsigned job, unsigned which, unsigned i)
{
	unsigned x = job * 2654435761u ^ which * 40503u ^ i * 2246822519u;
	x ^= x >> 15;
	x *= 2246822519u;
	x ^= x >> 13;
	return (float)(x % 1024u) / 512.0f - 1.0f;
}

static __global__ void work(gpusys_heap_t h, int n, int jobs, struct tally *t)
{
	__shared__ float *page;
	__shared__ int ok;
	const size_t nn = (size_t)n * n;
	for (int job = blockIdx.x; job < jobs; job += gridDim.x) {
		if (threadIdx.x == 0) {
			/* One request from one thread: the page for A, B and C. */
			page = (float *)gpusys_malloc(h, 3 * nn * sizeof(float));
			ok = page != NULL;
			if (!page) {
				atomicAdd(&t->failed_mallocs, 1ull);
				gpusys_printf(h.dev, "block %d job %d: no page (errno %d)\n", (int)blockIdx.x, job,
					      gpusys_alloc_errno(h));
			} else {
				atomicAdd(&t->pages, 1ull);
				/* the heap as mapped right now (written by the host's mapping thread) */
				unsigned long long mib = gpusys_heap_mapped_bytes(h) >> 20;
				if (atomicMax(&t->printed_mib, mib) < mib)
					gpusys_printf(h.dev, "block %d job %d: heap now %llu MiB mapped\n",
						      (int)blockIdx.x, job, mib);
			}
		}
		__syncthreads();
		if (!ok)
			continue;
		float *A = page, *B = page + nn, *C = page + 2 * nn;
		for (size_t i = threadIdx.x; i < nn; i += blockDim.x) {
			A[i] = value(job, 0, (unsigned)i);
			B[i] = value(job, 1, (unsigned)i);
		}
		__syncthreads();
		for (size_t i = threadIdx.x; i < nn; i += blockDim.x) {
			size_t r = i / n, c = i % n;
			float s = 0.0f;
			for (int k = 0; k < n; k++)
				s += A[r * n + k] * B[k * n + c];
			C[i] = s;
		}
		__syncthreads();
		if (threadIdx.x < SAMPLES) {
			/* recompute a sample from the generator, not from A and B */
			unsigned idx = (unsigned)((job * 7919u + threadIdx.x * 104729u) % nn);
			unsigned r = idx / n, c = idx % n;
			float s = 0.0f;
			for (int k = 0; k < n; k++)
				s += value(job, 0, r * n + k) * value(job, 1, k * n + c);
			float d = s - C[idx];
			atomicAdd(&t->checked, 1ull);
			if (d > 1e-3f || d < -1e-3f)
				atomicAdd(&t->wrong, 1ull);
		}
		__syncthreads();
		if (threadIdx.x == 0 && gpusys_free(h, page))
			atomicAdd(&t->failed_frees, 1ull);
		__syncthreads();
	}
}

int main(int argc, char **argv)
{
	int n = 96, jobs = 8192, per_sm = 4, opt;
	static const struct option opts[] = {
		{ "n", required_argument, NULL, 'n' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "blocks-per-sm", required_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'n': n = atoi(optarg); break;
		case 'j': jobs = atoi(optarg); break;
		case 'b': per_sm = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: gpusys-memory-manager [--n N] [--jobs N] [--blocks-per-sm N]\n");
			return 2;
		}
	}
	if (n < 4 || n > 1024 || jobs < 1 || per_sm < 1) {
		fprintf(stderr, "gpusys-memory-manager: bad arguments\n");
		return 2;
	}

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpusys_attach: %s\n", gpusys_last_error());
		return 1;
	}
	struct gpusys_heap *heap;
	struct gpusys_heap_options ho;
	memset(&ho, 0, sizeof(ho));
	rc = gpusys_heap_open(g, &ho, &heap);
	if (rc) {
		fprintf(stderr, "gpusys_heap_open: %s\n", gpusys_strerror(rc));
		return 1;
	}
	cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	int blocks = prop.multiProcessorCount * per_sm;
	struct tally *t;
	if (cudaMallocManaged(&t, sizeof(*t)) != cudaSuccess)
		return 1;
	memset(t, 0, sizeof(*t));

	printf("%d blocks, %d jobs, pages of %zu KiB (three %dx%d float matrices)\n", blocks, jobs,
	       3 * (size_t)n * n * sizeof(float) / 1024, n, n);
	fflush(stdout);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaEventRecord(e0);
	work<<<blocks, THREADS>>>(gpusys_heap_device(heap), n, jobs, t);
	cudaEventRecord(e1);
	rc = gpusys_synchronize(g, NULL, -1);
	float ms = 0;
	cudaEventElapsedTime(&ms, e0, e1);
	cudaError_t ce = cudaGetLastError();
	printf("kernel: %.1f ms; %llu pages, %llu elements checked, %llu wrong, %llu failed mallocs, %llu failed "
	       "frees; heap %llu MiB mapped in %u mappings (the last took %.2f ms)\n",
	       ms, t->pages, t->checked, t->wrong, t->failed_mallocs, t->failed_frees,
	       (unsigned long long)(gpusys_heap_mapped(heap) >> 20), gpusys_heap_maps(heap),
	       gpusys_heap_last_map_ns(heap) / 1e6);
	int ok = rc == 0 && ce == cudaSuccess && t->pages == (unsigned long long)jobs && t->wrong == 0 &&
		 t->failed_frees == 0 && t->checked == (unsigned long long)jobs * SAMPLES;
	if (!ok)
		fprintf(stderr, "gpusys-memory-manager: FAILED (synchronize: %s, CUDA: %s)\n", gpusys_strerror(rc),
			cudaGetErrorString(ce));
	gpusys_heap_close(heap);
	gpusys_detach(g);
	return ok ? 0 : 1;
}
