/* SPDX-License-Identifier: MIT */
/*
 * The control protocol's request parsing (daemon/control/control.c): the
 * input is cut into lines as the daemon cuts them, and each line gets
 * exactly one reply, a JSON object, whatever it holds. The command handler
 * is a stub that knows "status" and checks what it is handed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control/control.h"
#include "fuzz.h"

static unsigned status_calls;

static int handler_stub(void *arg, const struct control_peer *who, const char *cmd, json_t *req, json_t **reply)
{
	(void)arg;
	if (!who || who->uid != 1000 || !cmd || !json_is_object(req) ||
	    strcmp(json_string_value(json_object_get(req, "cmd")), cmd))
		abort();
	if (strcmp(cmd, "status"))
		return -ENOENT;
	status_calls++;
	*reply = json_pack("{s:s, s:[]}", "version", "fuzz", "clients");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct control_peer who = { .pid = 1, .uid = 1000, .gid = 1000, .admin = false };
	const char *p = (const char *)data, *end = p + size;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (len && p[len - 1] == '\r')
			len--; /* EVBUFFER_EOL_CRLF */
		if (len > 0 && len <= CONTROL_MAX_LINE) {
			unsigned before = status_calls;
			json_t *reply = control_handle_line(p, len, &who, handler_stub, NULL);
			if (!json_is_object(reply))
				abort();
			/* Either an error or the status, never both or none. */
			int is_error = json_is_string(json_object_get(reply, "error"));
			if (is_error == (status_calls != before))
				abort();
			char *text = json_dumps(reply, JSON_COMPACT);
			if (!text || strchr(text, '\n'))
				abort(); /* a reply is one line */
			free(text);
			json_decref(reply);
		}
		p += (nl ? (size_t)(nl - p) + 1 : len);
		if (!nl)
			break;
	}
	return 0;
}
