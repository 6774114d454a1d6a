/* SPDX-License-Identifier: MIT */
/*
 * libgpusys, the host side: the one header a program includes (with
 * gpusys/gpusys.cuh in its .cu files for the kernels' side). Every call
 * returns 0 or a negative errno; `man 3 libgpusys` is the reference.
 *
 *   gpusys/attach.h    attach to gpusysd for a GPU (or for emulated warps),
 *                      the handle kernels receive, synchronize, detach
 *   gpusys/callback.h  the program's own host functions, called from kernels
 *   gpusys/heap.h      the growable device heap kernels allocate from
 *   gpusys/copy.h      bulk copies between pageable and device memory
 *
 * The host-lane emulator (emulated warps calling from CPU threads) has its
 * own header, gpusys/emulator.h, not included here.
 */
#ifndef GPUSYS_GPUSYS_H
#define GPUSYS_GPUSYS_H

#include "gpusys/attach.h"
#include "gpusys/callback.h"
#include "gpusys/heap.h"
#include "gpusys/copy.h"

#endif /* GPUSYS_GPUSYS_H */
