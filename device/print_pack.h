/* SPDX-License-Identifier: MIT */
/*
 * The client side of the print service, written once like port_client.h:
 * nvcc compiles it for kernels (include/gpusys/print.cuh), the host compiler
 * for the emulator (libclient/emulator/emu_print.c). The record format is described
 * in include/gpusys/print.h.
 *
 *   gpusys_print_pack()   one lane's record from a format and tagged args
 *   gpusys_print_lanes()  a warp's lines: pack each lane, one gpusys_rpc for
 *                         all of them (lines beyond a slot stream), retry
 *                         the lanes the daemon answered -EAGAIN (its output
 *                         buffer for this client was full) with backoff
 *   gpusys_print_flush_lanes()  wait until every line the daemon accepted
 *                         so far is written out
 */
#ifndef GPUSYS_PRINT_PACK_H
#define GPUSYS_PRINT_PACK_H

#include <errno.h>
#include <stdint.h>
#if !defined(__CUDACC__)
#include <stdlib.h>
#endif

#include "gpusys/print.h"
#include "port_client.h"

/* ------------------------------------------------------------ the packer */

/* Writes go through these so that one pass both measures and fills: bytes
 * past cap are counted, not stored. */
GPUSYS_FN uint32_t gpusys_print_put8(uint8_t *buf, uint32_t cap, uint32_t at, uint32_t v)
{
	if (at < cap)
		buf[at] = (uint8_t)v;
	return at + 1;
}

GPUSYS_FN uint32_t gpusys_print_putn(uint8_t *buf, uint32_t cap, uint32_t at, uint64_t v, uint32_t n)
{
	for (uint32_t b = 0; b < n; b++)
		at = gpusys_print_put8(buf, cap, at, (uint32_t)(v >> (8 * b)) & 0xffu);
	return at;
}

GPUSYS_FN int gpusys_print_is_int_tag(uint32_t tag)
{
	return tag >= GPUSYS_PRINT_I32 && tag <= GPUSYS_PRINT_U64;
}

/* One argument. conv is the conversion it is printed with (0: none, an
 * extra argument); prec the precision that bounds a string (-1: none). */
GPUSYS_FN int64_t gpusys_print_put_arg(uint8_t *buf, uint32_t cap, uint32_t at, const struct gpusys_print_arg *a,
				       char conv, int64_t prec)
{
	switch (a->tag) {
	case GPUSYS_PRINT_I32:
	case GPUSYS_PRINT_U32:
		at = gpusys_print_put8(buf, cap, at, a->tag);
		return gpusys_print_putn(buf, cap, at, a->v.u, 4);
	case GPUSYS_PRINT_I64:
	case GPUSYS_PRINT_U64:
	case GPUSYS_PRINT_F64:
		at = gpusys_print_put8(buf, cap, at, a->tag);
		return gpusys_print_putn(buf, cap, at, a->v.u, 8);
	case GPUSYS_PRINT_PTR:
		at = gpusys_print_put8(buf, cap, at, GPUSYS_PRINT_PTR);
		return gpusys_print_putn(buf, cap, at, (uint64_t)(uintptr_t)a->v.p, 8);
	case GPUSYS_PRINT_STR:
		if (conv != 's') { /* %p of a char *, or an extra: never read it */
			at = gpusys_print_put8(buf, cap, at, GPUSYS_PRINT_PTR);
			return gpusys_print_putn(buf, cap, at, (uint64_t)(uintptr_t)a->v.s, 8);
		}
		if (!a->v.s)
			return gpusys_print_put8(buf, cap, at, GPUSYS_PRINT_STR_NULL);
		{
			/* With a precision, C reads no further than it: the
			 * array need not be NUL-terminated. */
			uint32_t bound = GPUSYS_PRINT_MAX_STR, n = 0;
			if (prec >= 0 && prec < (int64_t)bound)
				bound = (uint32_t)prec;
			while (n < bound && a->v.s[n])
				n++;
			at = gpusys_print_put8(buf, cap, at, GPUSYS_PRINT_STR);
			at = gpusys_print_putn(buf, cap, at, n, 2);
			for (uint32_t k = 0; k < n; k++)
				at = gpusys_print_put8(buf, cap, at, (uint8_t)a->v.s[k]);
			return at;
		}
	default:
		return -EINVAL;
	}
}

