/* SPDX-License-Identifier: MIT */
/* libgpusys's side of the handshake against a fake daemon that sends
 * wrong welcomes and wrong channels: each must be refused with -EPROTO (or
 * the refusal it carries), never mapped and used. And the version it
 * welcomes in decides whether reports go on the connection (wire 4). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "common/fdpass.h"
#include "gpusys/gpusys.h"
#include "libclient/attach/client.h" /* the connection layer itself, linked from the library's objects */
#include "libclient/attach/report.h"
#include "common/wire.h"

enum fault {
	GOOD,
	REFUSE,          /* status -EUSERS with a message */
	SHORT_WELCOME,   /* a few bytes */
	BAD_MAGIC,       /* welcome magic */
	NO_FD,           /* status 0 without the memory */
	ONE_FD,          /* the memory without the wake pipe */
	THREE_FDS,
	WAKE_NOT_PIPE,   /* the second descriptor is no pipe */
	KIND_NOT_OFFERED,
	SIZE_MISMATCH,   /* channel_bytes larger than the file */
	HEADER_MAGIC,
	HEADER_PORTS,    /* header num_ports != welcome's */
	HEADER_OFFSET,   /* ports_offset off by a page */
	HEADER_ID,       /* client_id != welcome's */
	STOPPED,         /* server_state already STOPPED */
	CLOSE,           /* hang up without a welcome */
	WIRE3,           /* a good welcome of wire 3: no reports */
	REFUSE3,         /* a refusal of wire 3 (a daemon that does not speak 4) */
	FUTURE_WIRE,     /* a welcome of a version the client does not speak */
};

struct fake {
	char dir[64];
	int lfd;
	enum fault fault;
	struct gpusys_hello hello; /* what the client sent */
	int hello_fds;
	int report_rc;             /* gpusys_report_send's while attached */
	int reports;               /* whole reports the fake received */
};

/* One connection: read the hello, answer according to the fault. */
static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		return NULL;
	int hfds[4];
	unsigned nh = 0;
	ssize_t n = fdpass_recv(c, &f->hello, sizeof(f->hello), hfds, 4, &nh, NULL, 0);
	for (unsigned i = 0; i < nh; i++)
		close(hfds[i]);
	if (n != sizeof(f->hello))
		goto out;
	f->hello_fds += (int)nh;
	if (f->fault == CLOSE)
		goto out;

	uint32_t ports = 3;
	struct gpusys_channel_layout l = gpusys_channel_layout(ports, 0, 0);
	int mfd = memfd_create("fake-channel", MFD_CLOEXEC);
	assert_int_equal(ftruncate(mfd, (off_t)l.total_bytes), 0);
	void *base = mmap(NULL, l.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	assert_true(base != MAP_FAILED);
	gpusys_channel_format(base, ports, &l, 7);
	struct gpusys_channel_header *h = base;
	struct gpusys_welcome w = { .magic = GPUSYS_WELCOME_MAGIC, .wire_version = GPUSYS_WIRE_VERSION,
				    .client_id = 7, .memory_kind = GPUSYS_MEMORY_MEMFD, .num_ports = ports,
				    .channel_bytes = l.total_bytes };
	int wake[2];
	assert_int_equal(pipe2(wake, O_CLOEXEC | O_NONBLOCK), 0);
	int fds[3] = { mfd, wake[1], wake[1] }, nfds = 2;
	size_t wlen = sizeof(w);
	switch (f->fault) {
	case REFUSE:
		w.status = -EUSERS;
		strcpy(w.message, "no room");
		nfds = 0;
		break;
	case SHORT_WELCOME: wlen = 12; break;
	case BAD_MAGIC: w.magic = 1; break;
	case NO_FD: nfds = 0; break;
	case ONE_FD: nfds = 1; break;
	case THREE_FDS: nfds = 3; break;
	case WAKE_NOT_PIPE: fds[1] = mfd; break;
	case KIND_NOT_OFFERED: w.memory_kind = GPUSYS_MEMORY_CUDA_VMM; break;
	case SIZE_MISMATCH: w.channel_bytes += 4096; break;
	case HEADER_MAGIC: h->magic = 0; break;
	case HEADER_PORTS: h->num_ports = 4; break;
	case HEADER_OFFSET: h->ports_offset += 4096; break;
	case HEADER_ID: h->client_id = 8; break;
	case STOPPED: h->server_state = GPUSYS_SERVER_STOPPED; break;
	case WIRE3: w.wire_version = 3; break;
	case REFUSE3:
		w.wire_version = 3;
		w.status = -EPROTO;
		strcpy(w.message, "protocol version 4 not supported (daemon speaks 3)");
		nfds = 0;
		break;
	case FUTURE_WIRE: w.wire_version = GPUSYS_WIRE_VERSION + 1; break;
	default: break;
	}
	fdpass_send(c, &w, wlen, fds, (unsigned)nfds, MSG_NOSIGNAL);
	munmap(base, l.total_bytes);
	close(mfd);
	close(wake[0]);
	close(wake[1]);
	/* Stay connected until the client hangs up, as a daemon would,
	 * counting the reports it sends. */
	struct gpusys_report r;
	ssize_t got;
	while ((got = recv(c, &r, sizeof(r), 0)) > 0)
		f->reports += got == (ssize_t)sizeof(r) && r.magic == GPUSYS_REPORT_MAGIC;
out:
	close(c);
	return NULL;
}

