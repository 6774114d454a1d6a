/* SPDX-License-Identifier: MIT */
/*
 * libgpusys, the device side: the one header a .cu file includes for its
 * kernels (with gpusys/gpusys.h for the host side). Pass the handle from
 * gpusys_device() (or gpusys_heap_device() for the heap) to the kernel by
 * value. Every call is warp-aggregated and returns 0 or a negative errno.
 *
 *   gpusys/device.cuh    raw calls, futures, printf (print.cuh), the
 *                        program's host callbacks (callback.cuh)
 *   gpusys/file.cuh      POSIX files, block-wide bulk reads and writes
 *   gpusys/socket.cuh    BSD sockets and name resolution
 *   gpusys/alloc.cuh     malloc and free from the growable heap
 *
 * The protocol under them is gpusys/device/ (the client side, written once
 * for nvcc and the host-lane emulator); kernels need none of its names.
 */
#ifndef GPUSYS_GPUSYS_CUH
#define GPUSYS_GPUSYS_CUH

#include "gpusys/device.cuh"
#include "gpusys/file.cuh"
#include "gpusys/socket.cuh"
#include "gpusys/alloc.cuh"

#endif /* GPUSYS_GPUSYS_CUH */