/*
 * Pack one lane's record into buf (cap bytes). Returns the record's size,
 * which may exceed cap (then buf holds only a prefix: call again with a
 * buffer that large), or -E2BIG (format longer than GPUSYS_PRINT_MAX_FMT),
 * -EINVAL (bad stream, unknown tag, more than GPUSYS_PRINT_MAX_ARGS args).
 *
 * The format is walked only to pair each argument with its conversion, so
 * that a char * printed with %s travels as its bytes and any other pointer as
 * its address. Whether the pairing is valid is the daemon's call
 * (daemon/services/print/print_format.c): it trusts nothing the client sends.
 */
GPUSYS_FN int64_t gpusys_print_pack(uint8_t *buf, uint32_t cap, uint32_t stream, const char *fmt,
				    const struct gpusys_print_arg *args, uint32_t nargs)
{
	uint32_t flen = 0, at = 0, ai = 0;

	if (stream != GPUSYS_PRINT_STDOUT && stream != GPUSYS_PRINT_STDERR)
		return -EINVAL;
	if (nargs > GPUSYS_PRINT_MAX_ARGS || !fmt)
		return -EINVAL;
	while (fmt[flen]) {
		if (++flen > GPUSYS_PRINT_MAX_FMT)
			return -E2BIG;
	}
	at = gpusys_print_put8(buf, cap, at, stream | (flen > 255u ? GPUSYS_PRINT_LONG_FMT : 0u));
	at = gpusys_print_putn(buf, cap, at, flen, flen > 255u ? 2u : 1u);
	for (uint32_t i = 0; i < flen; i++)
		at = gpusys_print_put8(buf, cap, at, (uint8_t)fmt[i]);

	for (uint32_t i = 0; i < flen; i++) {
		int64_t prec = -1, r;
		if (fmt[i] != '%')
			continue;
		if (++i >= flen)
			break;
		if (fmt[i] == '%')
			continue;
		while (i < flen && (fmt[i] == '-' || fmt[i] == '+' || fmt[i] == ' ' || fmt[i] == '#' ||
				    fmt[i] == '0' || fmt[i] == '\''))
			i++;
		if (i < flen && fmt[i] == '*') {
			if (ai < nargs) {
				r = gpusys_print_put_arg(buf, cap, at, &args[ai++], '*', -1);
				if (r < 0)
					return r;
				at = (uint32_t)r;
			}
			i++;
		} else {
			while (i < flen && fmt[i] >= '0' && fmt[i] <= '9')
				i++;
		}
		if (i < flen && fmt[i] == '.') {
			i++;
			if (i < flen && fmt[i] == '*') {
				if (ai < nargs) {
					const struct gpusys_print_arg *pa = &args[ai++];
					if (gpusys_print_is_int_tag(pa->tag))
						prec = pa->tag == GPUSYS_PRINT_I32 ? (int64_t)(int32_t)pa->v.i
										: (int64_t)pa->v.i;
					r = gpusys_print_put_arg(buf, cap, at, pa, '*', -1);
					if (r < 0)
						return r;
					at = (uint32_t)r;
				}
				i++;
			} else {
				prec = 0;
				while (i < flen && fmt[i] >= '0' && fmt[i] <= '9') {
					if (prec < (int64_t)GPUSYS_PRINT_MAX_STR)
						prec = prec * 10 + (fmt[i] - '0');
					i++;
				}
			}
		}
		while (i < flen && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L' || fmt[i] == 'q' ||
				    fmt[i] == 'j' || fmt[i] == 'z' || fmt[i] == 't'))
			i++;
		if (i >= flen)
			break;
		if (ai < nargs) {
			r = gpusys_print_put_arg(buf, cap, at, &args[ai++], fmt[i], prec);
			if (r < 0)
				return r;
			at = (uint32_t)r;
		}
	}
	for (; ai < nargs; ai++) { /* extras: printf ignores them, so does the daemon */
		int64_t r = gpusys_print_put_arg(buf, cap, at, &args[ai], 0, -1);
		if (r < 0)
			return r;
		at = (uint32_t)r;
	}
	return at;
}

/* ---------------------------------------------------------- warp calls */

#if defined(__CUDACC__)
GPUSYS_FN void *gpusys_print_alloc(uint32_t n)
{
	return malloc(n);
}

