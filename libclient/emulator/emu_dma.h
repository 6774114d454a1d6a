/* SPDX-License-Identifier: MIT */
/*
 * An emulated handle's DMA agent (libclient/dma/), as the emulator starts
 * it for each handle (emulator.c): for the tests of the ring.
 */
#ifndef GPUSYS_EMU_DMA_H
#define GPUSYS_EMU_DMA_H

#include "libclient/dma/dma_agent.h"

struct gpusys_emu;

/* The agent of an emulated handle; NULL where GPUSYS_DMA=0 turned it off. */
const struct gpusys_dma_agent *gpusys_dma_agent_of_emu(const struct gpusys_emu *emu);

#endif /* GPUSYS_EMU_DMA_H */
