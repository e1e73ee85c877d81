/* args.c — typed flag parsing with errors that name the flag and value. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>  // fprintf, vfprintf
#include <stdlib.h> // strtoll, strtod
#include <string.h>

static int cli_rank = -1; /* several processes: errors name the rank */

void cli_set_rank(int rank) { cli_rank = rank; }

void cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tessel%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  if (cli_rank >= 0) fprintf(stderr, "rank %d: ", cli_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

int cli_flag(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **value) {
  const char *a = argv[*i];
  size_t n = strlen(flag);
  if (strncmp(a, flag, n) != 0) return 0;
  if (a[n] == '=') {
    *value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) {
    cli_error(cmd, "%s: missing value", flag);
    return -1;
  }
  *value = argv[++*i];
  return 1;
}

int cli_parse_int(const char *cmd, const char *flag, const char *s, int64_t min, int64_t max,
                  const char *what, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*s == '\0' || *end != '\0' || (errno != 0 && errno != ERANGE) || v < min) {
    cli_error(cmd, "%s: expected %s, got '%s'", flag, what, s);
    return -1;
  }
  if (errno == ERANGE || v > max) { /* a number, too large: say how large it may be */
    cli_error(cmd, "%s: expected %s, at most %lld; got '%s'", flag, what, (long long)max, s);
    return -1;
  }
  *out = (int64_t)v;
  return 0;
}

int cli_parse_double(const char *cmd, const char *flag, const char *s, double min, double max,
                     const char *what, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !isfinite(v) || v < min || (errno != 0 && v <= max)) {
    cli_error(cmd, "%s: expected %s, got '%s'", flag, what, s);
    return -1;
  }
  if (v > max) { /* a number, too large: say how large it may be */
    cli_error(cmd, "%s: expected %s, at most %g; got '%s'", flag, what, max, s);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_parse_choice(const char *cmd, const char *flag, const char *s, const char *kind,
                     const char *const *choices, int *out) {
  for (int k = 0; choices[k]; k++) {
    if (strcmp(s, choices[k]) == 0) {
      *out = k;
      return 0;
    }
  }
  char valid[256] = "";
  for (int k = 0; choices[k]; k++) {
    if (k) strncat(valid, ", ", sizeof valid - strlen(valid) - 1);
    strncat(valid, choices[k], sizeof valid - strlen(valid) - 1);
  }
  cli_error(cmd, "%s: unknown %s '%s' (valid: %s)", flag, kind, s, valid);
  return -1;
}
