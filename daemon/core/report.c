/* SPDX-License-Identifier: MIT */
/* Reports after the welcome (report.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/report.h"

/* The parts a report's first piece can be judged by, as soon as they are
 * here: a client sending something else is told at once, not after more
 * bytes it may never send. */
static int check_head(const struct report_reader *rd, char *why, size_t len)
{
	const struct gpusys_report *r = &rd->buf.r;

	if (rd->have >= sizeof(r->magic) && r->magic != GPUSYS_REPORT_MAGIC) {
		snprintf(why, len, "not a report (magic 0x%08x, expected 0x%08x)", r->magic, GPUSYS_REPORT_MAGIC);
		return -EPROTO;
	}
	if (rd->have < offsetof(struct gpusys_report, direction))
		return 0;
	if (r->kind != GPUSYS_REPORT_COPY) {
		snprintf(why, len, "unknown report kind %u", r->kind);
		return -EPROTO;
	}
	if (r->length != sizeof(*r)) {
		snprintf(why, len, "copy report of %u bytes, expected %zu", r->length, sizeof(*r));
		return -EPROTO;
	}
	return 0;
}

static int check_producers(const struct gpusys_report *r, char *why, size_t len)
{
	if (r->producers_open < 1 || r->producers_open > GPUSYS_REPORT_MAX_PRODUCERS || r->producers_end < 1 ||
	    r->producers_end > GPUSYS_REPORT_MAX_PRODUCERS) {
		snprintf(why, len, "copy report with %u -> %u producers (1 to %u)", r->producers_open,
			 r->producers_end, GPUSYS_REPORT_MAX_PRODUCERS);
		return -EPROTO;
	}
	if (r->added > GPUSYS_REPORT_MAX_CHANGES || r->taken_back > GPUSYS_REPORT_MAX_CHANGES) {
		snprintf(why, len, "copy report with %llu producers added, %llu taken back (at most %llu)",
			 (unsigned long long)r->added, (unsigned long long)r->taken_back,
			 (unsigned long long)GPUSYS_REPORT_MAX_CHANGES);
		return -EPROTO;
	}
	/* The engine's count only moves by those two (copy_adapt.c), so a
	 * report that does not add up was not measured. No overflow: each
	 * term is bounded above. */
	if ((uint64_t)r->producers_open + r->added != (uint64_t)r->producers_end + r->taken_back) {
		snprintf(why, len, "copy report does not add up: %u producers + %llu added - %llu taken back != %u",
			 r->producers_open, (unsigned long long)r->added, (unsigned long long)r->taken_back,
			 r->producers_end);
		return -EPROTO;
	}
	return 0;
}

int report_check(const struct gpusys_report *r, char *why, size_t len)
{
	struct report_reader whole = { .buf.r = *r, .have = sizeof(*r) };
	int rc = check_head(&whole, why, len);
	if (rc < 0)
		return rc;
	if (r->direction > 1 || r->reserved) {
		snprintf(why, len, "copy report with direction %u, reserved %u", r->direction, r->reserved);
		return -EPROTO;
	}
	if (r->bytes < 1 || r->bytes > GPUSYS_REPORT_MAX_BYTES || r->ns < 1 || r->ns > GPUSYS_REPORT_MAX_NS) {
		snprintf(why, len, "copy report of %llu bytes in %llu ns (1 to %llu bytes, 1 to %llu ns)",
			 (unsigned long long)r->bytes, (unsigned long long)r->ns,
			 (unsigned long long)GPUSYS_REPORT_MAX_BYTES, (unsigned long long)GPUSYS_REPORT_MAX_NS);
		return -EPROTO;
	}
	/* ns <= 2^50, so the product fits. */
	if (r->bytes > r->ns * GPUSYS_REPORT_MAX_BYTES_PER_NS) {
		snprintf(why, len, "copy report of %llu bytes in %llu ns: faster than %u GB/s",
			 (unsigned long long)r->bytes, (unsigned long long)r->ns, GPUSYS_REPORT_MAX_BYTES_PER_NS);
		return -EPROTO;
	}
	return check_producers(r, why, len);
}

int report_read(int fd, struct report_reader *rd, struct gpusys_report *ret, char *why, size_t len)
{
	size_t room = sizeof(rd->buf) - rd->have;
	struct iovec iov = { .iov_base = rd->buf.bytes + rd->have, .iov_len = room };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	/* MSG_TRUNC: n is the record's real length (SOCK_SEQPACKET), so one
	 * that runs past the report is seen, not cut to fit. No control
	 * buffer: descriptors sent along are closed by the kernel, and
	 * MSG_CTRUNC says they came. */
	ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return -EAGAIN;
		snprintf(why, len, "%s", strerror(errno));
		return -ECONNRESET;
	}
	if (n == 0) {
		snprintf(why, len, "connection closed");
		return -ECONNRESET;
	}
	if (m.msg_flags & MSG_CTRUNC) {
		snprintf(why, len, "descriptors sent with a report");
		return -EPROTO;
	}
	if ((size_t)n > room) {
		snprintf(why, len, "a record of %zd bytes runs past the end of the report (%zu of %zu bytes to come)", n,
			 room, sizeof(rd->buf));
		return -EPROTO;
	}
	rd->have += (uint32_t)n;
	int rc = check_head(rd, why, len);
	if (rc < 0)
		return rc;
	if (rd->have < sizeof(rd->buf))
		return 0;
	rd->have = 0;
	rc = report_check(&rd->buf.r, why, len);
	if (rc < 0)
		return rc;
	*ret = rd->buf.r;
	return 1;
}

void copy_counts_add(struct copy_counts *c, const struct gpusys_report *r)
{
	/* Saturating, at what a JSON integer holds: a client that reports the
	 * most bytes the check lets through, as fast as it can, stops its own
	 * count rather than wrapping it. */
	const uint64_t most = INT64_MAX;
	c->count += c->count < most;
	c->bytes = r->bytes > most - c->bytes ? most : c->bytes + r->bytes;
	c->last = *r;
}

double report_gbs(const struct gpusys_report *r)
{
	return r->ns ? (double)r->bytes / (double)r->ns : 0;
}
