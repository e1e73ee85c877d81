/* parse.c — parsing of small texts shared by the library and the CLI. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "util/error.h"
#include "util/parse.h"

int util_parse_int_list(const char *text, const char *what, int64_t min, int64_t max,
                        int64_t *out, int cap) {
  if (!text) return set_error("%s: no list given", what);
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '\0') return 0;
  int n = 0;
  for (;;) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno != 0)
      return set_error("%s \"%s\": entry %d is not an integer", what, text, n);
    while (isspace((unsigned char)*end)) end++;
    if (*end != ',' && *end != '\0')
      return set_error("%s \"%s\": entry %d is not an integer", what, text, n);
    if (v < min || v > max)
      return set_error("%s \"%s\": entry %d is %lld, expected %lld..%lld", what, text, n, v,
                          (long long)min, (long long)max);
    if (n == cap) return set_error("%s \"%s\": more than %d entries", what, text, cap);
    out[n++] = (int64_t)v;
    if (*end == '\0') return n;
    p = end + 1;
  }
}
