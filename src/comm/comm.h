/* comm.h — in-process collectives between the device threads of one client.
 *
 * Every local device is run by its own thread; with several processes, the
 * ids are global and the caller is always one of this process's devices. A collective is called by every
 * participating device thread with the same arguments except `device`, in the
 * same order on every device (SPMD programs guarantee this). `group` lists the
 * device ids (0..n_devices-1) taking part, in rank order; the calling device
 * is one of them. Every device of the communicator makes every call, each
 * with its own group: the groups of one call partition all devices (e.g. the
 * rows of a mesh for an all-reduce over the mesh's second axis).
 *
 * Layouts: buffers are viewed as (outer, n, chunk) where needed so a gather or
 * scatter along any tensor dim needs no extra copy: for a tensor dim d,
 * outer = product of dims before d, chunk = bytes of one slice after d times
 * the local size of d.
 *
 * Guarantees: deterministic results (a fixed reduction order, independent of
 * thread timing), every byte read at most a bounded number of times, no torn
 * reads (a device never reads a peer buffer before the peer published it, nor
 * reuses its buffer before the peers finished reading). Counts are elements;
 * sizes are bytes (size_t); messages over 2 GiB work. */
#ifndef TS_COMM_H
#define TS_COMM_H

#include "tessel/core.h"
#include "tessel/graph.h" /* ts_reduce_kind */

typedef struct ts_comm ts_comm;

/* A communicator for n_devices device threads of one process. */
ts_comm *comm_new(int n_devices);
/* A communicator over the devices of several processes (net.h): device ids
 * 0..n_devices-1 are global, proc_of[d] is the process of device d, and this
 * process runs [first, first + n_local). A group whose devices are all local
 * is served in shared memory; one that spans processes hierarchically
 * (hier.c). net NULL: one process (proc_of unused). With a net it is a
 * collective call of every process (they exchange host names: groups over
 * processes of one host get their own in-line limit, comm_start_inline). */
struct ts_net;
ts_comm *comm_new_world(int n_devices, const int *proc_of, int first, int n_local, struct ts_net *net);
void comm_free(ts_comm *c);
int comm_size(const ts_comm *c);

/* Collective timeout in milliseconds (0 = wait forever); a device that waits
 * longer returns -1 with a message naming the collective and the missing
 * devices. After a timeout the communicator is unusable: free it once every
 * device thread has returned. (Aliasing: in == out, or any overlap of a
 * device's own in and out, is allowed; buffers of different devices must not
 * overlap; peers read the caller's in and all-reduce writes into its out
 * during the call.) */
void comm_set_timeout_ms(ts_comm *c, int ms);

/* Blocks until every device of the group arrived. */
int comm_barrier(ts_comm *c, int device, const int *group, int n);

/* out = reduction over the group of in (count elements of dt, SUM/MAX/MIN;
 * MEAN divides the sum by n). in == out allowed. */
int comm_all_reduce(ts_comm *c, int device, const int *group, int n, ts_dtype dt,
                       ts_reduce_kind op, const void *in, void *out, int64_t count);

/* in viewed as (outer, chunk_bytes); out as (outer, n, chunk_bytes): member r's
 * in lands at out[:, r, :]. */
int comm_all_gather(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                       int64_t outer, size_t chunk_bytes);

/* in viewed as (outer, n, chunk) elements of dt; out (outer, chunk) holds the
 * reduction over the group of in[:, r, :] where r is the caller's rank. */
int comm_reduce_scatter(ts_comm *c, int device, const int *group, int n, ts_dtype dt,
                           ts_reduce_kind op, const void *in, void *out, int64_t outer,
                           int64_t chunk);

/* in viewed as (outer, n, chunk_bytes); the block in[:, j, :] goes to member j,
 * arriving at out[:, r, :] of member j where r is the sender's rank (so out is
 * also (outer, n, chunk_bytes)). */
int comm_all_to_all(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                       int64_t outer, size_t chunk_bytes);

/* pairs: n_pairs (source, target) device ids; each device sends in to the
 * targets of its pairs and receives into out from its source, or zero-fills
 * out when it is no target. Every device of the communicator calls it. */
int comm_permute(ts_comm *c, int device, const int *pairs, int n_pairs, const void *in, void *out,
                    size_t bytes);

/* ---- asynchronous collectives (overlap with computation) ----
 * Starts an in-place all-reduce of buf (count elements of dt) over group on
 * a worker thread that acts as `device` in the communicator, and returns a
 * ticket (>= 0) at once; -1 on error. The device thread may go on computing
 * but must not touch buf, nor call another collective, before
 * comm_wait_ticket returns for it (comm_wait_all for all of them):
 * the worker runs each device's started collectives in order, so every
 * device still makes every call in the same order (with a small lane, every
 * call of each lane: async.c). group is borrowed until
 * the wait. Errors (timeouts) come back from the wait. */
