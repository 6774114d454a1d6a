/* SPDX-License-Identifier: MIT */
/*
 * The services of reg.table[] as the core uses them: lookup by
 * opcode on every request, and the lifecycle hooks in a fixed order.
 *
 * Lookup is on every request, so it is a table built once: the group (the
 * opcode's high byte) picks a service, the low byte an operation. Ops are
 * given dense ids (op_id) in table order, for the per-opcode counters.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/service.h"

struct op_slot {
	uint16_t op_id1;  /* op_id + 1; 0: none */
	uint8_t service;
};

struct service_registry {
	const struct service *const *table;
	pthread_once_t once;
	uint32_t nops;
	const struct service_op *ops[SERVICE_OPS_MAX];
	struct op_slot by_opcode[256][256]; /* [group][low byte] */
	unsigned started;                   /* services whose start() ran */
};

static struct service_registry reg = { .once = PTHREAD_ONCE_INIT };

void services_use(const struct service *const *table)
{
	reg.table = table;
}

static void build(void)
{
	for (uint32_t s = 0; reg.table && s < SERVICES_MAX && reg.table[s]; s++) {
		const struct service *svc = reg.table[s];
		for (unsigned i = 0; i < svc->nops && reg.nops < SERVICE_OPS_MAX; i++) {
			const struct service_op *op = &svc->ops[i];
			/* An op outside its service's group would be a table
			 * bug; it is left unreachable rather than misrouted. */
			if (op->opcode >> 8 != svc->group)
				continue;
			struct op_slot *slot = &reg.by_opcode[svc->group][op->opcode & 0xff];
			if (slot->op_id1)
				continue; /* the first service claiming an opcode keeps it */
			reg.ops[reg.nops] = op;
			slot->op_id1 = (uint16_t)(reg.nops + 1);
			slot->service = (uint8_t)s;
			reg.nops++;
		}
	}
}

static inline void ensure_built(void)
{
	pthread_once(&reg.once, build);
}

bool service_lookup(uint16_t opcode, struct service_lookup *ret)
{
	ensure_built();
	const struct op_slot *slot = &reg.by_opcode[opcode >> 8][opcode & 0xff];
	if (!slot->op_id1)
		return false;
	ret->op_id = slot->op_id1 - 1u;
	ret->op = reg.ops[ret->op_id];
	ret->service = slot->service;
	return true;
}

int service_index(const struct service *svc)
{
	for (unsigned s = 0; reg.table && s < SERVICES_MAX && reg.table[s]; s++)
		if (reg.table[s] == svc)
			return (int)s;
	return -1;
}

uint32_t service_op_count(void)
{
	ensure_built();
	return reg.nops;
}

const struct service_op *service_op_by_id(uint32_t op_id)
{
	ensure_built();
	return op_id < reg.nops ? reg.ops[op_id] : NULL;
}

int services_add_settings(struct gpusysd_config *cfg)
{
	for (unsigned s = 0; reg.table && s < SERVICES_MAX && reg.table[s]; s++) {
		int r = config_add_keys(cfg, reg.table[s]->settings);
		if (r < 0)
			return r;
	}
	return 0;
}

static unsigned count(void)
{
	unsigned n = 0;
	while (reg.table && n < SERVICES_MAX && reg.table[n])
		n++;
	return n;
}

int services_start(const struct service_env *env, char *err, size_t errlen)
{
	ensure_built();
	unsigned n = count();
	for (reg.started = 0; reg.started < n; reg.started++) {
		const struct service *svc = reg.table[reg.started];
		int r = svc->start ? svc->start(env) : 0;
		if (r < 0) {
			snprintf(err, errlen, "service %s: cannot start: %s", svc->name, strerror(-r));
			services_stop();
			return r;
		}
	}
	return 0;
}

void services_stop(void)
{
	while (reg.started > 0) {
		const struct service *svc = reg.table[--reg.started];
		if (svc->stop)
			svc->stop();
	}
}

int services_client_init(const struct client *c, void *states[SERVICES_MAX])
{
	unsigned n = count();
	memset(states, 0, SERVICES_MAX * sizeof(states[0]));
	for (unsigned s = 0; s < n; s++) {
		const struct service *svc = reg.table[s];
		int r = svc->client_init ? svc->client_init(c, &states[s]) : 0;
		if (r < 0) {
			/* Undo in table order too: the same order as always. */
			for (unsigned k = 0; k < s; k++)
				if (reg.table[k]->client_fini)
					reg.table[k]->client_fini(c, states[k]);
			memset(states, 0, SERVICES_MAX * sizeof(states[0]));
			return r;
		}
	}
	return 0;
}

void services_client_transfers(void *const states[SERVICES_MAX], uint64_t since_ns,
			       void (*emit)(void *arg, const struct service_transfer *t), void *arg)
{
	unsigned n = count();
	for (unsigned s = 0; s < n; s++)
		if (reg.table[s]->client_transfers && states[s])
			reg.table[s]->client_transfers(states[s], since_ns, emit, arg);
}

void services_errors(void (*emit)(void *arg, uint16_t opcode, int err, uint64_t count), void *arg)
{
	unsigned n = count();
	for (unsigned s = 0; s < n; s++)
		if (reg.table[s]->errors)
			reg.table[s]->errors(emit, arg);
}

void services_client_fini(const struct client *c, void *states[SERVICES_MAX])
{
	unsigned n = count();
	for (unsigned s = 0; s < n; s++) {
		if (reg.table[s]->client_fini)
			reg.table[s]->client_fini(c, states[s]);
		states[s] = NULL;
	}
}
