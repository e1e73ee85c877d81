/* parse.h — parsing of small texts (util/parse.c), shared by the library and
 * the CLI (a tool-facing header: util/ is the one internal layer tools may use). */
#ifndef TS_UTIL_PARSE_H
#define TS_UTIL_PARSE_H

#include <stdint.h>

/* Parses a comma-separated list of integers in [min, max] ("2,4"; "" is the
 * empty list) into out (at most cap values). `what` names the list in errors
 * ("mesh shape"). Returns the count, or -1 with the error set. */
int util_parse_int_list(const char *text, const char *what, int64_t min, int64_t max,
                        int64_t *out, int cap);

#endif
