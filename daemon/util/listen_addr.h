/* SPDX-License-Identifier: MIT */
/* "HOST:PORT" addresses to listen on (metrics_listen): one parser for the
 * config file, which refuses a bad one with its FILE:LINE, and for the
 * listener that binds it. */
#ifndef GPUSYSD_LISTEN_ADDR_H
#define GPUSYSD_LISTEN_ADDR_H

#include <stddef.h>

/* Split spec into host (brackets of "[::1]:9464" removed) and port
 * (0..65535; 0: any free one). 0, or -EINVAL with why in err (without the
 * key's name: the caller says where). host may be NULL to only check. */
int listen_addr_parse(const char *spec, char *host, size_t hostlen, unsigned *port, char *err, size_t errlen);

/* Parse spec and open a listening TCP socket on it (non-blocking,
 * close-on-exec, SO_REUSEADDR). The socket, or -errno with why in err: the
 * parser's words, the resolver's, or the errno's own ("Address already in
 * use"), without the key's name, like listen_addr_parse. */
int listen_addr_open(const char *spec, char *err, size_t errlen);

#endif
