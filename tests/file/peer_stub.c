/* SPDX-License-Identifier: MIT */
/* file_peer_get for port tables without a session (in-process tests): the
 * table's owner, if set, is the struct file_peer to use. */
#include <errno.h>

#include "services/file/file_peer.h"

int file_peer_get(struct port_table *t, struct file_peer *p)
{
	if (!t->owner)
		return -ENOTCONN;
	*p = *(const struct file_peer *)t->owner;
	return 0;
}
