/* SPDX-License-Identifier: MIT */
/*
 * The services gpusysd offers: the only place that lists them. Adding a
 * service is one module under services/ and one line here. The order is
 * the order of their hooks: client state is torn down in this order, so
 * print (before file) flushes a client's output before its files close.
 */
#include "core/service.h"
#include "services.h"
#include "services/basic/service_basic.h"
#include "services/file/service_file.h"
#include "services/print/service_print.h"
#include "services/alloc/service_alloc.h"
#include "services/socket/service_socket.h"

const struct service *const gpusysd_services[] = {
	&service_basic,
	&service_print,
	&service_file,
	&service_alloc,
	&service_socket,
	NULL,
};

const struct service_status gpusysd_service_status[] = {
	{ &service_alloc, service_alloc_status_json, service_alloc_client_json },
	{ NULL, NULL, NULL },
};
