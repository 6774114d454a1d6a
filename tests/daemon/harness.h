/* SPDX-License-Identifier: MIT */
/*
 * Test harness for integration tests: start the real gpusysd (path in
 * $GPUSYSD_BIN) on a private runtime directory, talk to it, stop it.
 */
#ifndef GPUSYS_TEST_HARNESS_H
#define GPUSYS_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/wire.h"

struct gd {
	pid_t pid;
	char dir[128];     /* private temporary directory */
	char runtime[160]; /* dir/run */
	char config[160];  /* dir/gpusysd.conf */
	char log[160];     /* the daemon's stdout and stderr */
};

/* Make the temporary directory and write config (NULL: an empty file, so
 * the host's default config never leaks in). */
void gd_prepare(struct gd *d, const char *config);

/* Run gpusysd --runtime-dir d->runtime --config d->config [extra...] in the
 * background (extra is NULL-terminated or NULL). Returns its pid. */
pid_t gd_spawn(struct gd *d, const char *const *extra);

/* Spawn and wait until the control socket answers (fails the test if the
 * daemon exits or is not up within 5 s). */
void gd_start(struct gd *d, const char *config);

/* SIGTERM and wait; returns the wait status and the time it took in
 * *ret_ms. Fails the test if it takes 3 s. */
int gd_stop(struct gd *d, long *ret_ms);

/* Stop (asserting exit 0 within 1 s) and remove the directory. */
void gd_finish(struct gd *d);

/* Remove the temporary directory. */
void gd_cleanup(struct gd *d);

/* The daemon's log so far (malloc'd). */
char *gd_log(const struct gd *d);
/* Its last lines, at most max bytes (malloc'd): for a failure's message. */
char *gd_log_tail(const struct gd *d, size_t max);

/* Wait up to ms for a process to exit; its wait status or -1 on timeout. */
int wait_exit(pid_t pid, int ms);

/* Run argv to completion with output captured (malloc'd strings); returns
 * the wait status. */
int run_capture(const char *const *argv, char **ret_out, char **ret_err);
/* The same, but a run longer than ms is killed and returns -1 (with what it
 * wrote so far) instead of failing the test. */
int run_capture_ms(const char *const *argv, int ms, char **ret_out, char **ret_err);

/* One request on the control socket; the parsed reply or NULL. */
json_t *control_request(const char *runtime, const char *line);
json_t *daemon_status(const char *runtime);
/* Wait up to 5 s until d's daemon (started again, say) answers status on
 * its control socket; fails the test past that. */
void gd_wait_up(const struct gd *d);

/* The status entry of the client with this id, or NULL (borrowed from st). */
json_t *status_client(json_t *st, unsigned id);

/* A raw connection to the client socket, and raw hello/welcome. */
int raw_connect(const char *runtime);
void hello_init(struct gpusys_hello *h);
/* Receive a welcome (with a 2 s timeout): 0, -ETIMEDOUT, -ECONNRESET
 * (closed without one), -EPROTO (not a welcome). *ret_fd: the first
 * descriptor that came with it (the channel), or -1; others are closed. */
int raw_recv_welcome(int fd, struct gpusys_welcome *w, int *ret_fd);
/* Wait up to ms for the peer to close; true if it did. */
bool wait_peer_close(int fd, int ms);

/* Descriptors open in a process. */
int count_fds(pid_t pid);
/* The count once it has not changed for 50 ms. */
int settled_fds(pid_t pid);
/* Wait up to 1 s for the count to be want; fail (listing them) if not. */
void wait_fds(pid_t pid, int want);

long now_ms(void);

/* One lane's SLEEP (GPUSYS_OP_SLEEP) through an emulated device handle;
 * flags 0 (wait for the answer) or GPUSYS_REQ_NOREPLY. The call's status,
 * or the lane's. */
struct gpusys_dev;
int emu_sleep(const struct gpusys_dev *dev, uint64_t delay_ns, uint64_t timeout_ns, uint16_t flags);

/* Environment variable or skip the test (exit 77 style via cmocka skip). */
const char *test_env(const char *name);

#endif
