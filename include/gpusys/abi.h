/* SPDX-License-Identifier: MIT */
/*
 * gpusys channel ABI: the layout of the shared memory between one client
 * process (its GPU kernels, or the host-lane emulator) and gpusysd.
 *
 * This one header is included by the daemon, the client library, the device
 * code (nvcc) and the emulator. Everything in it is plain C11 that nvcc also
 * accepts. Changing any layout below means bumping GPUSYS_ABI_VERSION.
 *
 * The channel, in order (offsets are in the header, all page aligned):
 *
 *   header       struct gpusys_channel_header, GPUSYS_HEADER_BYTES. Written by
 *                the daemon before the memory is shared, read-only afterwards,
 *                except for the words whose comment names another writer.
 *   client_word  uint64_t[num_ports]  written by the client only
 *   server_word  uint64_t[num_ports]  written by the daemon only
 *   ports        struct gpusys_port[num_ports]
 *   windows      GPUSYS_WINDOW_BYTES for each of the last num_windows ports
 *                (gpusys_num_windows): their stream packets
 *   bulk         bulk_bytes of data area (large transfers; file I/O)
 *
 * Ownership of a port (after LLVM libc's GPU RPC): the client owns port p
 * when the sequence fields of client_word[p] and server_word[p] are equal,
 * the daemon owns it when they differ. Each side only ever writes its own
 * word, with one 64-bit store, so every shared word has exactly one writer:
 * GPU atomics on host memory are not atomic with respect to the CPU on the
 * machines we target (CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED = 0).
 *
 * The words carry more than the sequence: the client word holds the opcode,
 * the lane mask and flags of the request, the server word the request's
 * status. A request with no payload (NOOP, and any call whose lanes send and
 * expect nothing) is then one word each way: on a GPU every further line read
 * across PCIe costs about a microsecond.
 *
 * A message (request or response) is one or more packets:
 *   packet 0   the words, per-lane len[] and aux[] (unless the word's EMPTY /
 *              TRIVIAL flag says they are all zero), and each active lane's
 *              first GPUSYS_INLINE_BYTES bytes, in 16-byte chunks laid out
 *              chunk by chunk (gpusys_inline_at): chunk k of lane l at
 *              data[512 k + 16 l]. A warp's 16-byte store or load of chunk k
 *              is then one contiguous run, not 32 pieces 64 bytes apart
 *              (bench/RESULTS.md: "Packet 0 as a warp (issue 27)").
 *   stream packets (streaming) raw bytes of the "stream": the
 *              concatenation, in lane order, of every active lane's bytes
 *              beyond its first GPUSYS_INLINE_BYTES. Both sides derive the
 *              stream layout from the lens in packet 0. A port's stream
 *              area is its data[] (GPUSYS_PACKET_BYTES), or, for the last
 *              num_windows ports, the port's window (GPUSYS_WINDOW_BYTES):
 *              32 times fewer exchanges for a large message. The port
 *              alone decides which (gpusys_port_stream), so both sides
 *              agree without a word about it; the client takes a window
 *              port for a message whose stream is large. The area is two
 *              slots of half its size (GPUSYS_STREAM_SLOTS): stream packet
 *              k (k = 0, 1, ...) carries stream bytes [k S, (k + 1) S) of
 *              the slot size S, in slot k % 2 (gpusys_stream_slot).
 * Client -> daemon: the client writes a packet and bumps the sequence in its
 * word; the daemon consumes it and acknowledges by writing its sequence in
 * its word, for the last request packet after having written response
 * packet 0 (the port is the client's again when the two are equal).
 * Two stream packets are in flight each way (ABI 10; docs/ARCHITECTURE.md,
 * step 3): the client writes and publishes stream packet k + 1 into the
 * other slot while the daemon copies packet k, and waits, before writing
 * packet k + 2 into slot k % 2, for the daemon's acknowledgement of packet
 * k. So the client word runs at most 2 ahead of the server word. Through a
 * window, stream packet 0 may follow packet 0 without waiting (packet 0 is
 * in the port, not the window); through data[], which packet 0 fills, it
 * waits for packet 0's acknowledgement. For a streamed response the client
 * bumps its sequence to ask for each further packet (by 2 for the first
 * two at once) and asks for packet k + 2 only once it has read packet k,
 * whose slot that frees; the daemon writes each packet asked for and
 * acknowledges it at once, so it copies packet k + 2 in while the client
 * reads packet k + 1. The daemon acknowledges packet by packet, so the
 * server word may be one past the packet a client waits for: a stream wait
 * asks for "at or past", modulo GPUSYS_SEQ_MASK + 1 (gpusys_wait_acked).
 * The daemon takes a client word that moved by 1 or 2 past the last packet
 * it took, packet by packet; any other jump, or one past the message's
 * packets, is malformed input (common/port_host.h port_host_flip_packets).
 * A response stream that fits a window's two slots is not asked for (ABI
 * 13): the daemon writes it with packet 0, before the word, and says so
 * (GPUSYS_SW_STREAMED); the port is the client's from that word on, and a
 * call whose message and answer each fit a window's slots is one exchange.
 * When the client has read the last response packet it owns the port and
 * releases its (private) port lock.
 *
 * Fire-and-forget (GPUSYS_REQ_NOREPLY): the client publishes the last request
 * packet and releases the port lock without waiting. The daemon acknowledges
 * once it has served the request; the next user of the port waits for that
 * acknowledgement before writing (ownership rule above).
 *
 * The daemon treats all of this memory as hostile: it reads the client word
 * once, copies a packet out before looking at it, keeps its own copy of its
 * sequence, and bounds every length (see daemon/core/port_server.c).
 */
