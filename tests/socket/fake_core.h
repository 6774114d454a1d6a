/* SPDX-License-Identifier: MIT */
#ifndef GPUSYS_TEST_FAKE_CORE_H
#define GPUSYS_TEST_FAKE_CORE_H

/* Start the main loop and the socket service with one client (this
 * process). 0 or -errno. */
int fake_start(void);

/* Calls handed to call_later and not yet completed or cancelled. */
unsigned fake_pending(void);

#include <sys/types.h>

/* Serve the next calls as this client (pid, uid, gid, no groups). */
void fake_set_client(pid_t pid, uid_t uid, gid_t gid);

#endif