GPUSYS_FN void gpusys_print_free(void *p)
{
	free(p);
}
#else
static inline void *gpusys_print_alloc(uint32_t n)
{
	return malloc(n);
}

static inline void gpusys_print_free(void *p)
{
	free(p);
}
#endif

/* Backoff while the daemon's buffer for this client is full: from 1 us up
 * to 256 us between tries. The writer drains megabytes in that time. */
#define GPUSYS_PRINT_BACKOFF_MIN_NS 1000u
#define GPUSYS_PRINT_BACKOFF_MAX_NS 256000u

/*
 * Print one line per lane of mask (every lane of mask calls it together, as
 * gpusys_rpc). Per-lane arrays (index GPUSYS_LI(lane)): stream, fmt, args,
 * nargs, and ret, which receives the bytes the lane printed or -errno
 * (-ESHUTDOWN when the daemon has gone; see include/gpusys/print.h).
 * Lines longer than a slot stream automatically; a line that needs more than
 * GPUSYS_PRINT_LOCAL_BYTES of record is packed in malloc'ed memory (-ENOMEM
 * if there is none).
 */
GPUSYS_FN void gpusys_print_lanes(const gpusys_dev_t *dev, uint64_t mask, const uint32_t *stream,
				  const char *const *fmt, const struct gpusys_print_arg *const *args,
				  const uint32_t *nargs, int32_t *ret)
{
	uint8_t local[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1][GPUSYS_PRINT_LOCAL_BYTES];
	uint8_t *heap[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	const void *in[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	void *out[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t in_len[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t cap[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t got[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	int32_t st[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	int sent[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	int again[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint64_t m = mask;
	uint32_t backoff = GPUSYS_PRINT_BACKOFF_MIN_NS;

	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t li = GPUSYS_LI(l);
		int64_t n = gpusys_print_pack(local[li], GPUSYS_PRINT_LOCAL_BYTES, stream[li], fmt[li], args[li],
					      nargs[li]);
		heap[li] = 0;
		in[li] = local[li];
		out[li] = 0;
		cap[li] = 0;
		in_len[li] = 0;
		sent[li] = 0;
		if (n > (int64_t)GPUSYS_PRINT_LOCAL_BYTES) {
			heap[li] = (uint8_t *)gpusys_print_alloc((uint32_t)n);
			if (!heap[li])
				n = -ENOMEM;
			else
				n = gpusys_print_pack(heap[li], (uint32_t)n, stream[li], fmt[li], args[li], nargs[li]);
			in[li] = heap[li];
		}
		if (n < 0) {
			ret[li] = (int32_t)n; /* sent with no bytes; its answer is ignored */
		} else {
			in_len[li] = (uint32_t)n;
			sent[li] = 1;
		}
	}

	for (;;) {
		int rc = gpusys_rpc(dev, GPUSYS_OP_PRINT, 0, m, in, in_len, out, cap, got, st);
		GPUSYS_FOR_EACH_LANE(m, l)
		{
			uint32_t li = GPUSYS_LI(l);
			again[li] = 0;
			if (!sent[li])
				continue;
			ret[li] = rc ? rc : st[li];
			again[li] = rc == 0 && st[li] == -EAGAIN;
		}
		uint64_t m2 = gpusys_lane_ballot(m, again);
		if (!m2)
			break;
		gpusys_backoff_sleep(backoff);
		if (backoff < GPUSYS_PRINT_BACKOFF_MAX_NS)
			backoff *= 2;
#if defined(__CUDACC__)
		if (!again[0])
			break; /* this lane is done; the others go on without it */
#endif
		m = m2;
	}

	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (heap[GPUSYS_LI(l)])
			gpusys_print_free(heap[GPUSYS_LI(l)]);
	}
}

/*
 * Start one line per lane of mask as a future (port_client.h) or, with
 * GPUSYS_REQ_NOREPLY, fire-and-forget. The record is packed and sent before
 * this returns, so fmt, args and strings may go away at once. Unlike
 * gpusys_print_lanes there is no retry: a lane the daemon answers -EAGAIN
 * (its buffer for this client was full) gets -EAGAIN from the future, and a
 * fire-and-forget line is then dropped. ret[lane]: -errno for a lane whose
 * line could not be packed (it sends nothing), else 0.
 */
GPUSYS_FN void gpusys_print_start(const gpusys_dev_t *dev, uint64_t mask, uint16_t flags, int async,
				  const uint32_t *stream, const char *const *fmt,
				  const struct gpusys_print_arg *const *args, const uint32_t *nargs, int32_t *ret,
				  struct gpusys_rpc_pending *pd)
{
	uint8_t local[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1][GPUSYS_PRINT_LOCAL_BYTES];
	uint8_t *heap[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	const void *in[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t in_len[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t cap[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];

	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t li = GPUSYS_LI(l);
		int64_t n = gpusys_print_pack(local[li], GPUSYS_PRINT_LOCAL_BYTES, stream[li], fmt[li], args[li],
					      nargs[li]);
		heap[li] = 0;
		in[li] = local[li];
		cap[li] = 0;
		in_len[li] = 0;
		if (n > (int64_t)GPUSYS_PRINT_LOCAL_BYTES) {
			heap[li] = (uint8_t *)gpusys_print_alloc((uint32_t)n);
			if (!heap[li])
				n = -ENOMEM;
			else
				n = gpusys_print_pack(heap[li], (uint32_t)n, stream[li], fmt[li], args[li], nargs[li]);
			in[li] = heap[li];
		}
		ret[li] = n < 0 ? (int32_t)n : 0;
		in_len[li] = n < 0 ? 0 : (uint32_t)n;
	}
	gpusys_rpc_start(dev, GPUSYS_OP_PRINT, flags, mask, in, in_len, cap, async, pd);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (heap[GPUSYS_LI(l)])
			gpusys_print_free(heap[GPUSYS_LI(l)]);
	}
}

/* How long a flush keeps asking before it says -ETIMEDOUT (the sum of its
 * backoff sleeps). */
#define GPUSYS_PRINT_FLUSH_WAIT_NS 10000000000ull

/* Wait until every line the daemon accepted from this client before the call
 * has been written to its descriptor (or failed to be). The daemon never
 * waits: it answers -EAGAIN and the byte count to wait for, which each lane
 * sends back on its next try (with backoff). 0, -ETIMEDOUT (the descriptor
 * did not drain within GPUSYS_PRINT_FLUSH_WAIT_NS), -ESHUTDOWN. */
GPUSYS_FN int gpusys_print_flush_lanes(const gpusys_dev_t *dev, uint64_t mask)
{
	uint64_t target[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	const void *in[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	void *out[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t len[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t cap[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t got[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	int32_t st[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	int32_t result[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	int again[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint64_t m = mask, slept = 0;
	uint32_t backoff = GPUSYS_PRINT_BACKOFF_MIN_NS;
	int32_t first = 0;

	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t li = GPUSYS_LI(l);
		target[li] = 0;
		in[li] = &target[li];
		out[li] = &target[li];
		len[li] = 0; /* the first try: "what is there now" */
		cap[li] = 8;
		result[li] = 0;
	}
	for (;;) {
		int rc = gpusys_rpc(dev, GPUSYS_OP_PRINT_FLUSH, 0, m, in, len, out, cap, got, st);
		GPUSYS_FOR_EACH_LANE(m, l)
		{
			uint32_t li = GPUSYS_LI(l);
			result[li] = rc ? rc : st[li];
			again[li] = rc == 0 && st[li] == -EAGAIN && got[li] == 8;
			if (again[li])
				len[li] = 8; /* the target the daemon named, back */
		}
		uint64_t m2 = gpusys_lane_ballot(m, again);
		if (!m2)
			break;
		if (slept >= GPUSYS_PRINT_FLUSH_WAIT_NS) {
			GPUSYS_FOR_EACH_LANE(m, l)
			{
				if (again[GPUSYS_LI(l)])
					result[GPUSYS_LI(l)] = -ETIMEDOUT;
			}
			break;
		}
		gpusys_backoff_sleep(backoff);
		slept += backoff;
		if (backoff < GPUSYS_PRINT_BACKOFF_MAX_NS)
			backoff *= 2;
#if defined(__CUDACC__)
		if (!again[0])
			break;
#endif
		m = m2;
	}
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (result[GPUSYS_LI(l)] && !first)
			first = result[GPUSYS_LI(l)];
	}
	return first;
}

#endif /* GPUSYS_PRINT_PACK_H */