static int attach_to_fake(enum fault fault, struct gpusys_attach_opts *o, struct gpusys_client **ret,
			  struct fake *f)
{
	pthread_t t;
	memset(f, 0, sizeof(*f));
	strcpy(f->dir, "/tmp/gpusys-fake.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", f->dir, GPUSYS_SOCKET_NAME);
	f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 1), 0);
	f->fault = fault;
	pthread_create(&t, NULL, fake_main, f);
	o->runtime_dir = f->dir;
	int rc = gpusys_client_attach(o, ret);
	if (rc == 0) {
		/* Whether the connection takes reports: only if the welcome
		 * said wire 4. */
		struct gpusys_report r = { .magic = GPUSYS_REPORT_MAGIC, .kind = GPUSYS_REPORT_COPY,
					   .length = sizeof(r) };
		f->report_rc = gpusys_report_send(&r, -1);
		gpusys_client_detach(*ret);
	}
	pthread_join(t, NULL);
	close(f->lfd);
	unlink(sa.sun_path);
	rmdir(f->dir);
	return rc;
}

static void test_good_fake(void **state)
{
	struct gpusys_attach_opts o = { .num_ports = 3, .cuda_device = -1, .bulk_bytes = 123 };
	struct gpusys_client *c;
	struct fake f;

	(void)state;
	/* The reference for the faults below: the same exchange, unbroken. */
	assert_int_equal(attach_to_fake(GOOD, &o, &c, &f), 0);
	/* What went over the wire. */
	assert_int_equal(f.hello.magic, GPUSYS_HELLO_MAGIC);
	assert_int_equal(f.hello.wire_version, GPUSYS_WIRE_VERSION);
	assert_int_equal(f.hello.abi_version, GPUSYS_ABI_VERSION);
	assert_int_equal(f.hello.num_ports, 3);
	assert_int_equal(f.hello.bulk_bytes, 123);
	assert_int_equal(f.hello.cuda_device, -1);
	assert_int_equal(f.hello.memory_kinds, 1u << GPUSYS_MEMORY_MEMFD);
	assert_int_equal(f.hello.fd_mask, 0);
	assert_int_equal(f.hello_fds, 0);
	assert_true(f.hello.comm[0] != 0);
	assert_int_equal(f.report_rc, 0);
	assert_int_equal(f.reports, 1);

	/* A daemon that answered in wire 3 gets no report. */
	assert_int_equal(attach_to_fake(WIRE3, &o, &c, &f), 0);
	assert_int_equal(f.report_rc, -ENOTCONN);
	assert_int_equal(f.reports, 0);

	o.pass_stdio = true;
	o.pass_cwd = true;
	assert_int_equal(attach_to_fake(GOOD, &o, &c, &f), 0);
	assert_int_equal(f.hello.fd_mask, GPUSYS_HELLO_FD_STDOUT | GPUSYS_HELLO_FD_STDERR | GPUSYS_HELLO_FD_CWD);
	assert_int_equal(f.hello_fds, 3);
}

static int own_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static void test_faults(void **state)
{
	static const struct {
		enum fault fault;
		int rc;
		const char *msg;
	} cases[] = {
		{ REFUSE, -EUSERS, "gpusysd refused: no room" },
		{ SHORT_WELCOME, -EPROTO, "malformed welcome" },
		{ BAD_MAGIC, -EPROTO, "welcome of protocol" },
		{ NO_FD, -EPROTO, "0 descriptors" },
		{ ONE_FD, -EPROTO, "1 descriptors" },
		{ THREE_FDS, -EPROTO, "3 descriptors" },
		{ WAKE_NOT_PIPE, -EPROTO, "not a pipe" },
		{ KIND_NOT_OFFERED, -EPROTO, "did not offer" },
		{ SIZE_MISMATCH, -EPROTO, "smaller than the welcome" },
		{ HEADER_MAGIC, -EPROTO, "channel header magic" },
		{ HEADER_PORTS, -EPROTO, "disagrees with the welcome" },
		{ HEADER_OFFSET, -EPROTO, "layout disagrees" },
		{ HEADER_ID, -EPROTO, "disagrees with the welcome" },
		{ STOPPED, -ESHUTDOWN, "stopped" },
		{ CLOSE, -ECONNRESET, "closed the connection" },
		{ REFUSE3, -EPROTO, "gpusysd refused: protocol version 4 not supported (daemon speaks 3)" },
		{ FUTURE_WIRE, -EPROTO, "welcome of protocol version" },
	};
	struct gpusys_attach_opts o = { .num_ports = 3, .cuda_device = -1 };
	struct gpusys_client *c;
	struct fake f;

	(void)state;
	int before = own_fds();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = attach_to_fake(cases[i].fault, &o, &c, &f);
		if (rc != cases[i].rc || !strstr(gpusys_last_error(), cases[i].msg))
			fail_msg("fault %d: got %d \"%s\", expected %d \"%s\"", (int)cases[i].fault, rc,
				 gpusys_last_error(), cases[i].rc, cases[i].msg);
	}
	/* Every descriptor that arrived with a bad welcome was closed. */
	assert_int_equal(own_fds(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_fake),
		cmocka_unit_test(test_faults),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
