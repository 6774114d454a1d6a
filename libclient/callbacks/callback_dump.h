/* SPDX-License-Identifier: MIT */
/* What a stuck synchronize prints with GPUSYS_DEBUG set (libclient/attach/
 * cuda.c) of the callback server: its own view of its ports, then its
 * channel's unanswered ports (libclient/attach/channel_dump.h). Private to
 * the library. */
#ifndef GPUSYS_CALLBACK_DUMP_H
#define GPUSYS_CALLBACK_DUMP_H

#include <stdio.h>

#include "gpusys/abi.h"

struct gpusys_callbacks;

/* The callback server's queue and threads, and each port it has not
 * answered (client word, server word, what it last acknowledged, claimed). */
void callbacks_dump_stuck(FILE *f, const struct gpusys_callbacks *cb);

#endif
