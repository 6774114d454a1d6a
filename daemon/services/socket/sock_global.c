/* SPDX-License-Identifier: MIT */
/*
 * The socket service's one piece of daemon-wide state (sock_call.h, struct
 * sock_global): its loop, its resolver and its policy. Defined on its own so
 * that the files that read it (the calls, the loops, DNS) depend on it and
 * not on each other.
 */
#include "services/socket/sock_call.h"

struct sock_global sock_g;
