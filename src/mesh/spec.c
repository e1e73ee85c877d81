/* spec.c — partition specs: building them entry by entry, parsing the CLI
 * syntax ("data+model,None"), and checking one against a mesh the way
 * PyTorch/XLA's _get_op_sharding_args asserts (axes in range, each at most once). */
#include <ctype.h>
#include <stdio.h>  // snprintf
#include <stdlib.h>
#include <string.h>


#include "mesh/mesh.h"

int ts_partition_spec_init(ts_partition_spec *spec, int rank) {
  if (rank < 0 || rank > TS_MAX_RANK)
    return set_error("partition spec rank %d is out of range (0..%d)", rank, TS_MAX_RANK);
  memset(spec, 0, sizeof *spec);
  spec->rank = rank;
  return 0;
}

int ts_partition_spec_add_axis(ts_partition_spec *spec, int dim, int mesh_axis) {
  if (dim < 0 || dim >= spec->rank)
    return set_error("partition spec entry %d does not exist (the spec has %d entries)", dim,
                        spec->rank);
  if (mesh_axis < 0 || mesh_axis >= TS_MESH_MAX_RANK)
    return set_error("partition spec entry %d: mesh axis %d is out of range (0..%d)", dim,
                        mesh_axis, TS_MESH_MAX_RANK - 1);
  if (spec->naxes[dim] == TS_MESH_MAX_RANK)
    return set_error("partition spec entry %d already has %d mesh axes", dim, TS_MESH_MAX_RANK);
  spec->axes[dim][spec->naxes[dim]++] = mesh_axis;
  return 0;
}

const char *spmd_spec_str(const ts_mesh *m, const ts_partition_spec *spec, char *buf, size_t len) {
  size_t n = 0;
  n += (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < spec->rank && n < len; d++) {
    if (d) n += (size_t)snprintf(buf + n, len - n, ", ");
    if (n >= len) break;
    if (spec->naxes[d] == 0) n += (size_t)snprintf(buf + n, len - n, "None");
    for (int k = 0; k < spec->naxes[d] && n < len; k++) {
      char label[TS_MESH_MAX_NAME];
      n += (size_t)snprintf(buf + n, len - n, "%s%s", k ? "+" : "",
                            spmd_axis_label(m, spec->axes[d][k], label, sizeof label));
    }
  }
  if (n < len) snprintf(buf + n, len - n, ")");
  return buf;
}

int spmd_spec_check(const ts_mesh *m, const ts_partition_spec *spec) {
  char text[256], label[TS_MESH_MAX_NAME];
  if (spec->rank < 0 || spec->rank > TS_MAX_RANK)
    return set_error("partition spec rank %d is out of range (0..%d)", spec->rank, TS_MAX_RANK);
  int used_by[TS_MESH_MAX_RANK];
  for (int a = 0; a < TS_MESH_MAX_RANK; a++) used_by[a] = -1;
  for (int d = 0; d < spec->rank; d++) {
    if (spec->naxes[d] < 0 || spec->naxes[d] > TS_MESH_MAX_RANK)
      return set_error("partition spec entry %d has %d mesh axes (0..%d allowed)", d,
                          spec->naxes[d], TS_MESH_MAX_RANK);
    for (int k = 0; k < spec->naxes[d]; k++) {
      int a = spec->axes[d][k];
      if (a < 0 || a >= m->rank)
        return set_error("partition spec entry %d uses mesh axis %d but the mesh has rank %d",
                            d, a, m->rank);
      if (used_by[a] >= 0)
        return set_error("mesh axis '%s' is used twice in partition spec %s (entries %d and %d)",
                            spmd_axis_label(m, a, label, sizeof label),
                            spmd_spec_str(m, spec, text, sizeof text), used_by[a], d);
      used_by[a] = d;
    }
  }
  return 0;
}

// Copies [b, e) of s without surrounding spaces into out (cap bytes).
static void trimmed(const char *b, const char *e, char *out, size_t cap) {
  while (b < e && isspace((unsigned char)*b)) b++;
  while (e > b && isspace((unsigned char)e[-1])) e--;
  size_t n = (size_t)(e - b) < cap - 1 ? (size_t)(e - b) : cap - 1;
  memcpy(out, b, n);
  out[n] = '\0';
}

// One mesh axis token: a name of m, else a decimal index.
static int parse_axis(const ts_mesh *m, const char *text, int entry, const char *tok) {
  if (tok[0] == '\0')
    return set_error("partition spec \"%s\": entry %d has an empty axis", text, entry);
  if (strcmp(tok, "None") == 0)
    return set_error("partition spec \"%s\": entry %d mixes None with mesh axes", text, entry);
  if (m->named)
    for (int a = 0; a < m->rank; a++)
      if (strcmp(m->names[a], tok) == 0) return a;
  bool digits = true;
  for (const char *c = tok; *c; c++) digits = digits && isdigit((unsigned char)*c);
  if (digits && strlen(tok) < 4) {
    int a = atoi(tok);
    if (a >= m->rank)
      return set_error("partition spec \"%s\": entry %d uses mesh axis %d but the mesh has rank %d",
                          text, entry, a, m->rank);
    return a;
  }
  if (digits)
    return set_error("partition spec \"%s\": entry %d uses mesh axis %s but the mesh has rank %d",
                        text, entry, tok, m->rank);
  ts_mesh_axis_index(m, tok);  // sets "mesh has no axis 'x' (axes: ...)"
  char why[512];
  snprintf(why, sizeof why, "%s", ts_last_error());
  return set_error("partition spec \"%s\": entry %d: %s", text, entry, why);
}

int ts_partition_spec_parse(const ts_mesh *m, const char *text, ts_partition_spec *out) {
  if (!text) return set_error("partition spec: no text given");
  ts_partition_spec spec;
  ts_partition_spec_init(&spec, 0);
  char tok[TS_MESH_MAX_NAME + 8];
  trimmed(text, text + strlen(text), tok, sizeof tok);
  if (tok[0] != '\0') {  // "" is the rank-0 spec
    const char *p = text;
    for (;;) {
      const char *end = strchr(p, ',');
      if (!end) end = p + strlen(p);
      int d = spec.rank;
      if (d == TS_MAX_RANK)
        return set_error("partition spec \"%s\" has more than %d entries", text, TS_MAX_RANK);
      spec.rank++;
      trimmed(p, end, tok, sizeof tok);
      if (tok[0] == '\0')
        return set_error("partition spec \"%s\": entry %d is empty (write None for a "
                            "replicated dim)", text, d);
      if (strcmp(tok, "None") != 0) {
        for (const char *q = p;;) {  // axes joined by '+'; "a+" leaves an empty last axis
          const char *plus = memchr(q, '+', (size_t)(end - q));
          if (!plus) plus = end;
          trimmed(q, plus, tok, sizeof tok);
          int a = parse_axis(m, text, d, tok);
          if (a < 0) return -1;
          if (spec.naxes[d] == TS_MESH_MAX_RANK)
            return set_error("partition spec \"%s\": entry %d has more than %d axes", text, d,
                                TS_MESH_MAX_RANK);
          spec.axes[d][spec.naxes[d]++] = a;
          if (plus == end) break;
          q = plus + 1;
        }
      }
      if (*end == '\0') break;
      p = end + 1;
    }
  }
  if (spmd_spec_check(m, &spec) < 0) return -1;
  *out = spec;
  return 0;
}
