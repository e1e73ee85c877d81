/* args.h — command-line flag parsing for the tessel tool: "--flag value" and
 * "--flag=value" forms, typed values, and errors that name the flag and the
 * bad value. Every parser prints its own message to stderr and returns -1; the
 * caller exits with code 2 (usage error). */
#ifndef TESSEL_TOOLS_ARGS_H
#define TESSEL_TOOLS_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1  /* runtime failure (data, compile, execute) */
#define CLI_EXIT_USAGE 2 /* bad flag or value */

/* Prints "tessel <cmd>: <message>" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* In a job of several processes: errors say "rank N: " after the command. */
void cli_set_rank(int rank);

/* If argv[*i] is `flag` or `flag=...`, stores its value in *value (the next
 * argument, advancing *i, or the text after '=') and returns 1; returns 0 if
 * argv[*i] is another flag, -1 (after printing) if the value is missing. */
int cli_flag(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **value);

/* Integer in [min, max]; `what` names the expectation ("a positive integer").
 * A number above max is reported with the bound ("at most 2147483647"). */
int cli_parse_int(const char *cmd, const char *flag, const char *s, int64_t min, int64_t max,
                  const char *what, int64_t *out);
/* Finite number in [min, max] (above max: the bound is reported). */
int cli_parse_double(const char *cmd, const char *flag, const char *s, double min, double max,
                     const char *what, double *out);
/* Index of s in the NULL-terminated list; the error lists the valid names,
 * e.g. "--model: unknown model 'resnet' (valid: mlp, cnn)". */
int cli_parse_choice(const char *cmd, const char *flag, const char *s, const char *kind,
                     const char *const *choices, int *out);

#endif
