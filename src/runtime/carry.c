/* carry.c — collectives that end after the run that started them (rt.h
 * rt_carry). A run may leave its trailing started collectives in flight
 * when they write only into the caller's buffers (the new weights that
 * ZeRO-1's all-gathers write at the end of a step): the next step's forward
 * pass then overlaps them, and whatever touches that memory first waits —
 * a node of a later run that reads or writes it (cpu_device.c), the plan's
 * copies (execute.c), a host read, write, reshard or free of the buffer
 * (buffer.c). Waits are by ticket, each entry's alone where it is a range
 * that is touched (rt_carry_wait_range: two lanes between hosts end out of
 * start order), every entry's at once otherwise. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "runtime/rt.h"
#include "util/error.h"

typedef struct {
  uintptr_t lo, hi; /* [lo, hi) written by the collective */
  int64_t ticket;
} carry_entry;

struct rt_carry {
  pthread_mutex_t mu;
  struct ts_comm *comm;
  int device;
  carry_entry *v;
  _Atomic int n; /* entries; read without the lock to skip an empty carry */
  int cap;
};

rt_carry *rt_carry_new(struct ts_comm *comm, int device) {
  rt_carry *k = calloc(1, sizeof *k);
  if (!k) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "client: out of memory");
    return NULL;
  }
  pthread_mutex_init(&k->mu, NULL);
  k->comm = comm;
  k->device = device;
  return k;
}

void rt_carry_free(rt_carry *k) {
  if (!k) return;
  rt_carry_wait_all(k);
  pthread_mutex_destroy(&k->mu);
  free(k->v);
  free(k);
}

int rt_carry_add(rt_carry *k, const void *p, size_t bytes, int64_t ticket) {
  pthread_mutex_lock(&k->mu);
  if (k->n == k->cap) {
    int cap = k->cap ? 2 * k->cap : 16;
    carry_entry *v = realloc(k->v, (size_t)cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&k->mu);
      return set_error_code(TS_ERR_OUT_OF_MEMORY, "execute: out of memory");
    }
    k->v = v;
    k->cap = cap;
  }
  k->v[k->n++] = (carry_entry){(uintptr_t)p, (uintptr_t)p + bytes, ticket};
  pthread_mutex_unlock(&k->mu);
  return 0;
}

/* Drops the entries whose collectives ended; under mu. */
static void drop_ended(rt_carry *k) {
  int m = 0;
  for (int i = 0; i < k->n; i++)
    if (!comm_ticket_ended(k->comm, k->device, k->v[i].ticket)) k->v[m++] = k->v[i];
  k->n = m;
}

/* Each collective that writes the range is awaited alone (comm_wait_alone),
 * not with every one started before it: between hosts a small one runs on
 * a lane of its own, and an update chain hands a large gather off before
 * the small ones the next step reads first (the CNN's fc1 before conv1's
 * and conv2's under SPMD data=2: waiting in start order held the next
 * step's first convolution for fc1's 20 ms gather at 1 Gbit/s). */
int rt_carry_wait_range(rt_carry *k, const void *p, size_t bytes) {
  if (!k || !atomic_load_explicit(&k->n, memory_order_relaxed)) return 0;
  uintptr_t lo = (uintptr_t)p, hi = lo + (bytes ? bytes : 1);
  pthread_mutex_lock(&k->mu);
  int rc = 0;
  bool waited = false;
  for (int i = 0; i < k->n && rc == 0; i++)
    if (k->v[i].lo < hi && lo < k->v[i].hi) {
      rc = comm_wait_alone(k->comm, k->device, k->v[i].ticket);
      waited = true;
    }
  if (waited) drop_ended(k);
  pthread_mutex_unlock(&k->mu);
  return rc;
}

int rt_carry_wait_all(rt_carry *k) {
  if (!rt_carry_pending(k)) return 0;
  pthread_mutex_lock(&k->mu);
  int64_t t = -1;
  for (int i = 0; i < k->n; i++)
    if (k->v[i].ticket > t) t = k->v[i].ticket;
  int rc = t >= 0 ? comm_wait_ticket(k->comm, k->device, t) : 0;
  k->n = 0;
  pthread_mutex_unlock(&k->mu);
  return rc;
}

bool rt_carry_pending(const rt_carry *k) { return k && atomic_load_explicit(&k->n, memory_order_relaxed); }

void rt_carry_ended(rt_carry *k) {
  if (!rt_carry_pending(k)) return;
  pthread_mutex_lock(&k->mu);
  k->n = 0;
  pthread_mutex_unlock(&k->mu);
}

int rt_client_settle(ts_client *c, const ts_buffer *b) {
  int rc = 0;
  for (int d = c->first_local; c->carry && d < c->first_local + c->num_local; d++) {
    rt_carry *k = c->carry[d - c->first_local];
    if (!rt_carry_pending(k)) continue;
    if (b) {
      if (d < b->n_shards && rt_carry_wait_range(k, b->shards[d], b->shard_bytes) < 0) rc = -1;
    } else if (rt_carry_wait_all(k) < 0) {
      rc = -1;
    }
  }
  return rc;
}
