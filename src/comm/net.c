/* net.c — the transport between processes over MPI (contract: net.h).
 *
 * Two duplicates of MPI_COMM_WORLD keep traffic apart: `data` carries the
 * collectives' messages (tags chosen by hier.c), `ctl` the start-up and host
 * exchanges. Errors are returned (MPI_ERRORS_RETURN), not fatal, so the
 * caller can name what failed; a timeout or an error usually ends in
 * net_abort from the caller. */
#include "comm/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics_internal.h" /* NetBytesSent, NetBytesReceived, NetMessages, NetEagerPieces */
#include "util/config.h" /* TESSEL_MPI, TESSEL_NET_PIECE_BYTES */
#include "util/error.h"

#ifdef TESSEL_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* A send piece waiting for the send window (pump). */
typedef struct {
  struct net_pending *p;
  void *buf;
  int bytes, peer, tag;
  MPI_Comm comm;
} pace_item;

/* Paced pieces in flight (MPI_Isend not complete: not yet in the socket).
 * The main lane's eager pieces to another host wait in a per-process queue
 * and go NET_PACE_WINDOW at a time, so a small lane's message posted
 * meanwhile is behind at most that many (256 KiB) in Open MPI's TCP queue,
 * plus the socket's send buffer (bound_send_buffers). Alone neither helps
 * (bench_net_link -m pass, see bound_send_buffers). */
enum { NET_PACE_WINDOW = 4 };

struct ts_net {
  int rank, size, tag_ub;
  MPI_Comm data, ctl;
  pthread_mutex_t mu; /* every MPI call goes through it */
  /* the send window (pump), under mu: queued pieces [q_head, q_head + q_n)
   * of q (a ring of q_cap), and the ones in flight */
  pace_item *q;
  int q_head, q_n, q_cap;
  MPI_Request fl_req[NET_PACE_WINDOW];
  struct net_pending *fl_p[NET_PACE_WINDOW];
  int n_fl;
  _Atomic(bool *) far; /* per process: messages to it go in eager pieces (net_set_hosts); NULL: none */
  _Atomic bool hosts_set; /* net_set_hosts ran (the first call wins) */
};

static ts_net g_net;
static int g_state; /* 0 untried, 1 up, 2 alone, 3 failed */
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;

/* Open MPI between processes of one host (its vader BTL): messages past
 * the eager size go by single copy (CMA, process_vm_readv, made by the
 * receiver) unless told otherwise. CMA pins the sender's pages page by page
 * on every transfer: on the 2-core test machine (loaded, 3 interleaved
 * pairs) a 1.6 MB all-gather between two processes took a median 666-1914
 * us with it and 104-646 us through the copy-in/copy-out path of the
 * shared-memory FIFO (pipelined fragments), and the 2-process benchmark
 * rows (MLP, CNN; SPMD, DDP, FSDP; 5 interleaved rounds) were faster in all
 * six (the CNN's 4.7 MB gradient costs more CPU that way: two copies). So before MPI_Init tessel asks for that
 * path, unless the launcher or the user already set the parameter (any
 * value wins: OMPI_MCA_btl_vader_single_copy_mechanism=cma restores CMA).
 * Between hosts (TCP) nothing changes. */
static void prefer_shared_memory_copies(void) {
#ifdef OPEN_MPI
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
#endif
}

/* Between hosts, Open MPI's TCP sockets keep the kernel's buffer sizes
 * (btl_tcp_sndbuf 0: autotuned, up to net.ipv4.tcp_wmem's 4 MiB), and the
 * send buffer (with the qdisc's queue it bounds) is a FIFO of megabytes in
 * front of every message to that peer: a small lane's collective (async.c)
 * posted behind a large one's pieces waits until they all left, whatever
 * the send window (pump) holds back. bench_net_link -m pass at 1 Gbit/s
 * (bench/run_netlink.sh VARIANTS, 3 interleaved rounds, load ~10): the
 * 80 KiB all-reduce started 2 ms after a 4.7 MB one took 0.94x the large
 * one's time with the window alone, 0.19x with a 128 KiB send buffer too,
 * 0.21x with the receive buffer bounded as well (not needed: the receiver
 * drains it). So tessel asks for NET_SEND_BUFFER, unless the launcher or
 * the user set the parameter (any value wins; 0 gives the kernel's
 * autotuning back). The cost: the link now idles whenever no thread polls
 * for 1 ms (the buffer's time at 1 Gbit/s). In training that did not show
 * (CNN DDP over 2 hosts at 1 Gbit/s, bench/run_multihost.sh PROFILE=1, load
 * 5-7, 2 runs each: the 4.72 MB reduce-scatter's median 23.2-24.9 ms with
 * 128 KiB, 22.9-23.9 with 512 KiB, 21.1-24.9 on main; line 19.7), but with
 * the machine's cores busier (load ~10) one run took 40 ms. */