#ifndef GPUSYS_ABI_H
#define GPUSYS_ABI_H

#include <stdint.h>

/* Helpers below are used by host and device code alike. */
#ifdef __CUDACC__
#define GPUSYS_ABI_FN static inline __host__ __device__
#else
#define GPUSYS_ABI_FN static inline
#endif

#ifdef __cplusplus
#define GPUSYS_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define GPUSYS_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define GPUSYS_CHANNEL_MAGIC UINT32_C(0x53595347) /* "GSYS" little endian */
/* 5: GPUSYS_SERVER_HANDOVER, GPUSYS_SW_ABORT, header.handle_gen_floor
 * (daemon restart, docs/RESTART.md).
 * 6: stream windows (the last ports stream through 64 KiB windows, not
 * their 2 KiB packets); header.window_offset, num_windows, window_bytes.
 * 7: packet 0's inline bytes in 16-byte chunks, chunk by chunk
 * (gpusys_inline_at), not a 64-byte slot per lane.
 * 8: heads (GPUSYS_CW_HEADS): a call of at most GPUSYS_HEAD_BYTES a lane
 * each way moves in self-checking 16-byte heads, without a release fence
 * before the client word or a read of the server word before the answer.
 * 9: GPUSYS_STATUS_NO_ROOM (a file or socket call sent again rather than
 * failed -ENOMEM while the client's budget holds other calls' answers).
 * 10: two stream packets in flight each way: a port's stream area is two
 * slots of half its size (1 KiB in data[], 64 KiB in a window: windows
 * grew to 128 KiB, so a window packet stays 64 KiB), packet k in slot k % 2;
 * the client word may run 2 packets ahead of the server word, and a
 * response's first two packets are asked for with one word.
 * 11: a print record's header is 2 bytes (3 for a format over 255 bytes),
 * not 4 (include/gpusys/print.h).
 * 12: heap words: the alloc service's grant, mapped and want figures carry
 * a shrink epoch above bit 40; a FREE of a pool chunk with
 * GPUSYS_ALLOC_F_SHRINKS is answered with the grant (include/gpusys/alloc.h).
 * 13: GPUSYS_SW_STREAMED: a response stream that fits a window's two slots
 * is written with packet 0, not asked for (one exchange a call, not two). */
#define GPUSYS_ABI_VERSION 13u


