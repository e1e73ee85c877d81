/* train_stop.c — stopping `tessel train` cleanly on SIGINT or SIGTERM
 * (train_stop.h). The handler only records the signal; the step loop asks
 * after every step (in a job of several processes, agreeing one step behind). */
#include "train_stop.h"

#include <signal.h>
#include <stdio.h>  // snprintf
#include <string.h> // memset, strlen
#include <unistd.h> // write, gethostname

static volatile sig_atomic_t stop_signal;  /* the first SIGINT/SIGTERM, 0 until one came */
static volatile sig_atomic_t announce_stop; /* print the notice (the process that prints) */
static ts_client_max_req *pending; /* the agreement started after the last step (several processes) */
/* In a job of several processes, SIGTERM comes from the launcher: mpirun ends
 * every process when it lost one (a dead process, a host it cannot reach) as
 * well as on an interrupt, and may kill this one a second later while it waits
 * in a collective for the lost one: the notice says so, and names this process
 * and its host (written here, before any signal: the handler only writes it). */
static char job_notice[320];

static void on_signal(int sig) {
  if (stop_signal) { /* the second one: the user wants out now */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  stop_signal = sig;
  if (announce_stop) { /* write(2): async-signal-safe, unlike stdio */
    static const char msg[] = "\ntessel train: interrupted: stopping after this step and saving the outputs "
                              "(again to quit at once)\n";
    static const char msg_job[] = "\ntessel train: interrupted: stopping after the next step and saving the "
                                  "outputs (again to quit at once)\n";
    const char *m = job_notice[0] ? msg_job : msg;
    if (sig == SIGTERM && job_notice[0]) m = job_notice;
    ssize_t w = write(STDERR_FILENO, m, strlen(m));
    (void)w;
  }
}

void train_stop_install(bool announce, int rank, int nproc) {
  announce_stop = announce;
  job_notice[0] = '\0';
  char host[64] = "?";
  if (nproc > 1 && gethostname(host, sizeof host - 1) == 0) host[sizeof host - 1] = '\0';
  if (nproc > 1)
    snprintf(job_notice, sizeof job_notice,
             "\ntessel train: process %d of %d (host %s): SIGTERM from the launcher: the job is ending (a process "
             "or host was lost, named by the launcher's message, or the job was interrupted); stopping after the "
             "next step\n", rank, nproc, host);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART; /* reads, writes and waits in progress go on */
  /* a signal the caller ignores stays ignored (nohup, a background job of a
   * script: the shell set SIGINT to SIG_IGN for it) */
  int sigs[2] = {SIGINT, SIGTERM};
  for (int k = 0; k < 2; k++) {
    struct sigaction old;
    if (sigaction(sigs[k], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sigs[k], &sa, NULL);
  }
}

/* The agreement started after the previous step, finished: its signal (0
 * when none is pending), or -1. */
static int finish_pending(void) {
  int64_t sig = 0;
  ts_client_max_req *req = pending;
  pending = NULL;
  if (req && ts_client_max_finish(req, &sig) < 0) return -1;
  return (int)sig;
}

int train_stop_requested(ts_client *c) {
  int agreed = finish_pending();
  if (agreed < 0) return -1;
  int64_t sig = stop_signal;
  /* Why a collective: mpirun delivers the signal to each rank at a slightly
   * different moment, possibly in different steps; the ranks must stop
   * after the same one, or the others would wait in its collectives. */
  if (ts_client_process_count(c) > 1 && ts_client_max(c, sig, &sig) < 0) return -1;
  return agreed > sig ? agreed : (int)sig;
}

int train_stop_after_step(ts_client *c) {
  if (ts_client_process_count(c) == 1) return stop_signal;
  /* One step behind: the agreement started after the previous step had this
   * whole step to arrive, so waiting for it costs nothing; the blocking
   * 8-byte all-gather it replaces waited every step behind the collectives
   * the step left in flight (over TCP, in order: 18-28 ms at 1 Gbit/s). */
  int agreed = finish_pending();
  if (agreed != 0) return agreed;
  return ts_client_max_start(c, stop_signal, &pending) < 0 ? -1 : 0;
}
