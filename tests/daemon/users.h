/* SPDX-License-Identifier: MIT */
/*
 * Tests that act as other users: skip without root, open a daemon's
 * directories to everyone, run a function in a child as another uid and
 * collect its result. The child runs no cmocka: its result is its exit
 * status, and the parent asserts on it.
 */
#ifndef GPUSYS_TEST_USERS_H
#define GPUSYS_TEST_USERS_H

#include <stdbool.h>
#include <sys/types.h>

#include "harness.h"

/* True as root; otherwise skips the current test (acting as other users
 * needs root) and returns false. */
bool need_root(void);

/* Let other users reach the daemon's sockets (the test directory is 0700). */
void open_to_all(const struct gd *d);

/* Become uid (its gid too) with extra_group as the only supplementary
 * group (0: none). 0, or -1 on failure. */
int become(uid_t uid, gid_t extra_group);

/* Fork; the child becomes uid and exits with fn's result (100 if it could
 * not become uid). Returns the child's pid (fn runs there, not here: no
 * cmocka in children). */
pid_t spawn_as(uid_t uid, gid_t extra_group, int (*fn)(void *), void *arg);

/* Wait for child p; its exit status. Fails the test if it did not exit. */
int join(pid_t p);

/* One byte through a pipe, between a child and its parent (no cmocka:
 * either side may call them). pipe_put aborts if the write fails;
 * pipe_get waits up to ms for the byte and says whether it came. */
void pipe_put(int fd);
bool pipe_get(int fd, int ms);

#endif