#define GPUSYS_WARP_LANES 32u     /* lanes per packet (one NVIDIA warp) */
#define GPUSYS_SLOT_BYTES 64u     /* one lane's share of a packet */
#define GPUSYS_PACKET_BYTES (GPUSYS_WARP_LANES * GPUSYS_SLOT_BYTES) /* 2 KiB */
#define GPUSYS_INLINE_BYTES GPUSYS_SLOT_BYTES /* payload bytes of a lane in packet 0 */
#define GPUSYS_CHUNK_BYTES 16u /* packet 0's inline bytes move in chunks of this size */
#define GPUSYS_INLINE_CHUNKS (GPUSYS_INLINE_BYTES / GPUSYS_CHUNK_BYTES)
#define GPUSYS_MAX_LANE_PAYLOAD (UINT32_C(1) << 20) /* per lane, per direction */
#define GPUSYS_MAX_PORTS 16384u
#define GPUSYS_MIN_PORTS 1u
#define GPUSYS_PROGRESS_SLOTS 64u /* daemon threads that may complete requests */
#define GPUSYS_PAGE_BYTES 4096u
/* Stream windows: the last gpusys_num_windows(num_ports) ports stream
 * through a window of this many bytes each (two 64 KiB slots: with 32 KiB
 * ones a 32 x 64 KiB call spent more in its per-packet work than the
 * second slot saved, bench/RESULTS.md "Fifth session"). At most
 * GPUSYS_MAX_WINDOWS (8 MiB a channel), and never more than a quarter of
 * the ports: the windows are among the last quarter, of which futures hold
 * only the first half of the windows, and only by trying
 * (device/port_client.h), so a warp that waits for a window port always
 * has some that only calls which finish hold. */
#define GPUSYS_WINDOW_BYTES (128u * 1024u)
#define GPUSYS_MAX_WINDOWS 64u
#define GPUSYS_HEADER_BYTES 8192u /* struct gpusys_channel_header, padded */

/* Opcodes: 16 bits. 0..32767 belong to gpusysd, 32768..65535 to user
 * callbacks registered by the client (a later issue). 0 is never valid. */
enum gpusys_opcode {
	GPUSYS_OP_INVALID = 0,
	GPUSYS_OP_NOOP = 1, /* no payload; status 0 */
	GPUSYS_OP_ECHO = 2, /* payload returned unchanged */
	/* Completes after a delay, without holding a daemon thread meanwhile
	 * (a test of calls that complete later): each lane sends a struct
	 * gpusys_sleep_req (or nothing: no delay); the call completes after
	 * the longest lane's delay, or fails -ETIMEDOUT at the shortest
	 * non-zero timeout. */
	GPUSYS_OP_SLEEP = 3,

	/* Print service: 0x0100.. (include/gpusys/print.h) */
	GPUSYS_OP_PRINT = 0x0100,       /* one line per lane; status = bytes printed */
	GPUSYS_OP_PRINT_FLUSH = 0x0101, /* wait until accepted lines are written */

	/* File service: 0x0200.. */
	GPUSYS_OP_FILE_FIRST = 0x0200,
	GPUSYS_OP_FILE_LAST = 0x02ff,

	GPUSYS_OP_SYSTEM_LAST = 0x7fff,
	GPUSYS_OP_USER_FIRST = 0x8000,
};

struct gpusys_sleep_req {
	uint64_t delay_ns;
	uint64_t timeout_ns; /* 0: the daemon's call_timeout_ms */
};

/* Request flags a caller may pass. */
enum gpusys_req_flags {
	GPUSYS_REQ_NOREPLY = 1u << 0, /* fire-and-forget: no response packet */
	/* The client's alone (never on the wire): take a plain port even when
	 * the capacities would take a window port. For calls that may wait
	 * long with a large capacity (a poll asking for bytes): a window
	 * port is one of few, and the other warps' large calls would queue
	 * behind the wait. A large answer then streams through the plain
	 * port's smaller packets. */
	GPUSYS_REQ_NO_WINDOW = 1u << 1,
	GPUSYS_REQ_KNOWN_FLAGS = GPUSYS_REQ_NOREPLY | GPUSYS_REQ_NO_WINDOW,
};

/*
 * The client word (client_word[p]): one 64-bit store per packet.
 *   bits  0..11  sequence (counts packets, modulo 4096)
 *   bits 12..15  GPUSYS_CW_* flags; unknown ones are rejected
 *   bits 16..31  opcode
 *   bits 32..63  lane mask (lane i = bit 32 + i)
 * Opcode, flags and mask are those of the message; stream packets repeat them.
 */
#define GPUSYS_SEQ_MASK 0xfffu
#define GPUSYS_CW_NOREPLY (1u << 12) /* GPUSYS_REQ_NOREPLY */
#define GPUSYS_CW_EMPTY (1u << 13)   /* every lane: len 0, cap 0; len[]/aux[] not written */
#define GPUSYS_CW_HEADS (1u << 14)   /* packet 0 and its answer are heads (gpusys_head) */
#define GPUSYS_CW_KNOWN (GPUSYS_CW_NOREPLY | GPUSYS_CW_EMPTY | GPUSYS_CW_HEADS)

