/* SPDX-License-Identifier: MIT */
/* Producer count decisions of the copy engine (copy_adapt.h). */
#include "copy_adapt.h"

void copy_adapt_init(struct copy_adapt *a, unsigned start, unsigned max)
{
	*a = (struct copy_adapt){
		.active = start ? start : 1,
		.ceiling = max > start ? max : start,
		.patience = COPY_ADAPT_PATIENCE,
	};
	if (a->ceiling < a->active)
		a->ceiling = a->active;
}

unsigned copy_adapt_window(struct copy_adapt *a, double starved, double gbps)
{
	if (a->trial) {
		a->trial = false;
		if (gbps < a->base_gbps * (1.0 + COPY_ADAPT_GAIN)) {
			/* It did not help, this time: the limit may be
			 * elsewhere. Try again, after twice the wait. */
			a->active--;
			a->removed++;
			a->starved_windows = 0;
			a->patience = a->patience * 2 < COPY_ADAPT_PATIENCE_MAX ? a->patience * 2 : COPY_ADAPT_PATIENCE_MAX;
			return a->active;
		}
		/* It helped: the window before was starved too, so one more
		 * starved window is evidence enough for the next. */
		a->patience = COPY_ADAPT_PATIENCE;
		a->starved_windows = COPY_ADAPT_PATIENCE - 1;
	}
	if (starved >= COPY_ADAPT_STARVED)
		a->starved_windows++;
	else
		a->starved_windows = 0;
	if (a->starved_windows >= a->patience && a->active < a->ceiling) {
		a->base_gbps = gbps;
		a->active++;
		a->added++;
		a->trial = true;
		a->starved_windows = 0;
	}
	return a->active;
}

void copy_adapt_job_end(struct copy_adapt *a)
{
	a->trial = false;
	a->starved_windows = 0;
}
