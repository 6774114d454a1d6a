/* SPDX-License-Identifier: MIT */
/* Finished copies, told to gpusysd (copy_report.h). */
#include <errno.h>
#include <string.h>

#include "copy_report.h"
#include "../attach/report.h"

void copy_reporter_init(struct copy_reporter *r, int cuda_device, bool on)
{
	r->cuda_device = cuda_device;
	atomic_init(&r->on, on);
	atomic_init(&r->sent, 0);
	atomic_init(&r->dropped, 0);
}

void copy_report_encode(const struct copy_job_summary *s, struct gpusys_report *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->magic = GPUSYS_REPORT_MAGIC;
	ret->kind = GPUSYS_REPORT_COPY;
	ret->length = sizeof(*ret);
	ret->direction = s->dir == COPY_DTOH;
	ret->producers_open = s->producers_start;
	ret->producers_end = s->producers_end;
	ret->bytes = s->bytes;
	ret->ns = s->ns;
	ret->added = s->producers_added;
	ret->taken_back = s->producers_removed;
}

void copy_report_job(void *arg, const struct copy_job_summary *s)
{
	struct copy_reporter *rep = arg;
	struct gpusys_report r;

	if (!atomic_load_explicit(&rep->on, memory_order_relaxed))
		return;
	copy_report_encode(s, &r);
	int rc = gpusys_report_send(&r, rep->cuda_device);
	if (rc == 0)
		atomic_fetch_add_explicit(&rep->sent, 1, memory_order_relaxed);
	else if (rc != -ENOTCONN)
		atomic_fetch_add_explicit(&rep->dropped, 1, memory_order_relaxed);
}