/*
 * The server word (server_word[p]): one 64-bit store per acknowledgement.
 *   bits  0..11  sequence: equal to the client's when the port is the client's
 *   bits 12..15  GPUSYS_SW_* flags
 *   bits 32..63  request status (int32_t: 0 or -errno), for packet 0 of a
 *                response
 */
#define GPUSYS_SW_TRIVIAL (1u << 12) /* every lane: len 0, status 0; len[]/aux[] not written */
/* The daemon was stopping for a restart and refused this packet of a request
 * stream without running the request: the status is -ECONNABORTED and the
 * port is the client's again (docs/RESTART.md). Only ever written at the
 * sequence of a packet the client published, so both words agree. */
#define GPUSYS_SW_ABORT (1u << 13)
/* The response's whole stream is already in the port's window, written
 * before packet 0's word (gpusys_stream_with_answer): the client reads it
 * without asking for packets, and the port is its own from this word on
 * (ABI 13). Only in packet 0's word of a response; never for a port whose
 * stream area is data[] (packet 0 fills it). */
#define GPUSYS_SW_STREAMED (1u << 14)

GPUSYS_ABI_FN uint64_t gpusys_client_word(uint32_t seq, uint32_t cw_flags, uint32_t opcode, uint64_t mask)
{
	return (uint64_t)(seq & GPUSYS_SEQ_MASK) | (uint64_t)(cw_flags & 0xf000u) | ((uint64_t)(opcode & 0xffffu) << 16) |
	       (mask << 32);
}

GPUSYS_ABI_FN uint64_t gpusys_server_word(uint32_t seq, uint32_t sw_flags, int32_t status)
{
	return (uint64_t)(seq & GPUSYS_SEQ_MASK) | (uint64_t)(sw_flags & 0xf000u) | ((uint64_t)(uint32_t)status << 32);
}

#define GPUSYS_WORD_SEQ(w) ((uint32_t)(w) & GPUSYS_SEQ_MASK)
#define GPUSYS_WORD_FLAGS(w) ((uint32_t)(w) & 0xf000u)
#define GPUSYS_CW_OPCODE(w) ((uint16_t)((w) >> 16))
#define GPUSYS_CW_MASK(w) ((uint32_t)((w) >> 32))
#define GPUSYS_SW_STATUS(w) ((int32_t)(uint32_t)((w) >> 32))

/* Status codes. Per-lane and per-request statuses are 0 or a negative Linux
 * errno value (both ends of a channel are Linux processes on one host), so
 * file calls can report exactly what POSIX gave. gpusys_strerror() in the
 * client library names them. The protocol itself uses these: */
/*   -ENOSYS     unknown or unsupported opcode                               */
/*   -EINVAL     malformed request (bad mask, unknown flag)                  */
/*   -E2BIG      a lane payload exceeds GPUSYS_MAX_LANE_PAYLOAD              */
/*   -EMSGSIZE   the response does not fit the capacity the lane gave        */
/*   -ENOMEM     the daemon's per-client memory budget is exhausted          */
/*   -ESHUTDOWN  the daemon is stopping or has gone (client side)            */
/*   -ECONNABORTED  a restarting daemon refused the request: it did not run  */
/* and one status that is no errno (errnos stop at 4095): */
/*   GPUSYS_STATUS_NO_ROOM  the call's answers would fit the client's budget
 *   (client_mem_budget) but not while it holds other calls' answers that
 *   their warps have not taken yet; nothing ran. The device side sends the
 *   call again after a pause (device/port_client.h: gpusys_no_room_again
 *   for file_client.h and sock_client.h, gpusys_no_room_pause for
 *   bulk_client.h's one-lane requests), for up to
 *   GPUSYS_NO_ROOM_WAIT_NS, then returns -ENOMEM: a program never sees it.
 *   The file and socket services answer so. */
#define GPUSYS_STATUS_NO_ROOM (-4096)
#define GPUSYS_NO_ROOM_WAIT_NS UINT64_C(10000000000) /* 10 s */

