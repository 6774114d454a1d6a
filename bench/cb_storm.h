/* SPDX-License-Identifier: MIT */
/*
 * The bytes-callback storm of issue 27 ("the data plane"): every thread of a
 * kernel (or lane of an emulated warp) sends one payload of 0..2 KiB to a
 * bytes callback that answers it reversed, and checks the answer byte for
 * byte. Shared by gpusys-bench calls (bench/calls_gpu.cu, calls_emu.c) and
 * the gpu test (tests/gpu/test_gpu_cbstorm.cu), so that the figure the bench
 * gives and the payloads the test checks are the same ones.
 *
 * Plain C for the emulated side, __host__ __device__ under nvcc. Lengths and
 * contents are pure functions of the thread id (and a salt per launch, so a
 * launch that left an answer unwritten cannot pass on the previous launch's
 * bytes still in the buffer).
 */
#ifndef GPUSYS_BENCH_CB_STORM_H
#define GPUSYS_BENCH_CB_STORM_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CB_STORM_HD __host__ __device__
#else
#define CB_STORM_HD
#endif

#define CB_STORM_MAX 2048u    /* the largest payload, each way */
#define CB_STORM_BLOCK 256u   /* threads a block: 256 x 132 SMs = 33,792 on the H100 */
#define CB_STORM_NEDGES 9u
#define CB_STORM_OP_REVERSE 0x8010 /* bytes in, the same bytes reversed out */
#define CB_STORM_OP_INC64 0x8011   /* 8 bytes in (x), 8 bytes out (x + 1): a typed call's shape */

static CB_STORM_HD inline uint32_t cb_storm_hash(uint32_t x)
{
	/* lowbias32 (a well-mixed 32-bit hash): neighbouring threads get
	 * unrelated lengths, so each warp mixes short and streamed lanes. */
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/* The lengths where the protocol changes shape: empty, packet 0's 16-byte
 * chunks and its 64-byte end (abi.h gpusys_inline_at), a 2 KiB stream
 * packet's end. A switch, not a table: device code cannot read a host
 * array. */
static CB_STORM_HD inline uint32_t cb_storm_edge(uint32_t i)
{
	switch (i) {
	case 0: return 0;
	case 1: return 1;
	case 2: return 15;
	case 3: return 16;
	case 4: return 63;
	case 5: return 64;
	case 6: return 65;
	case 7: return 2047;
	default: return 2048;
	}
}

/* Thread tid's payload length, at most max_len (<= CB_STORM_MAX): threads
 * 0..8 take the edges in order, one thread in 8 after them an edge at
 * random, the rest a length uniform in 0..max_len. Edges above max_len are
 * cut to it. */
static CB_STORM_HD inline uint32_t cb_storm_len(uint32_t tid, uint32_t max_len)
{
	uint32_t h = cb_storm_hash(tid ^ 0x5bd1e995u), n;
	if (tid < CB_STORM_NEDGES)
		n = cb_storm_edge(tid);
	else if ((h & 7u) == 0)
		n = cb_storm_edge((h >> 3) % CB_STORM_NEDGES);
	else
		return (h >> 3) % (max_len + 1);
	return n < max_len ? n : max_len;
}

/* Byte b of thread tid's payload in the launch of this salt: a hash of
 * the three, so another lane's bytes, a shifted or misplaced 16-byte piece
 * or an unreversed answer match only by chance (1 in 256 a byte). */
static CB_STORM_HD inline uint8_t cb_storm_byte(uint32_t tid, uint32_t salt, uint32_t b)
{
	return (uint8_t)(cb_storm_hash(tid * 0x9e3779b1u + salt * 0x85ebca6bu + b * 0x01000193u) >> 24);
}

/* Thread tid's argument of the typed comparison, and what comes back. */
static CB_STORM_HD inline uint64_t cb_storm_word(uint32_t tid, uint32_t salt)
{
	return (uint64_t)cb_storm_hash(tid + salt) << 32 | tid;
}

/* The host side of CB_STORM_OP_REVERSE (struct gpusys_callback_desc's fn). */
static inline int cb_storm_reverse(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap,
				   uint32_t *res_len)
{
	(void)user;
	const uint8_t *a = (const uint8_t *)arg;
	uint8_t *r = (uint8_t *)res;
	if (res_cap < arg_len)
		return -EMSGSIZE;
	for (uint32_t i = 0; i < arg_len; i++)
		r[i] = a[arg_len - 1 - i];
	*res_len = arg_len;
	return 0;
}

/* The host side of CB_STORM_OP_INC64 for C registration (the CUDA side
 * registers a typed callback of the same shape). */
static inline int cb_storm_inc64(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap,
				 uint32_t *res_len)
{
	(void)user;
	uint64_t x;
	if (arg_len != sizeof(x) || res_cap < sizeof(x))
		return -EINVAL;
	memcpy(&x, arg, sizeof(x));
	x++;
	memcpy(res, &x, sizeof(x));
	*res_len = sizeof(x);
	return 0;
}

#endif
