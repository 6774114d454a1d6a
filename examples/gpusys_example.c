/* SPDX-License-Identifier: MIT */
/*
 * gpusys-example: attach to gpusysd and make calls from emulated warps (CPU
 * threads running the same protocol code a GPU warp runs). It echoes one
 * line from each of a few lanes, then a payload too large for one packet.
 *
 *   gpusys-example [--hold SECONDS]
 *
 * GPUSYS_RUNTIME_DIR says where the daemon is (default /run/gpusysd).
 * --hold keeps the client attached for that long before detaching, so that
 * `gpusysctl status` can be watched listing it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"

static int echo_lines(const gpusys_dev_t *dev)
{
	static const char *const words[] = { "hello from lane 0", "lane 5 says hi", "lane 17: echo works",
					     "lane 31 signing off" };
	static const unsigned lanes[] = { 0, 5, 17, 31 };
	const void *in[GPUSYS_WARP_LANES] = { 0 };
	void *out[GPUSYS_WARP_LANES] = { 0 };
	uint32_t len[GPUSYS_WARP_LANES] = { 0 }, cap[GPUSYS_WARP_LANES] = { 0 }, got[GPUSYS_WARP_LANES];
	int32_t st[GPUSYS_WARP_LANES];
	char buf[4][64];
	uint64_t mask = 0;

	for (int i = 0; i < 4; i++) {
		unsigned l = lanes[i];
		mask |= 1ull << l;
		in[l] = words[i];
		len[l] = (uint32_t)strlen(words[i]);
		out[l] = buf[i];
		cap[l] = sizeof(buf[i]);
	}
	int rc = gpusys_emu_echo(dev, mask, in, len, out, cap, got, st);
	if (rc) {
		fprintf(stderr, "gpusys-example: echo: %s\n", gpusys_strerror(rc));
		return -1;
	}
	for (int i = 0; i < 4; i++) {
		unsigned l = lanes[i];
		if (st[l]) {
			fprintf(stderr, "gpusys-example: lane %u: %s\n", l, gpusys_strerror(st[l]));
			return -1;
		}
		printf("ECHO lane %2u: %.*s\n", l, (int)got[l], buf[i]);
	}
	return 0;
}

static int echo_large(const gpusys_dev_t *dev)
{
	enum { N = 100000 };
	uint8_t *src = malloc(N), *dst = malloc(N);
	for (int i = 0; i < N; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	const void *in[GPUSYS_WARP_LANES] = { src };
	void *out[GPUSYS_WARP_LANES] = { dst };
	uint32_t len[GPUSYS_WARP_LANES] = { N }, cap[GPUSYS_WARP_LANES] = { N }, got[GPUSYS_WARP_LANES];
	int32_t st[GPUSYS_WARP_LANES];
	int rc = gpusys_emu_echo(dev, 1, in, len, out, cap, got, st);
	int ok = rc == 0 && st[0] == 0 && got[0] == N && memcmp(src, dst, N) == 0;
	/* Beyond its first 64 bytes a message streams: through a 64 KiB
	 * window where the channel has windows (a call this large takes a
	 * window port), else through a port's 2 KiB; either as two slots of
	 * half that, two packets in flight (abi.h). An answer that fits a
	 * window's two slots is written with its packet 0 (ABI 13). */
	uint32_t pkt = (dev->num_windows ? GPUSYS_WINDOW_BYTES : GPUSYS_PACKET_BYTES) / GPUSYS_STREAM_SLOTS;
	uint32_t packets = (N - GPUSYS_INLINE_BYTES + pkt - 1) / pkt;
	printf("ECHO of %d bytes (packet 0, then %u stream packets of %u KiB each way, %s): %s\n", N, packets,
	       pkt / 1024, gpusys_stream_with_answer(pkt, packets) ? "the answer's with its packet 0" : "two in flight",
	       ok ? "identical" : "MISMATCH");
	free(src);
	free(dst);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	unsigned hold = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc) {
			hold = (unsigned)strtoul(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: gpusys-example [--hold SECONDS]\n");
			return 2;
		}
	}

	/* No GPU needed: emulated warps (CPU threads) call through the channel. */
	struct gpusys_options opts = { .num_ports = 4, .flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK };
	gpusys_t *client;
	int rc = gpusys_attach(&opts, &client);
	if (rc) {
		fprintf(stderr, "gpusys-example: %s\n", gpusys_last_error());
		return 1;
	}
	printf("attached to gpusysd as client %u (%u ports)\n", gpusys_client_id(client),
	       gpusys_num_ports(client));

	struct gpusys_emu *emu;
	rc = gpusys_emu_open(gpusys_host_channel(client), &emu);
	if (rc) {
		fprintf(stderr, "gpusys-example: %s\n", gpusys_strerror(rc));
		gpusys_detach(client);
		return 1;
	}
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	int bad = echo_lines(dev) || echo_large(dev) || gpusys_emu_noop(dev, 0xffffffffu);
	if (!bad)
		printf("NOOP from a full warp: ok\n");
	if (hold) {
		printf("holding the attachment for %u s\n", hold);
		fflush(stdout);
		sleep(hold);
	}
	gpusys_emu_close(emu);
	gpusys_detach(client);
	return bad ? 1 : 0;
}