/* Daemon state word (header.server_state). */
enum gpusys_server_state {
	GPUSYS_SERVER_STARTING = 0,
	GPUSYS_SERVER_RUNNING = 1,
	GPUSYS_SERVER_STOPPED = 2, /* channel is dead: no request will be served */
	/* The daemon is restarting and drained this channel: every port is
	 * the client's or holds a request packet 0 nobody has read. libgpusys
	 * re-offers the channel to the next daemon (docs/RESTART.md); warps
	 * keep waiting meanwhile. */
	GPUSYS_SERVER_HANDOVER = 3,
};

/* How long a device handle keeps the daemon's fast wake-up without another
 * gpusys_device() call (header.active_until_ns). */
#define GPUSYS_ACTIVE_HOLD_NS (UINT64_C(30) * 1000000000u)

/* Client-host state word (header.client_host_state): written by libgpusys in
 * the client process, read by device code, so kernels stop spinning when the
 * host side saw the daemon go away (it cannot write server_state then). */
enum gpusys_client_host_state {
	GPUSYS_CLIENT_HOST_OK = 0,
	GPUSYS_CLIENT_HOST_ABORT = 1,
};

struct gpusys_channel_header {
	/* line 0: layout, written once by the daemon */
	uint32_t magic;
	uint32_t abi_version;
	uint32_t num_ports;
	uint32_t header_bytes;
	uint64_t total_bytes;
	uint64_t client_word_offset;
	uint64_t server_word_offset;
	uint64_t ports_offset;
	uint64_t bulk_offset;
	uint64_t bulk_bytes;
	/* line 1: layout, continued */
	uint64_t window_offset __attribute__((aligned(64)));
	uint32_t num_windows;
	uint32_t window_bytes;

	/* line 2: written by the daemon only */
	volatile uint32_t server_state __attribute__((aligned(64)));
	uint32_t client_id;
	/* 1 while the daemon sleeps without a timer and waits to be woken
	 * (daemon/core/poller.c). A host client (the emulator) that has just rung
	 * the doorbell then writes a byte to the wake descriptor it got with
	 * the welcome (wire.h). Order, on both sides (Dekker): the client
	 * stores the doorbell, full fence, loads dozing; the daemon stores
	 * dozing, full fence, loads the doorbells: at least one of them sees
	 * the other's store, so a request is never left unseen. GPU code never
	 * reads it (it cannot make a system call): the daemon watches a CUDA
	 * client's doorbell with a stream memory operation instead. */
	volatile uint32_t dozing;
	/* The lowest handle generation this daemon has not handed out on this
	 * channel (daemon/core/handles.c): a daemon that adopts the
	 * channel after a restart starts its handles there, so a handle of the
	 * old daemon fails -EBADF instead of naming a new file. Only a hint
	 * the client could spoil for itself. */
	volatile uint32_t handle_gen_floor;

	/* line 3: written by the client host library only */
	volatile uint32_t client_host_state __attribute__((aligned(64)));
	uint32_t reserved_line2;
	/* Until when (CLOCK_MONOTONIC, ns) the client may have kernels in flight
	 * that call gpusysd: libgpusys sets it when it hands out a device handle
	 * for a launch and clears it when gpusys_synchronize has seen every
	 * request done. While it is in the future the daemon does not sleep
	 * deeply (a GPU cannot wake it quickly: a CUDA stream wait takes
	 * ~0.2-0.4 ms to notice a store) but naps, so a kernel that calls after
	 * a long quiet is served within ~0.1 ms. Only a hint: a wrong value
	 * costs CPU time or wake-up latency, never a lost request. */
	volatile uint64_t active_until_ns;

	/* line 4: written by the client only: its device code (or emulator),
	 * and its host library when it wakes a sleeping daemon (bit 62).
	 * Every packet stores a fresh value here (GPUSYS_RING_* below: a
	 * request's first packet a growing stamp and its port, a stream
	 * packet its port and sequence); the daemon's idle poll reads this one
	 * word instead of scanning every port. Plain stores from many warps
	 * are fine: any write after the daemon's last read makes the word
	 * differ from what it saw. */
	volatile uint64_t doorbell __attribute__((aligned(64)));

	/* lines 5..: requests completed, one word per daemon thread (single
	 * writer each). Their sum is the progress value: when it reaches the
	 * number of requests a client submitted, all of them are done. */
	struct {
		volatile uint64_t completed;
		uint8_t pad_[56];
	} progress[GPUSYS_PROGRESS_SLOTS] __attribute__((aligned(64)));
};

