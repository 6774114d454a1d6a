/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpus.h"
#include "util/log.h"
#include "../common/cuda_driver.h"

/* Filled on the main thread (hello) but read by status and by wake threads;
 * entries are appended under the lock and never change their identity, so
 * readers of an entry they already hold need no lock. */
static struct gpu_table {
	pthread_mutex_t lock;
	unsigned count;
	bool enumerated; /* the driver's GPUs were looked for (found or not) */
	int enum_err;    /* why not, when none could be */
	char enum_msg[160];
	struct gpu gpu[GPUS_MAX];
} gpu_table = { .lock = PTHREAD_MUTEX_INITIALIZER };

void gpu_uuid_format(const uint8_t u[16], char out[GPU_UUID_TEXT])
{
	snprintf(out, GPU_UUID_TEXT,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
		 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

int gpu_uuid_parse(const char *text, uint8_t out[16])
{
	uint8_t u[16];
	unsigned n = 0;

	if (!strncasecmp(text, "GPU-", 4))
		text += 4;
	for (const char *p = text; *p; p++) {
		if (*p == '-')
			continue;
		if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]) || n == 16)
			return -EINVAL;
		char hex[3] = { p[0], p[1], 0 };
		u[n++] = (uint8_t)strtoul(hex, NULL, 16);
		p++;
	}
	if (n != 16)
		return -EINVAL;
	memcpy(out, u, 16);
	return 0;
}

bool gpu_uuid_is_zero(const uint8_t u[16])
{
	for (unsigned i = 0; i < 16; i++)
		if (u[i])
			return false;
	return true;
}

static struct gpu *find_locked(const uint8_t uuid[16])
{
	for (unsigned i = 0; i < gpu_table.count; i++)
		if (!memcmp(gpu_table.gpu[i].uuid, uuid, 16))
			return &gpu_table.gpu[i];
	return NULL;
}

/* A new entry, or NULL when the table is full. Under the lock. */
static struct gpu *append_locked(const uint8_t uuid[16])
{
	if (gpu_table.count == GPUS_MAX)
		return NULL;
	struct gpu *g = &gpu_table.gpu[gpu_table.count];
	memset(g, 0, sizeof(*g));
	g->index = gpu_table.count;
	memcpy(g->uuid, uuid, 16);
	gpu_uuid_format(uuid, g->uuid_text);
	g->ordinal = -1;
	g->numa_node = -1;
	gpu_table.count++;
	return g;
}

/* The emulated_gpus list, parsed: UUIDs, none twice, at most GPUS_MAX,
 * and their names. Touches no table, so the config parser can check it
 * (and give the FILE:LINE) before anything starts. */
struct emulated_list {
	unsigned n;
	uint8_t uuid[GPUS_MAX][16];
	char name[GPUS_MAX][96];
};

static int parse_emulated(const char *list, struct emulated_list *out, char *err, size_t errlen)
{
	char buf[1024];

	out->n = 0;
	if (!list || !*list || !strcmp(list, "none"))
		return 0;
	if (strlen(list) >= sizeof(buf)) {
		snprintf(err, errlen, "emulated_gpus: longer than %zu bytes", sizeof(buf) - 1);
		return -EINVAL;
	}
	strcpy(buf, list);
	char *save = NULL;
	for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*item))
			item++;
		char *name = strchr(item, '=');
		if (name)
			*name++ = 0;
		for (char *e = item + strlen(item); e > item && isspace((unsigned char)e[-1]);)
			*--e = 0;
		uint8_t uuid[16];
		if (gpu_uuid_parse(item, uuid) < 0 || gpu_uuid_is_zero(uuid)) {
			snprintf(err, errlen, "emulated_gpus: '%s' is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
				 item);
			return -EINVAL;
		}
		for (unsigned i = 0; i < out->n; i++) {
			if (!memcmp(out->uuid[i], uuid, 16)) {
				snprintf(err, errlen, "emulated_gpus: %s given twice", item);
				return -EINVAL;
			}
		}
		if (out->n == GPUS_MAX) {
			snprintf(err, errlen, "emulated_gpus: more than %d GPUs", GPUS_MAX);
			return -EINVAL;
		}
		memcpy(out->uuid[out->n], uuid, 16);
		snprintf(out->name[out->n], sizeof(out->name[0]), "%s", name && *name ? name : "emulated GPU");
		out->n++;
	}
	return 0;
}

int gpus_check_emulated(const char *list, char *err, size_t errlen)
{
	struct emulated_list *l = malloc(sizeof(*l));
	if (!l) {
		snprintf(err, errlen, "emulated_gpus: out of memory");
		return -ENOMEM;
	}
	int r = parse_emulated(list, l, err, errlen);
	free(l);
	return r;
}

int gpus_add_emulated(const char *list, char *err, size_t errlen)
{
	struct emulated_list *l = malloc(sizeof(*l));
	int rc;

	if (!l) {
		snprintf(err, errlen, "emulated_gpus: out of memory");
		return -ENOMEM;
	}
	rc = parse_emulated(list, l, err, errlen);
	pthread_mutex_lock(&gpu_table.lock);
	for (unsigned i = 0; rc == 0 && i < l->n; i++) {
		char text[GPU_UUID_TEXT];
		gpu_uuid_format(l->uuid[i], text);
		if (find_locked(l->uuid[i])) {
			snprintf(err, errlen, "emulated_gpus: %s given twice", text);
			rc = -EINVAL;
			break;
		}
		struct gpu *g = append_locked(l->uuid[i]);
		if (!g) {
			snprintf(err, errlen, "emulated_gpus: more than %d GPUs", GPUS_MAX);
			rc = -EINVAL;
			break;
		}
		snprintf(g->name, sizeof(g->name), "%s", l->name[i]);
	}
	pthread_mutex_unlock(&gpu_table.lock);
	free(l);
	return rc;
}

