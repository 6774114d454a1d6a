/* SPDX-License-Identifier: MIT */
/* What a stuck synchronize prints with GPUSYS_DEBUG set (libclient/attach/
 * cuda.c): the ports of a channel whose request has no answer yet, and the
 * callback server's own view of its ports. Private to the library. */
#ifndef GPUSYS_CALLBACK_DUMP_H
#define GPUSYS_CALLBACK_DUMP_H

#include <stdio.h>

#include "gpusys/abi.h"

struct gpusys_callbacks;

/* The ports of the channel at hdr (host view) whose client word is ahead of
 * the server word, the first few in full, under the title what. */
void channel_dump_waiting(FILE *f, const char *what, const struct gpusys_channel_header *hdr);

/* The callback server's queue and threads, and each port it has not
 * answered (client word, server word, what it last acknowledged, claimed). */
void callbacks_dump_stuck(FILE *f, const struct gpusys_callbacks *cb);

#endif
