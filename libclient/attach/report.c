/* SPDX-License-Identifier: MIT */
/* Reports to gpusysd over the attachments' connections (report.h). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "report.h"

struct report_conn {
	bool used;
	int sock;
	int cuda_device;
};

/* Held while a report is sent, so that a detach (remove, then close) never
 * closes the descriptor under a send, nor lets a reused number take a
 * report meant for gpusysd. The send does not wait, so neither does anyone
 * on this lock for long. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct report_conn conns[GPUSYS_REPORT_CONNS];

int gpusys_report_conn_add(int sock, int cuda_device)
{
	int r = -ENOSPC;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < GPUSYS_REPORT_CONNS; i++)
		if (!conns[i].used) {
			conns[i] = (struct report_conn){ true, sock, cuda_device };
			r = 0;
			break;
		}
	pthread_mutex_unlock(&lock);
	return r;
}

void gpusys_report_conn_remove(int sock)
{
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < GPUSYS_REPORT_CONNS; i++)
		if (conns[i].used && conns[i].sock == sock)
			conns[i].used = false;
	pthread_mutex_unlock(&lock);
}

/* Under lock: cuda_device's connection, else the first, else -1. */
static int pick(int cuda_device)
{
	int any = -1;
	for (unsigned i = 0; i < GPUSYS_REPORT_CONNS; i++) {
		if (!conns[i].used)
			continue;
		if (conns[i].cuda_device == cuda_device)
			return conns[i].sock;
		if (any < 0)
			any = conns[i].sock;
	}
	return any;
}

int gpusys_report_send(const struct gpusys_report *r, int cuda_device)
{
	pthread_mutex_lock(&lock);
	int sock = pick(cuda_device), rc = -ENOTCONN;
	if (sock >= 0) {
		/* One record, whole or not at all (SOCK_SEQPACKET). Never
		 * retried: a report is a measurement, not a transaction, and
		 * the caller counts what was dropped. */
		ssize_t n = send(sock, r, sizeof(*r), MSG_DONTWAIT | MSG_NOSIGNAL);
		rc = n == (ssize_t)sizeof(*r) ? 0 : n < 0 && errno != EWOULDBLOCK ? -errno : -EAGAIN;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}