int64_t comm_all_reduce_start(ts_comm *c, int device, const int *group, int n, ts_dtype dt, ts_reduce_kind op,
                                 void *buf, int64_t count);
/* The same for an all-gather and a reduce-scatter (arguments as in
 * comm_all_gather / comm_reduce_scatter): neither in nor out may be touched
 * by the device before the wait (in is read by the worker, and by peers,
 * until the collective ends there). */
int64_t comm_all_gather_start(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                              int64_t outer, size_t chunk_bytes);
int64_t comm_reduce_scatter_start(ts_comm *c, int device, const int *group, int n, ts_dtype dt, ts_reduce_kind op,
                                  const void *in, void *out, int64_t outer, int64_t chunk);
/* comm_all_gather_start with a prologue: the worker's lane first calls
 * pre(pre_ctx), which computes `in` (0, or -1 with the error set: the
 * gather is not made and the error comes back from the wait, as a failed
 * collective's), then gathers. The prologue runs in the lane's start order,
 * so after every collective started before it on that lane (the runtime's
 * update chains: ZeRO-1's weight update, run where its reduce-scatter ends,
 * runtime/cpu_device.c). pre_ctx is borrowed until the wait. */
typedef int (*comm_prologue)(void *pre_ctx);
int64_t comm_all_gather_start_after(ts_comm *c, int device, const int *group, int n, const void *in, void *out,
                                    int64_t outer, size_t chunk_bytes, comm_prologue pre, void *pre_ctx);
/* Waits until the started collective `ticket` and every one started before
 * it ended (in start order, whichever lane ran them). */
int comm_wait_ticket(ts_comm *c, int device, int64_t ticket);
/* 1 when the started collective `ticket` and every earlier one have ended
 * (its wait would not block; an error still comes back from the wait), 0
 * while one runs. */
int comm_ticket_done(ts_comm *c, int device, int64_t ticket);
/* 1 when the started collective `ticket` itself has ended: between hosts a
 * small one (comm_internal.h COMM_LANE_BYTES, TESSEL_COMM_LANES) runs on a
 * lane of its own beside a large one started before it, and may end first
 * (async.c). Its result is ready; the wait still returns its error. */
int comm_ticket_ended(ts_comm *c, int device, int64_t ticket);
/* Waits until the started collective `ticket` itself ended (comm_ticket_ended),
 * not the ones started before it: a small one on its own lane may end
 * first. The device still must not call a collective itself, nor touch the
 * buffers of the others, before their waits. Returns the worker's first
 * error (of any ticket), as comm_wait_ticket. */
int comm_wait_alone(ts_comm *c, int device, int64_t ticket);
int comm_wait_all(ts_comm *c, int device);

/* In-line starts: true when a collective of `bytes` over group that the
 * caller would start now may instead run synchronously on the device thread
 * (the caller then makes the ordinary call, comm_all_reduce etc.): nothing
 * the device started is still in flight (so the calls stay in order) and
 * the size is within the limit for the group: in shared memory (every
 * member in this process), over processes of this host (every member's
 * process runs on this host: same host name), or over hosts. Results are
 * the same bits either way (the same calls, in the same order). */
bool comm_start_inline(ts_comm *c, int device, const int *group, int n, int64_t bytes);
/* Before a synchronous collective of `bytes` over group (one the device
 * calls itself): 1 when it goes on the small lane (comm_lane), after waiting
 * for what the device started on that lane; the call may then be made
 * while the main lane's collectives are still in flight (the lanes never
 * match each other's messages, and each lane's calls stay in start order).
 * 0 when it does not (the caller waits for everything first), -1 with the
 * worker's error. Between hosts, ResNet-20's batch norms (sync-bn) make
 * such calls while a gradient bucket is still crossing the link. */
int comm_wait_lane(ts_comm *c, int device, const int *group, int n, int64_t bytes);
/* True when a collective of `bytes` over group goes on the small lane (a
 * group spanning hosts, at most COMM_LANE_BYTES; comm_internal.h). */
bool comm_small_lane(const ts_comm *c, const int *group, int n, int64_t bytes);
/* Whether some device of c is on another host than this process (the
 * processes learned their hosts when the communicator was made): where a
 * collective crosses a network link (compile.c: update chains). */
bool comm_spans_hosts(const ts_comm *c);
/* The limits in bytes (0: never in line; INT64_MAX: always). Defaults:
 * $TESSEL_COMM_INLINE_BYTES for all three, else up to 8 MiB in shared
 * memory, up to 8 MiB between processes of one host (64 KiB for a while
 * after the device, past its start-up, waited long for late peers there:
 * a loaded machine),
 * up to 64 KiB between hosts. Set before the devices run. (comm_new_world learns the processes'
 * hosts: over several processes it is a collective call.) */
void comm_set_inline_bytes(ts_comm *c, int64_t local, int64_t host, int64_t remote);

#endif
