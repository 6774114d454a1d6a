/* SPDX-License-Identifier: MIT */
/*
 * Requests as a hostile client writes them: the input becomes the client
 * word (opcode of any service, lane mask, flags), every lane's length and
 * capacity (unchecked, any size) and the bytes of packet 0 and of any
 * stream packets, written straight into a channel the real port server
 * (daemon/core) and the real services decode. Nothing it writes may crash
 * the daemon, trip a sanitizer or leak.
 *
 * Input: [0] op selector (high bit: the raw opcode in [1..2] instead),
 * [3..6] lane mask, [7] word flags, then per active lane a length and a
 * capacity (2 bytes each; a length with its top bit set takes 4 more bytes
 * as a raw 32-bit value), then payload bytes for packet 0 and the stream.
 *
 * Files are acted on as the fuzzing user, inside a scratch directory:
 * paths are relative only ('/' and '.' in a path call's body become '_').
 * The services are started as the daemon starts them, with this thread as
 * the main loop's, so calls that complete later are cancelled (and freed)
 * as the daemon cancels them when their client goes.
 */
#include <dirent.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/port_host.h"
#include "core/later.h"
#include "core/port_server.h"
#include "core/service.h"
#include "fuzz.h"
#include "gpusys/file.h"
#include "services.h"

#define BULK_BYTES (1u << 20)
#define MAX_STEPS 20000

static struct {
	void *base;
	size_t bytes;
	struct client client;
	char dir[64];
	unsigned runs;
	struct event_base *loop; /* the main loop: this thread is the daemon's main thread */
	struct gpusysd_config cfg;
} F;