/*
 * Doorbell values (header.doorbell), by their top bits:
 *   bit 63 set   a stream packet: GPUSYS_RING_STREAM | port << 32 | sequence
 *   bit 62 set   the client's host library waking a sleeping daemon: no port
 *   neither      a request's first packet: a stamp that grows with time (or
 *                with the emulator's request count) in bits 15-61, bit 14
 *                set, and the port in bits 0-13
 * A daemon woken by a ring serves the port it names before it scans the
 * rest (poller.c). The port is only a hint: the word is the client's to
 * scribble on, so it is bounded by the channel's ports, and a port named
 * wrongly costs one look at it. The stamp keeps a first packet's value
 * above every earlier one, which the GPU doorbell watch needs (wake_cuda.c).
 */
#define GPUSYS_RING_STREAM (UINT64_C(1) << 63)
#define GPUSYS_RING_HOST (UINT64_C(1) << 62)
#define GPUSYS_RING_PORT_BITS 14
#define GPUSYS_RING_STAMP_MASK (((UINT64_C(1) << 62) - 1) & ~((UINT64_C(1) << GPUSYS_RING_PORT_BITS) - 1))
GPUSYS_STATIC_ASSERT(GPUSYS_MAX_PORTS <= (1u << GPUSYS_RING_PORT_BITS), "a ring's port field must hold every port");

/* A first packet's stamp from a growing count (time, requests): the count's
 * low 47 bits above the stamp field's lowest bit, which is always set so
 * that a stamp is never 0. */
#define GPUSYS_RING_STAMP(count)                                                                                 \
	((((uint64_t)(count) << (GPUSYS_RING_PORT_BITS + 1)) & GPUSYS_RING_STAMP_MASK) |                          \
	 (UINT64_C(1) << GPUSYS_RING_PORT_BITS))

/* The port a doorbell value names, or UINT32_MAX where it names none. Read
 * the doorbell once and pass the value: it is a word others write. */
GPUSYS_ABI_FN uint32_t gpusys_ring_port(uint64_t ring)
{
	if (ring & GPUSYS_RING_STREAM)
		return (uint32_t)((ring >> 32) & 0x7fffffffu);
	if (ring & GPUSYS_RING_HOST)
		return UINT32_MAX;
	return (uint32_t)(ring & ((UINT64_C(1) << GPUSYS_RING_PORT_BITS) - 1));
}

GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_channel_header) <= GPUSYS_HEADER_BYTES,
		     "channel header must fit its pages");

/*
 * Heads: the shape of a small call (GPUSYS_CW_HEADS in the client word).
 * When every lane of a request sends and can receive at most
 * GPUSYS_HEAD_BYTES, each lane's packet 0 is one 16-byte head (the port's
 * heads[l]; a warp's heads are one 512-byte run), request and answer alike:
 *   tag     bits 0..11 the sequence of the request's client word, bit 12
 *           GPUSYS_HEAD_REQUEST or bit 13 GPUSYS_HEAD_ANSWER, bit 14
 *           GPUSYS_HEAD_FAILED (an answer whose status is the request's,
 *           not the lane's), bits 16..19 the length (0..GPUSYS_HEAD_BYTES)
 *   aux     request: the lane's capacity; answer: its status (0 or -errno)
 *   bytes   the payload
 * len[], aux[] and data[] are not used. Only heads are ever written to
 * heads[], and the daemon overwrites every request head it takes (with the
 * answer's, or a cleared tag for a fire-and-forget request), so no stale
 * head can pass for the next request of the same sequence. A head is written as a whole (one 16-byte
 * store on a GPU; on a CPU the tag last, with release) and read as a whole
 * (one 16-byte load; on a CPU the tag first, with acquire), so a head whose
 * tag names this request and direction holds this request's bytes: 16
 * aligned bytes lie in one cache line, which each side's store and read move
 * whole. So the client publishes without a release fence before its word,
 * and the daemon, seeing the word before a head has landed, leaves the
 * request for its next pass; the client polls its answer heads themselves,
 * one trip across the bus, instead of the server word and then the answer
 * (bench/RESULTS.md: "Packet 0 as a warp (issue 27)" measured the two trips).
 * The server word is still written after the heads, for the port's next
 * holder and for gpusys_rpc_test.
 */
