/* net.h — the transport between processes (one per host, launched by MPI).
 *
 * A thin layer over MPI point-to-point messages, used by the hierarchical
 * collectives (hier.c), the client's start-up exchange and collective host
 * reads. Every call is thread-safe: device threads of one process may
 * exchange at the same time (calls into MPI are serialized by a lock, and
 * waiting is done by polling so that a timeout can end it).
 *
 * Without an MPI launcher (no OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK in the
 * environment; TESSEL_MPI=0 forces this, TESSEL_MPI=1 forces MPI) or in a
 * build without MPI there is no net: net_world() returns NULL and the process
 * is alone. */
#ifndef TS_COMM_NET_H
#define TS_COMM_NET_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ts_net ts_net;

/* The process group this process was launched in (MPI initialized on the
 * first call, finalized at exit), or NULL when alone. On failure NULL with
 * an error set (*failed = true). */
ts_net *net_world(bool *failed);
int net_rank(const ts_net *n);
int net_size(const ts_net *n);
/* The largest tag a message may carry. */
int net_tag_ub(const ts_net *n);
/* Tells the transport which processes share a host: host[p] is the lowest
 * process of p's host (comm.c, from the host names). Messages between hosts
 * then go in pieces of MPI's eager size (net.c NET_EAGER_PIECE says why)
 * when the link is slow: with processes on several hosts, process 0
 * measures the link from each other host (2 MiB, three times; metrics
 * counter NetLinkMbps: the slowest link's best, in Mbit/s) and tells every
 * process, unless TESSEL_NET_EAGER or TESSEL_NET_PIECE_BYTES decides. A
 * collective call of every process; the first call wins (the hosts do not
 * change), later ones return at once. -1 with an error when the
 * measurement fails (timeout_ms as in net_exchange). */
int net_set_hosts(ts_net *n, const int *host, int timeout_ms);

/* One message of an exchange: bytes to or from process `peer` (any size;
 * messages over 1 GiB go as several MPI messages). */
typedef struct {
  int peer;
  int tag;
  bool send;
  void *buf;
  size_t bytes;
} net_msg;

/* How the calling thread waits in its exchanges (net_set_pacer; NULL, the
 * default: poll hard, then yield, then nap, below). A collective worker
 * (async.c) sets one: while `urgent` is false nobody waits for its result
 * (its device thread computes, on a core the worker shares), so an exchange
 * polls once per `nap` of NET_PATIENT_NAP_NS instead (nap returns early when
 * the result becomes urgent); once urgent it waits as without a pacer. */
typedef struct {
  bool (*urgent)(void *ctx);
  void (*nap)(void *ctx, long ns);
  void *ctx;
  /* The thread's sends to another host in eager pieces go through the
   * process's send window (net.c pump: NET_PACE_WINDOW pieces in flight, in
   * post order), so another thread's unpaced ones (the small lane's) pass
   * them instead of queueing behind every piece in MPI's TCP queue. */
  bool paced;
} net_pacer;
#define NET_PATIENT_NAP_NS 100000L
/* Sets the calling thread's pacer (kept by pointer; NULL: none). */
void net_set_pacer(const net_pacer *p);

/* Posts every message, then waits until all completed. timeout_ms 0 = no
 * limit; on timeout -1 with a message naming `what` and the processes that
 * never answered. Messages to/from one peer with one tag match in order. */
int net_exchange(ts_net *n, net_msg *msgs, int count, int timeout_ms, const char *what);

/* The same on a separate channel for host-side exchanges (start-up, reads
 * of buffers), which never mix with the collectives' messages. */
int net_exchange_ctl(ts_net *n, net_msg *msgs, int count, int timeout_ms, const char *what);

/* all[p * bytes ...] = process p's mine (bytes each), over every process. */
int net_allgather(ts_net *n, const void *mine, void *all, size_t bytes, int timeout_ms, const char *what);

/* The non-blocking form of net_allgather: posts the messages (on a tag of
 * their own, so they never match a blocking all-gather) and returns at once
 * with *out; net_wait completes them. `mine` and `all` must stay valid until
 * then, and `what` (a static string: the error of net_wait names it).
 * Collective: every process starts its non-blocking all-gathers in the
 * same order. No process group (n NULL): -1 with an error. */
typedef struct net_pending net_pending;
int net_allgather_start(ts_net *n, const void *mine, void *all, size_t bytes, const char *what,
                        net_pending **out);
/* Waits until p's messages completed (timeout_ms 0 = no limit; on timeout -1
 * naming p's `what` and the processes that never answered) and frees p, also
 * on error. NULL: 0. */
int net_wait(net_pending *p, int timeout_ms);

/* Posts msgs on the collectives' channel (as net_exchange does) and returns
 * at once with *out; net_wait completes them. msgs and their buffers must
 * stay valid until then (msgs is not freed). Several may be pending at once:
 * messages to/from one peer with one tag match in the order posted, across
 * them too (hier.c's pipelined all-reduce). */
int net_start(ts_net *n, net_msg *msgs, int count, const char *what, net_pending **out);
/* Gives up on p: cancels its unfinished receives (a late message must not
 * land in their buffers), frees its requests and p. For the error path of a
 * caller that holds several pendings. NULL: nothing. */
void net_cancel(net_pending *p);

/* Ends the whole job (every process) with exit code `code` (MPI_Abort, which
 * does not return). Without a process group (n NULL or no MPI) it only
 * flushes stdout and stderr and returns: ts_client_abort, the one place in
 * the library that may end the process, then exits. */
void net_abort(ts_net *n, int code);

#endif
