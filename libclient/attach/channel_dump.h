/* SPDX-License-Identifier: MIT */
/* What a stuck synchronize prints with GPUSYS_DEBUG set (libclient/attach/
 * cuda.c), for any channel, the daemon's or the callback server's: the
 * ports whose request has no answer yet. Private to the library. */
#ifndef GPUSYS_CHANNEL_DUMP_H
#define GPUSYS_CHANNEL_DUMP_H

#include <stdio.h>

#include "gpusys/abi.h"

/* The lines printed in full; the rest are counted. */
#define CHANNEL_DUMP_LINES 12u

/* The ports of the channel at hdr (host view) whose client word is ahead of
 * the server word, the first CHANNEL_DUMP_LINES in full, under the title
 * what. */
void channel_dump_waiting(FILE *f, const char *what, const struct gpusys_channel_header *hdr);

#endif