#define GPUSYS_HEAD_BYTES 8u
#define GPUSYS_HEAD_REQUEST (1u << 12)
#define GPUSYS_HEAD_ANSWER (1u << 13)
#define GPUSYS_HEAD_FAILED (1u << 14)
#define GPUSYS_HEAD_WHO (GPUSYS_SEQ_MASK | GPUSYS_HEAD_REQUEST | GPUSYS_HEAD_ANSWER) /* what a tag must match */

struct gpusys_head {
	uint32_t tag;
	uint32_t aux;
	uint8_t bytes[GPUSYS_HEAD_BYTES];
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_head) == GPUSYS_CHUNK_BYTES, "a head is one chunk");

GPUSYS_ABI_FN uint32_t gpusys_head_tag(uint32_t seq, uint32_t who, uint32_t len)
{
	return (seq & GPUSYS_SEQ_MASK) | who | (len & 0xfu) << 16;
}

GPUSYS_ABI_FN uint32_t gpusys_head_len(uint32_t tag)
{
	return tag >> 16 & 0xfu;
}

/*
 * A port. Packet 0 of a message uses len[], aux[] and data (lane i's first
 * GPUSYS_INLINE_BYTES bytes in chunks, gpusys_inline_at). The per-lane words
 * are arrays rather than fields of each lane's slot, and the inline bytes
 * go chunk by chunk, so that a warp writes all its lengths with one
 * coalesced 128-byte store and each chunk of its bytes with one of 512.
 *   request:  len[i] = payload bytes of lane i, aux[i] = bytes lane i can
 *             receive in the response (its capacity)
 *   response: len[i] = payload bytes for lane i, aux[i] = lane i's status
 *             (0 or -errno, as int32_t)
 * Stream packets use only data[] (or the port's window), as raw bytes in
 * two slots (gpusys_stream_slot).
 */
struct gpusys_port {
	uint32_t len[GPUSYS_WARP_LANES];
	uint32_t aux[GPUSYS_WARP_LANES];
	struct gpusys_head heads[GPUSYS_WARP_LANES]; /* a small call's packet 0 (GPUSYS_CW_HEADS) */
	uint8_t data[GPUSYS_PACKET_BYTES];
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_port) == 256 + 512 + GPUSYS_PACKET_BYTES, "port size");
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_port) % 64 == 0, "ports stay line aligned");

/* Where the channel's regions lie for a given port count and bulk size. The
 * daemon computes it when creating a channel; the client recomputes it and
 * rejects a header that disagrees. */
struct gpusys_channel_layout {
	uint64_t client_word_offset;
	uint64_t server_word_offset;
	uint64_t ports_offset;
	uint64_t window_offset;
	uint32_t num_windows;
	uint64_t bulk_offset;
	uint64_t bulk_bytes;
	uint64_t total_bytes;
};

/* Where chunk k (bytes [16 k, 16 k + 16)) of lane l's inline bytes lies in
 * packet 0's data[]. */
GPUSYS_ABI_FN uint32_t gpusys_inline_at(uint32_t l, uint32_t k)
{
	return k * (GPUSYS_WARP_LANES * GPUSYS_CHUNK_BYTES) + l * GPUSYS_CHUNK_BYTES;
}
GPUSYS_STATIC_ASSERT(GPUSYS_INLINE_CHUNKS * GPUSYS_WARP_LANES * GPUSYS_CHUNK_BYTES == GPUSYS_PACKET_BYTES,
		     "every lane's inline chunks fill packet 0's data");