#define NET_SEND_BUFFER "131072"
static void bound_send_buffers(void) {
#ifdef OPEN_MPI
  setenv("OMPI_MCA_btl_tcp_sndbuf", NET_SEND_BUFFER, 0);
#endif
}

/* Not asked for: Open MPI's TCP progress thread (btl_tcp_progress_thread=1),
 * which answers rendezvous and refills sockets without our polls. Through a
 * 1 Gbit/s tbf link (bench/run_netlink.sh, 4.7 MB 2-process all-reduce,
 * interleaved rounds, loaded 2-core machine) it took a waiting-only exchange
 * from 43.7 to 41.0 ms (raw TCP 40.2), but with a thread computing beside it
 * (-s, as in training) 47.5 against 43.5 ms, and the CNN's 2-host DDP and
 * SPMD steps were not faster (5 pairs each, noise larger than any gain). */
static void net_finalize(void) {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

static int mpi_error(const char *what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return set_error_code(TS_ERR_IO, "%s: MPI error: %.*s", what, len, msg);
}

ts_net *net_world(bool *failed) {
  *failed = false;
  pthread_mutex_lock(&g_init_mu);
  if (g_state == 0) {
    g_state = 2;
    if (env_mpi_wanted()) {
      int inited = 0, provided = 0, rc = MPI_SUCCESS;
      MPI_Initialized(&inited);
      if (!inited) {
        prefer_shared_memory_copies();
        bound_send_buffers();
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc == MPI_SUCCESS) atexit(net_finalize);
      } else {
        MPI_Query_thread(&provided);
      }
      if (rc != MPI_SUCCESS) {
        mpi_error("net: MPI_Init_thread", rc);
        g_state = 3;
      } else if (provided < MPI_THREAD_SERIALIZED) {
        set_error("net: this MPI gives thread level %d; tessel needs at least MPI_THREAD_SERIALIZED", provided);
        g_state = 3;
      } else {
        void *ub = NULL;
        int flag = 0;
        MPI_Comm_dup(MPI_COMM_WORLD, &g_net.data);
        MPI_Comm_dup(MPI_COMM_WORLD, &g_net.ctl);
        MPI_Comm_set_errhandler(g_net.data, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(g_net.ctl, MPI_ERRORS_RETURN);
        MPI_Comm_rank(g_net.data, &g_net.rank);
        MPI_Comm_size(g_net.data, &g_net.size);
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
        g_net.tag_ub = flag && ub ? *(int *)ub : 32767;
        pthread_mutex_init(&g_net.mu, NULL);
        g_state = 1;
      }
    }
  }
  int state = g_state;
  pthread_mutex_unlock(&g_init_mu);
  if (state == 3) {
    *failed = true;
    if (!*ts_last_error()) set_error("net: MPI failed to start");
  }
  return state == 1 ? &g_net : NULL;
}

int net_rank(const ts_net *n) { return n ? n->rank : 0; }
int net_size(const ts_net *n) { return n ? n->size : 1; }
int net_tag_ub(const ts_net *n) { return n ? n->tag_ub : 32767; }

/* Bytes per MPI message (counts are ints): 1 GiB, or $TESSEL_NET_PIECE_BYTES
 * (tests use a small value to exercise the splitting of large messages). */
static size_t net_piece(void) {
  return env_config()->net_piece_bytes;
}

/* Messages to and from another host go in pieces that fit Open MPI's TCP
 * eager fragment (btl_tcp_eager_limit, 64 KiB with its headers): a larger
 * message is a rendezvous, whose data waits for the receiver's answer, and
 * that answer travels on the same TCP connection behind whatever bulk data
 * the receiver already queued there for us. Between two hosts at 1 Gbit/s
 * (bench/run_netlink.sh -m comm: a 4.7 MB all-reduce, reduce-scatter then
 * all-gather) every second all-reduce or so took one phase longer (58-62 ms
 * against 39-42, both directions of a phase one after the other: the
 * answer sat behind 2.36 MB); in eager pieces none did (39.6 ms median,
 * the line rate). Pieces cost a copy out of MPI's fragments on receipt.
 * Metrics counter NetEagerPieces: the pieces past each message's first.
 *
 * On a fast link the pieces cost more than the rendezvous they avoid (the
 * peer's queued bulk data drains in a tenth of the time at 10 Gbit/s, while
 * the copies and the messages per piece stay): stop 29's CNN DDP over 2
 * hosts took 30.6 ms a step in pieces against 27.7 whole at 10 Gbit/s, and
 * 49.5 against 52.5 at 1 Gbit/s. So pieces go only over links slower than
 * NET_EAGER_BELOW_MBPS, measured once when the hosts become known
 * (net_set_hosts, probe_links): between what the 1 Gbit/s link gives and
 * what a 10 Gbit/s one gives on a loaded machine (namespace hosts on this
 * 2-core machine at load 8-10, best of three 2 MiB probes, 3 runs each:
 * 594-908 Mbit/s at 1 Gbit/s, 2644-3582 at 10 Gbit/s, 8748-54606
 * unshaped). TESSEL_NET_EAGER=0/1 decides without measuring. */
enum { NET_EAGER_PIECE = 65536 - 256 };
#define NET_EAGER_BELOW_MBPS 1600.0

/* The largest MPI message to or from peer ($TESSEL_NET_PIECE_BYTES, when
 * set, for every peer). */
static size_t piece_for(ts_net *n, int peer) {
  bool *far = atomic_load_explicit(&n->far, memory_order_acquire);
  return far && far[peer] && !env_config()->net_piece_set ? NET_EAGER_PIECE : net_piece();
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static _Thread_local const net_pacer *t_pacer;

void net_set_pacer(const net_pacer *p) { t_pacer = p; }

/* After a timeout: names the peers of the unfinished requests in who
 * (whosz bytes), cancels the receives (the buffers go back to the caller: a
 * late message must not land in them) and frees the requests. */
static void timed_out(ts_net *n, MPI_Request *req, int k, const net_msg *msgs, const int *owner, char *who,
                      size_t whosz) {
  size_t len = 0;
  int last = -1;
  who[0] = '\0';
  pthread_mutex_lock(&n->mu);
  for (int j = 0; j < k; j++) {
    int done = 0;
    MPI_Test(&req[j], &done, MPI_STATUS_IGNORE);
    if (done) continue;
    const net_msg *m = &msgs[owner[j]];
    if (m->peer != last && len < whosz - 16 && !strstr(who, "...")) /* messages are grouped by peer */
      len += (size_t)snprintf(who + len, whosz - len, len ? ", %d" : "%d", m->peer);
    last = m->peer;
    if (!m->send) MPI_Cancel(&req[j]);
    MPI_Request_free(&req[j]);
  }
  pthread_mutex_unlock(&n->mu);
}

/* The pause between two polls of a hard wait that began `waited` ms ago. */
static void pause_poll(double waited) {
  /* poll hard for about 100 us (a peer that is just behind answers within
   * that), then yield, then sleep in naps that grow with the wait: 1/50 of
   * the time waited so far, from 20 us, held at 100 us for the first 100 ms
   * and up to 1 ms after. A thread that waits long (a late peer) must not
   * take the core of a computing one: 20 us naps cost about 13% of a core
   * (measured, 2 s wait), 100 us naps ~10%, 1 ms naps ~2%. But each call
   * here is what progresses MPI's sockets, and on a slow link the socket
   * buffers hold less than 1 ms of data: with naps up to 1 ms a 2.36 MB
   * exchange between two hosts at 1 Gbit/s took 19.5 or 39 ms, switching
   * between runs (line rate 18.9 ms); capped at 100 us, 19.2-19.9 ms every
   * run. So transfers (a 5 MB all-reduce is 40 ms at 1 Gbit/s) keep 100 us
   * naps; only a wait past 100 ms (a late peer) drops to 1 ms. */
  if (waited < 0.1) return;
  if (waited < 1.0) {
    sched_yield();
  } else {
    long nap_ns = (long)(waited * 20000.0); /* waited / 50, in ns */
    long cap_ns = waited < 100.0 ? 100000 : 1000000;
    nap_ns = nap_ns < 20000 ? 20000 : nap_ns > cap_ns ? cap_ns : nap_ns;
    nanosleep(&(struct timespec){0, nap_ns}, NULL);
  }
}

/* Posted messages, not yet complete (net_allgather_start, or inside exchange). */
struct net_pending {
  ts_net *n;
  net_msg *msgs; /* owned when the pending is (net_allgather_start) */
  int count;     /* messages */
  MPI_Request *req;
  int *owner; /* message of each request */
  int k;      /* requests posted */
  const char *what;
  bool owns_msgs; /* net_wait frees msgs (net_allgather_start) */
  int paced_left; /* pieces in the send window's queue or in flight (under n->mu) */
};

/* The send window: retires the paced pieces in flight that completed, then
 * posts queued ones, in post order, up to NET_PACE_WINDOW in flight. Every
 * thread that polls an exchange pumps (under n->mu), so pieces of a pending
 * nobody waits for yet still go. Returns an MPI code. */
static int pump(ts_net *n) {
  int rc = MPI_SUCCESS;
  for (int j = 0; j < n->n_fl && rc == MPI_SUCCESS;) {
    int done = 0;
    rc = MPI_Test(&n->fl_req[j], &done, MPI_STATUS_IGNORE);
    if (!done) {
      j++;
      continue;
    }
    n->fl_p[j]->paced_left--;
    n->n_fl--;
    n->fl_req[j] = n->fl_req[n->n_fl];
    n->fl_p[j] = n->fl_p[n->n_fl];
  }
  while (rc == MPI_SUCCESS && n->n_fl < NET_PACE_WINDOW && n->q_n) {
    pace_item *it = &n->q[n->q_head];
    rc = MPI_Isend(it->buf, it->bytes, MPI_BYTE, it->peer, it->tag, it->comm, &n->fl_req[n->n_fl]);
    if (rc != MPI_SUCCESS) break;
    n->fl_p[n->n_fl++] = it->p;
    n->q_head = (n->q_head + 1) % n->q_cap;
    n->q_n--;
  }
  return rc;
}

/* Room for `more` queued pieces (under n->mu). */
static int pace_reserve(ts_net *n, int more) {
  if (n->q_n + more <= n->q_cap) return 0;
  int cap = n->q_cap ? n->q_cap : 64;
  while (cap < n->q_n + more) cap *= 2;
  pace_item *q = malloc((size_t)cap * sizeof *q);
  if (!q) return -1;
  for (int i = 0; i < n->q_n; i++) q[i] = n->q[(n->q_head + i) % n->q_cap];
  free(n->q);
  n->q = q;
  n->q_head = 0;
  n->q_cap = cap;
  return 0;
}

/* Drops p's pieces from the send window (a timeout or cancel; under n->mu):
 * queued ones are never sent, sent ones are freed (they end unobserved). */
static void pace_drop(ts_net *n, struct net_pending *p) {
  if (!p->paced_left) return;
  int m = 0;
  for (int i = 0; i < n->q_n; i++) {
    pace_item it = n->q[(n->q_head + i) % n->q_cap];
    if (it.p != p) n->q[(n->q_head + m++) % n->q_cap] = it;
  }
  n->q_n = m;
  for (int j = 0; j < n->n_fl;) {
    if (n->fl_p[j] != p) {
      j++;
      continue;
    }
    MPI_Request_free(&n->fl_req[j]);
    n->n_fl--;
    n->fl_req[j] = n->fl_req[n->n_fl];
    n->fl_p[j] = n->fl_p[n->n_fl];
  }
  p->paced_left = 0;
}

/* pace_drop, taking n->mu (a failed post, a timeout, a cancel). */
static void pace_cancel(ts_net *n, struct net_pending *p) {
  pthread_mutex_lock(&n->mu);
  pace_drop(n, p);
  pthread_mutex_unlock(&n->mu);
}

static void pending_release(net_pending *p) {
  free(p->req);
  free(p->owner);
  p->req = NULL;
  p->owner = NULL;
}

/* Posts every message of msgs on comm into p (returned: 0, or -1 with
 * nothing left posted). */
static int post(ts_net *n, MPI_Comm comm, net_msg *msgs, int count, const char *what, net_pending *p) {
  *p = (net_pending){n, msgs, count, NULL, NULL, 0, what, false, 0};
  if (env_config()->net_piece_invalid)
    return set_error("%s: TESSEL_NET_PIECE_BYTES=%s: expected bytes in [1, 1073741824]", what,
                     env_config()->net_piece_invalid);
  if (env_config()->net_eager_invalid)
    return set_error("%s: TESSEL_NET_EAGER=%s: expected 0 or 1 (unset: measure the link)", what,
                     env_config()->net_eager_invalid);
  if (env_config()->net_pace_invalid)
    return set_error("%s: TESSEL_NET_PACE=%s: expected 0 or 1", what, env_config()->net_pace_invalid);
  size_t n_req = 0, eager = 0; /* eager: pieces more than one per message, of messages cut for another host */
  for (int i = 0; i < count; i++) {
    size_t piece = piece_for(n, msgs[i].peer), parts = msgs[i].bytes ? (msgs[i].bytes + piece - 1) / piece : 1;
    n_req += parts;
    if (piece == NET_EAGER_PIECE) eager += parts - 1;
  }
  if (eager && TS_METRICS_ON()) obs_count("NetEagerPieces", (int64_t)eager);
  if (n_req > (size_t)1 << 24) return set_error("%s: %zu messages are too many", what, n_req);
  p->req = malloc((n_req ? n_req : 1) * sizeof *p->req);
  p->owner = malloc((n_req ? n_req : 1) * sizeof *p->owner);
  if (!p->req || !p->owner) {
    pending_release(p);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %d messages", what, count);
  }
  int k = 0, rc = MPI_SUCCESS;
  bool pace = t_pacer && t_pacer->paced && env_config()->net_pace != 0;
  pthread_mutex_lock(&n->mu);
  if (pace && pace_reserve(n, (int)n_req) < 0) {
    pthread_mutex_unlock(&n->mu);
    pending_release(p);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu messages", what, n_req);
  }
  for (int i = 0; i < count && rc == MPI_SUCCESS; i++) {
    net_msg *m = &msgs[i];
    size_t off = 0, piece = piece_for(n, m->peer);
    bool paced = pace && m->send && piece == NET_EAGER_PIECE;
    do {
      size_t part = m->bytes - off < piece ? m->bytes - off : piece;
      p->owner[k] = i;
      if (paced) { /* the send window posts it (pump) */
        p->req[k] = MPI_REQUEST_NULL;
        n->q[(n->q_head + n->q_n++) % n->q_cap] = (pace_item){p, (char *)m->buf + off, (int)part, m->peer, m->tag, comm};
        p->paced_left++;
      } else {
        rc = m->send ? MPI_Isend((char *)m->buf + off, (int)part, MPI_BYTE, m->peer, m->tag, comm, &p->req[k])
                     : MPI_Irecv((char *)m->buf + off, (int)part, MPI_BYTE, m->peer, m->tag, comm, &p->req[k]);
      }
      k++;
      off += part;
    } while (off < m->bytes && rc == MPI_SUCCESS);
  }
  if (rc == MPI_SUCCESS && n->q_n) rc = pump(n);
  pthread_mutex_unlock(&n->mu);
  p->k = k;
  if (rc != MPI_SUCCESS) {
    pace_cancel(n, p);
    pending_release(p);
    return mpi_error(what, rc);
  }
  return 0;
}

/* Polls p's requests to completion (or the timeout) and frees them. */
static int complete(net_pending *p, int timeout_ms) {
  ts_net *n = p->n;
  MPI_Request *req = p->req;
  int k = p->k, rc = MPI_SUCCESS;
  const char *what = p->what;
  /* since: when the current hard wait began (ms after start; -1 while a
   * pacer naps): a wait that turns urgent polls hard from then on */
  double start = now_ms(), deadline = timeout_ms > 0 ? start + timeout_ms : 0, waited = 0, since = 0;
  for (long iter = 0;; iter++) {
    int flag = 0;
    pthread_mutex_lock(&n->mu);
    if (n->q_n || n->n_fl) rc = pump(n); /* any thread's paced pieces */
    if (rc == MPI_SUCCESS) rc = MPI_Testall(k, req, &flag, MPI_STATUSES_IGNORE);
    flag = flag && !p->paced_left;
    if (rc != MPI_SUCCESS) pace_drop(n, p);
    pthread_mutex_unlock(&n->mu);
    if (rc != MPI_SUCCESS) {
      pending_release(p);
      return mpi_error(what, rc);
    }
    if (flag) break;
    const net_pacer *pc = t_pacer;
    bool patient = pc && !pc->urgent(pc->ctx);
    /* the clock: every 16th poll while polling hard (a poll of a message
     * that is almost there is cheaper than a clock read), every poll after */
    if (patient || (iter & 15) == 0 || waited - since >= 0.1) waited = now_ms() - start;
    if (deadline > 0 && (patient || (iter & 63) == 0) && start + waited > deadline) {
      char who[256];
      pace_cancel(n, p);
      timed_out(n, req, k, p->msgs, p->owner, who, sizeof who);
      pending_release(p);
      return set_error_code(TS_ERR_TIMEOUT,
                               "%s: process %d timed out after %.1f s waiting for process(es) %s (a peer died, hangs "
                               "or runs a different program; TESSEL_COLLECTIVE_TIMEOUT sets the limit)",
                               what, n->rank, timeout_ms / 1000.0, who);
    }
    if (patient) {
      since = -1;
      pc->nap(pc->ctx, NET_PATIENT_NAP_NS);
      continue;
    }
    if (since < 0) since = waited;
    pause_poll(waited - since);
  }
  pending_release(p);
  return 0;
}

/* Counts what crossed to other processes (other hosts, in a job of one
 * process per host). */
static void count_bytes(const net_msg *msgs, int count) {
  if (!TS_METRICS_ON()) return;
  int64_t sent = 0, received = 0;
  for (int i = 0; i < count; i++) *(msgs[i].send ? &sent : &received) += (int64_t)msgs[i].bytes;
  obs_count("NetBytesSent", sent);
  obs_count("NetBytesReceived", received);
  obs_count("NetMessages", count);
}

/* Posts the messages on comm, then polls them to completion. */
static int exchange(ts_net *n, MPI_Comm comm, net_msg *msgs, int count, int timeout_ms, const char *what) {
  net_pending p;
  if (post(n, comm, msgs, count, what, &p) < 0 || complete(&p, timeout_ms) < 0) return -1;
  count_bytes(msgs, count);
  return 0;
}

int net_exchange(ts_net *n, net_msg *msgs, int count, int timeout_ms, const char *what) {
  if (!n) return set_error("%s: no process group", what);
  return exchange(n, n->data, msgs, count, timeout_ms, what);
}

int net_exchange_ctl(ts_net *n, net_msg *msgs, int count, int timeout_ms, const char *what) {
  if (!n) return set_error("%s: no process group", what);
  return exchange(n, n->ctl, msgs, count, timeout_ms, what);
}

/* Tags on ctl: 1 the blocking all-gathers, 2 buffer reads (buffer.c), 3 the
 * non-blocking all-gathers (never matched against a blocking one another
 * thread may run meanwhile), 4 the link probe (net_set_hosts). */
enum { TAG_ALLGATHER = 1, TAG_ALLGATHER_ASYNC = 3, TAG_PROBE = 4 };

/* The link probe: PROBE_BYTES from another host's first process to
 * process 0 after a 1-byte request from it (not counted as traffic), the
 * best of PROBE_ROUNDS; 2 MiB is 17 ms at 1 Gbit/s, 1.7 ms at 10. */
enum { PROBE_BYTES = 2 << 20, PROBE_ROUNDS = 3 };
static const char *const probe_what = "comm_new: measuring the links between hosts";

static int probe_quiet(ts_net *n, net_msg *m, int count, int timeout_ms) {
  net_pending p;
  return post(n, n->ctl, m, count, probe_what, &p) < 0 || complete(&p, timeout_ms) < 0 ? -1 : 0;
}

/* Process 0: the rate from process q in Mbit/s (*mbps); q: answers. */
static int probe_pair(ts_net *n, int q, char *buf, int timeout_ms, double *mbps) {
  char token = 0;
  *mbps = 0;
  for (int r = 0; r < PROBE_ROUNDS; r++) {
    bool first = n->rank == 0;
    net_msg ask = {first ? q : 0, TAG_PROBE, first, &token, 1};
    net_msg data = {first ? q : 0, TAG_PROBE, !first, buf, PROBE_BYTES};
    double t0 = now_ms();
    if (first) {
      net_msg both[2] = {ask, data};
      if (probe_quiet(n, both, 2, timeout_ms) < 0) return -1;
    } else if (probe_quiet(n, &ask, 1, timeout_ms) < 0 || probe_quiet(n, &data, 1, timeout_ms) < 0) {
      return -1;
    }
    double rate = PROBE_BYTES * 8e-3 / (now_ms() - t0 + 1e-6);
    if (rate > *mbps) *mbps = rate;
  }
  return 0;
}

/* *mbps: the slowest link from another host's first process to process 0
 * (host[p]: the first process of p's host), measured by process 0 and
 * shared with every process (an all-gather: a collective call). */
static int probe_links(ts_net *n, const int *host, int timeout_ms, double *mbps) {
  char *buf = malloc(PROBE_BYTES);
  if (!buf) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", probe_what);
  double slowest = 0, rate = 0;
  int rc = 0;
  for (int q = 1; rc == 0 && q < n->size; q++) {
    if (host[q] != q || host[q] == host[0] || (n->rank != 0 && n->rank != q)) continue;
    rc = probe_pair(n, q, buf, timeout_ms, &rate);
    if (rc == 0 && n->rank == 0 && (slowest == 0 || rate < slowest)) slowest = rate;
  }
  free(buf);
  double *all = rc == 0 ? malloc((size_t)n->size * sizeof *all) : NULL;
  if (rc == 0 && !all) rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", probe_what);
  if (rc == 0) rc = net_allgather(n, &slowest, all, sizeof slowest, timeout_ms, probe_what);
  if (rc == 0) *mbps = all[0];
  free(all);
  return rc;
}

int net_set_hosts(ts_net *n, const int *host, int timeout_ms) {
  if (!n || atomic_exchange(&n->hosts_set, true)) return 0;
  const ts_env_config *env = env_config();
  bool any = false;
  for (int p = 0; p < n->size; p++) any |= host[p] != host[n->rank];
  int eager = env->net_eager;
  if (env->net_piece_set) eager = 0; /* one piece size everywhere: nothing to decide */
  double mbps = 0;
  if (eager < 0) {
    /* every process probes when any process has a peer on another host (a
     * collective call: the probe's all-gather needs all of them) */
    bool multi = false;
    for (int p = 0; p < n->size; p++) multi |= host[p] != host[0];
    if (!multi) return 0;
    if (probe_links(n, host, timeout_ms, &mbps) < 0) return -1;
    eager = mbps < NET_EAGER_BELOW_MBPS;
    if (TS_METRICS_ON()) obs_count("NetLinkMbps", (int64_t)(mbps + 0.5));
  }
  if (!eager || !any) return 0;
  bool *far = calloc((size_t)n->size, sizeof *far);
  if (!far) return 0; /* pieces stay whole: slower, still right */
  for (int p = 0; p < n->size; p++) far[p] = host[p] != host[n->rank];
  atomic_store(&n->far, far);
  return 0;
}

/* The 2 (size - 1) messages of an all-gather (NULL: out of memory);
 * copies mine into its own slot of all. */
static net_msg *allgather_msgs(ts_net *n, const void *mine, void *all, size_t bytes, int tag, int *count) {
  net_msg *m = malloc((size_t)2 * (size_t)n->size * sizeof *m);
  if (!m) return NULL;
  int k = 0;
  for (int p = 0; p < n->size; p++) {
    if (p == n->rank) continue;
    m[k++] = (net_msg){p, tag, true, (void *)mine, bytes};
    m[k++] = (net_msg){p, tag, false, (char *)all + (size_t)p * bytes, bytes};
  }
  memcpy((char *)all + (size_t)n->rank * bytes, mine, bytes);
  *count = k;
  return m;
}

int net_allgather(ts_net *n, const void *mine, void *all, size_t bytes, int timeout_ms, const char *what) {
  if (!n) {
    memcpy(all, mine, bytes);
    return 0;
  }
  int k = 0;
  net_msg *m = allgather_msgs(n, mine, all, bytes, TAG_ALLGATHER, &k);
  if (!m) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  int rc = exchange(n, n->ctl, m, k, timeout_ms, what);
  free(m);
  return rc;
}

/* Posts msgs on comm into a new pending (*out). */
static int start(ts_net *n, MPI_Comm comm, net_msg *msgs, int count, const char *what, net_pending **out) {
  *out = NULL;
  net_pending *p = malloc(sizeof *p);
  if (!p) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  if (post(n, comm, msgs, count, what, p) < 0) {
    free(p);
    return -1;
  }
  *out = p;
  return 0;
}

int net_allgather_start(ts_net *n, const void *mine, void *all, size_t bytes, const char *what,
                        net_pending **out) {
  *out = NULL;
  if (!n) return set_error("%s: no process group", what);
  int k = 0;
  net_msg *m = allgather_msgs(n, mine, all, bytes, TAG_ALLGATHER_ASYNC, &k);
  if (!m) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  if (start(n, n->ctl, m, k, what, out) < 0) {
    free(m);
    return -1;
  }
  (*out)->owns_msgs = true;
  return 0;
}

int net_start(ts_net *n, net_msg *msgs, int count, const char *what, net_pending **out) {
  *out = NULL;
  if (!n) return set_error("%s: no process group", what);
  return start(n, n->data, msgs, count, what, out);
}

int net_wait(net_pending *p, int timeout_ms) {
  if (!p) return 0;
  int rc = complete(p, timeout_ms);
  if (rc == 0) count_bytes(p->msgs, p->count);
  if (p->owns_msgs) free(p->msgs);
  free(p);
  return rc;
}

void net_cancel(net_pending *p) {
  if (!p) return;
  char who[256];
  pace_cancel(p->n, p);
  timed_out(p->n, p->req, p->k, p->msgs, p->owner, who, sizeof who);
  pending_release(p);
  if (p->owns_msgs) free(p->msgs);
  free(p);
}

void net_abort(ts_net *n, int code) {
  fflush(stdout);
  fflush(stderr);
  if (n) MPI_Abort(MPI_COMM_WORLD, code);
}

#else /* built without MPI: always alone */

ts_net *net_world(bool *failed) {
  *failed = false;
  if (env_config()->mpi == 1) {
    *failed = true;
    set_error("net: TESSEL_MPI=1 but this tessel was built without MPI");
  }
  return NULL;
}
void net_set_pacer(const net_pacer *p) { (void)p; }
int net_set_hosts(ts_net *n, const int *host, int timeout_ms) { return (void)n, (void)host, (void)timeout_ms, 0; }
int net_rank(const ts_net *n) { return (void)n, 0; }
int net_size(const ts_net *n) { return (void)n, 1; }
int net_tag_ub(const ts_net *n) { return (void)n, 32767; }
int net_exchange(ts_net *n, net_msg *msgs, int count, int timeout_ms, const char *what) {
  (void)n, (void)msgs, (void)count, (void)timeout_ms;
  return set_error("%s: no process group (built without MPI)", what);
}
int net_exchange_ctl(ts_net *n, net_msg *msgs, int count, int timeout_ms, const char *what) {
  return net_exchange(n, msgs, count, timeout_ms, what);
}
int net_allgather(ts_net *n, const void *mine, void *all, size_t bytes, int timeout_ms, const char *what) {
  (void)n, (void)timeout_ms, (void)what;
  memcpy(all, mine, bytes);
  return 0;
}
int net_allgather_start(ts_net *n, const void *mine, void *all, size_t bytes, const char *what,
                        net_pending **out) {
  (void)n, (void)mine, (void)all, (void)bytes;
  *out = NULL;
  return set_error("%s: no process group (built without MPI)", what);
}
int net_start(ts_net *n, net_msg *msgs, int count, const char *what, net_pending **out) {
  (void)n, (void)msgs, (void)count;
  *out = NULL;
  return set_error("%s: no process group (built without MPI)", what);
}
int net_wait(net_pending *p, int timeout_ms) { return (void)p, (void)timeout_ms, 0; }
void net_cancel(net_pending *p) { (void)p; }
void net_abort(ts_net *n, int code) {
  (void)n, (void)code;
  fflush(stdout);
  fflush(stderr);
}
#endif