/* The host NUMA node of a PCI device ("0000:3B:00.0"), from sysfs; -1 when
 * the host has one node or does not say. */
static int pci_numa_node(const char *bus_id)
{
	char path[96], lower[24];
	size_t i;

	for (i = 0; bus_id[i] && i + 1 < sizeof(lower); i++)
		lower[i] = (char)tolower((unsigned char)bus_id[i]);
	lower[i] = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", lower);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	int node = -1;
	if (fscanf(f, "%d", &node) != 1)
		node = -1;
	fclose(f);
	return node;
}

#if GPUSYS_HAVE_CUDA_H
/* Add every GPU the driver shows this process. Under the lock, once. */
static void enumerate_locked(void)
{
	const struct gpusys_cuda *cu;
	int n = 0;
	CUresult r;

	gpu_table.enumerated = true;
	if (gpusys_cuda_load(&cu) < 0) {
		gpu_table.enum_err = -ENODEV;
		snprintf(gpu_table.enum_msg, sizeof(gpu_table.enum_msg), "gpusysd cannot use CUDA: %s",
			 gpusys_cuda_load_error());
		return;
	}
	if ((r = cu->cuInit(0)) != CUDA_SUCCESS || (r = cu->cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
		char why[128];
		gpu_table.enum_err = gpusys_cuda_errno(r);
		snprintf(gpu_table.enum_msg, sizeof(gpu_table.enum_msg), "gpusysd cannot use CUDA: %s",
			 gpusys_cuda_describe(cu, r, "cuInit", why, sizeof(why)));
		return;
	}
	for (int i = 0; i < n; i++) {
		CUdevice dev;
		CUuuid id;
		if (cu->cuDeviceGet(&dev, i) != CUDA_SUCCESS || cu->cuDeviceGetUuid(&id, dev) != CUDA_SUCCESS)
			continue;
		const uint8_t *uuid = (const uint8_t *)id.bytes;
		if (find_locked(uuid)) /* an emulated entry with a real UUID: the real one wins */
			continue;
		struct gpu *g = append_locked(uuid);
		if (!g)
			break;
		g->ordinal = i;
		if (cu->cuDeviceGetName(g->name, (int)sizeof(g->name), dev) != CUDA_SUCCESS)
			snprintf(g->name, sizeof(g->name), "GPU %d", i);
		if (cu->cuDeviceGetPCIBusId(g->pci_bus_id, (int)sizeof(g->pci_bus_id), dev) == CUDA_SUCCESS)
			g->numa_node = pci_numa_node(g->pci_bus_id);
		log_info("gpu %u: %s, %s, %s, CUDA ordinal %d here, NUMA node %d", g->index, g->uuid_text, g->name,
			 g->pci_bus_id, i, g->numa_node);
	}
	if (n == 0) {
		gpu_table.enum_err = -ENODEV;
		snprintf(gpu_table.enum_msg, sizeof(gpu_table.enum_msg), "the CUDA driver shows gpusysd no GPU");
	}
}
#else
static void enumerate_locked(void)
{
	gpu_table.enumerated = true;
	gpu_table.enum_err = -ENODEV;
	snprintf(gpu_table.enum_msg, sizeof(gpu_table.enum_msg), "gpusysd was built without CUDA");
}
#endif

struct gpu *gpus_find(const uint8_t uuid[16], char *msg, size_t msglen)
{
	pthread_mutex_lock(&gpu_table.lock);
	struct gpu *g = find_locked(uuid);
	if (!g && !gpu_table.enumerated) {
		enumerate_locked();
		g = find_locked(uuid);
	}
	if (!g) {
		char text[GPU_UUID_TEXT];
		size_t used;
		gpu_uuid_format(uuid, text);
		used = (size_t)snprintf(msg, msglen, "%s is not a GPU this daemon has", text);
		for (unsigned i = 0; i < gpu_table.count && used < msglen; i++)
			used += (size_t)snprintf(msg + used, msglen - used, "%s %s", i ? "," : " (it has",
						 gpu_table.gpu[i].uuid_text);
		if (gpu_table.enum_err && used < msglen)
			used += (size_t)snprintf(msg + used, msglen - used, "%s%s", gpu_table.count ? "; " : " (",
						 gpu_table.enum_msg);
		if ((gpu_table.count || gpu_table.enum_err) && used < msglen)
			snprintf(msg + used, msglen - used, ")");
	}
	pthread_mutex_unlock(&gpu_table.lock);
	return g;
}

unsigned gpus_count(void)
{
	pthread_mutex_lock(&gpu_table.lock);
	unsigned n = gpu_table.count;
	pthread_mutex_unlock(&gpu_table.lock);
	return n;
}

struct gpu *gpus_at(unsigned i)
{
	return i < gpus_count() ? &gpu_table.gpu[i] : NULL;
}

unsigned gpus_real_count(void)
{
	unsigned n = 0;
	pthread_mutex_lock(&gpu_table.lock);
	for (unsigned i = 0; i < gpu_table.count; i++)
		n += gpu_table.gpu[i].ordinal >= 0;
	pthread_mutex_unlock(&gpu_table.lock);
	return n;
}

struct gpu *gpus_lookup_text(const char *uuid_text)
{
	uint8_t uuid[16];
	if (gpu_uuid_parse(uuid_text, uuid) < 0)
		return NULL;
	pthread_mutex_lock(&gpu_table.lock);
	struct gpu *g = find_locked(uuid);
	pthread_mutex_unlock(&gpu_table.lock);
	return g;
}