GPUSYS_ABI_FN uint64_t gpusys_align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* Stream windows a channel of num_ports ports has (the last ports'). */
GPUSYS_ABI_FN uint32_t gpusys_num_windows(uint32_t num_ports)
{
	uint32_t n = num_ports / 4u;
	return n < GPUSYS_MAX_WINDOWS ? n : GPUSYS_MAX_WINDOWS;
}

/* Stream packets in flight each way: a port's stream area is this many
 * slots, one packet each (ABI 10, the message format above). */
#define GPUSYS_STREAM_SLOTS 2u

/* Where port p's stream packets go: its window if it is one of the last
 * num_windows ports, else its data[]. *ret_bytes: the size of a stream
 * packet there, a slot (GPUSYS_WINDOW_BYTES or GPUSYS_PACKET_BYTES over
 * GPUSYS_STREAM_SLOTS). windows: the channel's window area. */
GPUSYS_ABI_FN uint8_t *gpusys_port_stream(struct gpusys_port *ports, uint8_t *windows, uint32_t num_ports,
					  uint32_t num_windows, uint32_t p, uint32_t *ret_bytes)
{
	uint32_t first = num_ports - num_windows;
	if (windows && num_windows && p >= first && p < num_ports) {
		*ret_bytes = GPUSYS_WINDOW_BYTES / GPUSYS_STREAM_SLOTS;
		return windows + (uint64_t)(p - first) * GPUSYS_WINDOW_BYTES;
	}
	*ret_bytes = GPUSYS_PACKET_BYTES / GPUSYS_STREAM_SLOTS;
	return ports[p].data;
}

/* Stream packet k's slot in a port's stream area (gpusys_port_stream: pkt
 * bytes a packet). */
GPUSYS_ABI_FN uint8_t *gpusys_stream_slot(uint8_t *stream, uint32_t pkt, uint32_t k)
{
	return stream + (k % GPUSYS_STREAM_SLOTS) * pkt;
}

/* Whether a response stream of packets packets, through a stream area of
 * pkt-byte packets (gpusys_port_stream), may be written with its packet 0
 * (GPUSYS_SW_STREAMED): a window's (packet 0 fills data[]) whose two slots
 * hold all of it. The daemon may still ask to be asked: the flag decides. */
GPUSYS_ABI_FN int gpusys_stream_with_answer(uint32_t pkt, uint32_t packets)
{
	return pkt == GPUSYS_WINDOW_BYTES / GPUSYS_STREAM_SLOTS && packets <= GPUSYS_STREAM_SLOTS;
}

GPUSYS_ABI_FN struct gpusys_channel_layout gpusys_channel_layout(uint32_t num_ports, uint64_t bulk_bytes,
								  uint64_t granularity)
{
	struct gpusys_channel_layout l;
	uint64_t word_bytes = gpusys_align_up((uint64_t)num_ports * 8u, GPUSYS_PAGE_BYTES);

	l.client_word_offset = GPUSYS_HEADER_BYTES;
	l.server_word_offset = l.client_word_offset + word_bytes;
	l.ports_offset = l.server_word_offset + word_bytes;
	l.window_offset = gpusys_align_up(l.ports_offset + (uint64_t)num_ports * sizeof(struct gpusys_port),
					  GPUSYS_PAGE_BYTES);
	l.num_windows = gpusys_num_windows(num_ports);
	l.bulk_offset = l.window_offset + (uint64_t)l.num_windows * GPUSYS_WINDOW_BYTES;
	l.bulk_bytes = gpusys_align_up(bulk_bytes, GPUSYS_PAGE_BYTES);
	l.total_bytes = gpusys_align_up(l.bulk_offset + l.bulk_bytes, granularity ? granularity : GPUSYS_PAGE_BYTES);
	return l;
}

/* Write a fresh header for a zeroed channel of this layout (the daemon does
 * this before sharing the memory; tests do it for in-process channels). */
static inline void gpusys_channel_format(void *base, uint32_t num_ports, const struct gpusys_channel_layout *l,
					 uint32_t client_id)
{
	struct gpusys_channel_header *h = (struct gpusys_channel_header *)base;

	h->magic = GPUSYS_CHANNEL_MAGIC;
	h->abi_version = GPUSYS_ABI_VERSION;
	h->num_ports = num_ports;
	h->header_bytes = GPUSYS_HEADER_BYTES;
	h->total_bytes = l->total_bytes;
	h->client_word_offset = l->client_word_offset;
	h->server_word_offset = l->server_word_offset;
	h->ports_offset = l->ports_offset;
	h->bulk_offset = l->bulk_offset;
	h->bulk_bytes = l->bulk_bytes;
	h->window_offset = l->window_offset;
	h->num_windows = l->num_windows;
	h->window_bytes = GPUSYS_WINDOW_BYTES;
	h->client_id = client_id;
	h->server_state = GPUSYS_SERVER_RUNNING;
}

/* Bytes a lane sends beyond its slot: the part that goes through stream packets. */
GPUSYS_ABI_FN uint32_t gpusys_stream_part(uint32_t len)
{
	return len > GPUSYS_INLINE_BYTES ? len - GPUSYS_INLINE_BYTES : 0;
}

#endif /* GPUSYS_ABI_H */
