/* train_stop.c — stopping `tessel train` cleanly on SIGINT or SIGTERM
 * (train_stop.h). The handler only records the signal; the step loop asks
 * after every step. */
#include "train_stop.h"

#include <signal.h>
#include <stdio.h>  // snprintf
#include <string.h> // memset, strlen
#include <unistd.h> // write, gethostname

static volatile sig_atomic_t stop_signal;  /* the first SIGINT/SIGTERM, 0 until one came */
static volatile sig_atomic_t announce_stop; /* print the notice (the process that prints) */
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
    ssize_t w = sig == SIGTERM && job_notice[0] ? write(STDERR_FILENO, job_notice, strlen(job_notice))
                                                : write(STDERR_FILENO, msg, sizeof msg - 1);
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
             "or host was lost, named by the launcher's message, or the job was interrupted); stopping after this "
             "step\n", rank, nproc, host);
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

int train_stop_requested(ts_client *c) {
  int64_t sig = stop_signal;
  /* Why a collective: mpirun delivers the signal to each rank at a slightly
   * different moment, possibly in different steps; the ranks must stop
   * after the same one, or the others would wait in its collectives. One
   * 8-byte all-gather per step (nothing alone). */
  if (ts_client_process_count(c) > 1 && ts_client_max(c, sig, &sig) < 0) return -1;
  return (int)sig;
}