static void setup(void)
{
	struct gpusys_channel_layout l = gpusys_channel_layout(1, BULK_BYTES, 0);

	/* As the daemon starts: the service table, the settings, a main
	 * loop (this thread's), the services' start hooks. */
	services_use(gpusysd_services);
	config_defaults(&F.cfg);
	if (services_add_settings(&F.cfg) < 0 || evthread_use_pthreads() < 0 || !(F.loop = event_base_new()))
		abort();
	later_setup(F.loop, 0);
	struct service_env env = { .cfg = &F.cfg, .base = F.loop };
	char err[256];
	if (services_start(&env, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	F.bytes = l.total_bytes;
	F.base = mmap(NULL, F.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (F.base == MAP_FAILED)
		abort();
	gpusys_channel_format(F.base, 1, &l, 1);
	strcpy(F.dir, "/tmp/gpusys-fuzz-request.XXXXXX");
	if (!mkdtemp(F.dir))
		abort();
	F.client = (struct client){ .pid = getpid(), .umask = 077, .stdout_fd = -1, .stderr_fd = -1, .sock = -1,
				    .cuda_device = -1 };
	F.client.creds.uid = getuid();
	F.client.creds.gid = getgid();
	F.client.cwd_fd = open(F.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	F.client.bulk = (uint8_t *)F.base + l.bulk_offset;
	F.client.bulk_bytes = l.bulk_bytes;
	if (F.client.cwd_fd < 0)
		abort();
}

/* What the calls created: gone every so often (nothing nests: no '/'). */
static void sweep(void)
{
	DIR *d = opendir(F.dir);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			if (unlinkat(dirfd(d), e->d_name, 0) < 0)
				unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
	closedir(d);
}

struct input {
	const uint8_t *p;
	size_t left;
};

static uint8_t take8(struct input *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

static uint32_t take(struct input *in, unsigned n)
{
	uint32_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint32_t)take8(in) << (8 * i);
	return v;
}

static void fill(struct input *in, uint8_t *dst, size_t n)
{
	size_t k = n < in->left ? n : in->left;
	memcpy(dst, in->p, k);
	memset(dst + k, 0, n - k);
	in->p += k;
	in->left -= k;
}

static bool takes_path(uint16_t op)
{
	switch (op) {
	case GPUSYS_OP_FILE_OPEN: case GPUSYS_OP_FILE_OPENDIR: case GPUSYS_OP_FILE_STAT:
	case GPUSYS_OP_FILE_UNLINK: case GPUSYS_OP_FILE_RENAME: case GPUSYS_OP_FILE_MKDIR:
	case GPUSYS_OP_FILE_RMDIR:
		return true;
	default:
		return false;
	}
}

static void confine_paths(uint8_t *data, size_t n)
{
	for (size_t i = sizeof(struct gpusys_file_req); i < n; i++)
		if (data[i] == '/' || data[i] == '.')
			data[i] = '_';
}

/* Hand the port to the daemon: the client word with the next sequence. */
static void publish(struct port_table *t, uint64_t word, uint32_t *seq)
{
	*seq = (*seq + 1) & GPUSYS_SEQ_MASK;
	t->client_word[0] = word | *seq;
}

/* One step as a poller would take it, a deferred call run in place. */
static void step(struct port_table *t)
{
	struct port_call *call = NULL;
	if (!port_pending(t, 0) || !port_try_claim(t, 0))
		return;
	if (port_server_step(t, 0, 0, &call) == PORT_STEP_DEFER)
		port_server_run(call, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = { data, size };
	struct port_table t;

	if (!F.base)
		setup();
	if (++F.runs % 1000 == 0)
		sweep();
	memset(F.base, 0, F.bytes);
	struct gpusys_channel_layout l = gpusys_channel_layout(1, BULK_BYTES, 0);
	gpusys_channel_format(F.base, 1, &l, 1);
	if (port_table_init(&t, F.base, 1, &F.client, 8u << 20) < 0)
		abort();

	uint8_t sel = take8(&in);
	uint16_t opcode;
	if (sel & 0x80) {
		opcode = (uint16_t)take(&in, 2);
	} else {
		const struct service_op *op = service_op_by_id(sel % service_op_count());
		opcode = op->opcode;
		in.p += in.left >= 2 ? 2 : in.left, in.left -= in.left >= 2 ? 2 : in.left;
	}
	uint32_t mask = take(&in, 4);
	uint8_t wflags = take8(&in);
	struct gpusys_port *port = t.ports;
	for (uint32_t l2 = 0; l2 < GPUSYS_WARP_LANES; l2++) {
		if (!(mask >> l2 & 1))
			continue;
		uint32_t len = take(&in, 2);
		if (len & 0x8000)
			len = take(&in, 4);
		port->len[l2] = len;
		port->aux[l2] = take(&in, 2);
	}
	fill(&in, port->data, sizeof(port->data));
	if (takes_path(opcode)) {
		/* Each lane's inline bytes hold its request header, then its path. */
		for (uint32_t l2 = 0; l2 < GPUSYS_WARP_LANES; l2++) {
			uint8_t lane_bytes[GPUSYS_INLINE_BYTES];
			port_host_inline_get(port->data, l2, lane_bytes, GPUSYS_INLINE_BYTES);
			confine_paths(lane_bytes, GPUSYS_INLINE_BYTES);
			port_host_inline_put(port->data, l2, lane_bytes, GPUSYS_INLINE_BYTES);
		}
	}
	uint64_t word = gpusys_client_word(0, wflags, opcode, mask);
	uint32_t seq = 0;
	publish(&t, word, &seq);
	step(&t);

	/* Further packets while the port is in a stream: a request stream
	 * fed from the input, or a response stream read out. */
	for (unsigned k = 0; k < MAX_STEPS; k++) {
		struct port_activity a;
		if (!port_server_activity(&t, 0, &a) || a.phase == 2 /* in its service */)
			break;
		if (GPUSYS_WORD_SEQ(t.server_word[0]) != seq)
			break;
		fill(&in, port->data, sizeof(port->data));
		if (takes_path(opcode))
			confine_paths(port->data, sizeof(port->data));
		publish(&t, word, &seq);
		step(&t);
	}
	/* What completes at once on the main loop does (a connect refused, a
	 * zero-delay timer); what would wait is cancelled with the client. */
	event_base_loop(F.loop, EVLOOP_NONBLOCK);
	port_table_fini(&t);
	event_base_loop(F.loop, EVLOOP_NONBLOCK);
	return 0;
}
