/* mesh.c — the logical device mesh (PyTorch/XLA's Mesh): shape, axis names,
 * device ids laid out row-major, with the checks Mesh.__init__ asserts turned
 * into errors that name the bad value; and the CLI text forms of a mesh. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>  // snprintf
#include <stdlib.h>
#include <string.h>

#include "mesh/mesh.h"

// A name must survive the CLI spec syntax: no separators, not the None keyword.
static int check_name(const char *name, int axis) {
  if (!name || name[0] == '\0') return set_error("mesh axis %d has an empty name", axis);
  if (strlen(name) >= TS_MESH_MAX_NAME)
    return set_error("mesh axis name '%s' is longer than %d bytes", name, TS_MESH_MAX_NAME - 1);
  if (strcmp(name, "None") == 0)
    return set_error("mesh axis %d cannot be called 'None' (it means replicated in a spec)", axis);
  for (const char *c = name; *c; c++)
    if (*c == ',' || *c == '+' || isspace((unsigned char)*c))
      return set_error("mesh axis name '%s' contains '%c'; names cannot contain ',', '+' or spaces",
                          name, *c);
  return 0;
}

ts_mesh *ts_mesh_new(int rank, const int64_t *shape, const char *const *axis_names,
                     int64_t ndevices, const int *device_ids) {
  if (rank < 1 || rank > TS_MESH_MAX_RANK) {
    set_error("mesh rank %d is out of range (1..%d)", rank, TS_MESH_MAX_RANK);
    return NULL;
  }
  if (!shape) {
    set_error("mesh: no shape given");
    return NULL;
  }
  int64_t n = 1;
  for (int a = 0; a < rank; a++) {
    if (shape[a] < 1) {
      set_error("mesh axis %d has size %lld; sizes must be >= 1", a, (long long)shape[a]);
      return NULL;
    }
    if (shape[a] > ((int64_t)1 << 30) / n) {
      set_error("mesh of more than 2^30 devices");
      return NULL;
    }
    n *= shape[a];
  }
  if (axis_names) {
    for (int a = 0; a < rank; a++) {
      if (check_name(axis_names[a], a) < 0) return NULL;
      for (int b = 0; b < a; b++)
        if (strcmp(axis_names[a], axis_names[b]) == 0) {
          set_error("mesh axis name '%s' is used twice (axes %d and %d)", axis_names[a], b, a);
          return NULL;
        }
    }
  }
  if (device_ids && ndevices != n) {
    set_error("mesh shape has %lld devices but %lld device ids were given", (long long)n,
                 (long long)ndevices);
    return NULL;
  }
  ts_mesh *m = calloc(1, sizeof *m);
  int *ids = malloc((size_t)n * sizeof *ids);
  unsigned char *seen = calloc((size_t)n, 1);
  if (!m || !ids || !seen) {
    free(m), free(ids), free(seen);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "mesh: out of memory for %lld devices", (long long)n);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) {
    int d = device_ids ? device_ids[i] : (int)i;
    if (d < 0 || d >= n) {
      set_error("mesh device id %d (position %lld) is out of range: ids must be 0..%lld",
                   d, (long long)i, (long long)n - 1);
      goto fail;
    }
    if (seen[d]) {
      set_error("mesh device id %d appears twice in the device ids", d);
      goto fail;
    }
    seen[d] = 1;
    ids[i] = d;
  }
  free(seen);
  m->rank = rank;
  memcpy(m->shape, shape, (size_t)rank * sizeof *shape);
  m->named = axis_names != NULL;
  for (int a = 0; a < rank && axis_names; a++)
    snprintf(m->names[a], sizeof m->names[a], "%s", axis_names[a]);
  m->ndevices = n;
  m->device_ids = ids;
  return m;
fail:
  free(m), free(ids), free(seen);
  return NULL;
}

ts_mesh *ts_mesh_parse(const char *shape, const char *axis_names, const char *device_ids) {
  int64_t dims[TS_MESH_MAX_RANK + 1];
  int rank = util_parse_int_list(shape, "mesh shape", 1, INT32_MAX, dims, TS_MESH_MAX_RANK + 1);
  if (rank < 0) return NULL;
  if (rank < 1 || rank > TS_MESH_MAX_RANK) {
    set_error("mesh shape \"%s\" has rank %d; expected 1..%d", shape, rank, TS_MESH_MAX_RANK);
    return NULL;
  }
  // Names: split a copy in place at the commas.
  char names_buf[TS_MESH_MAX_RANK * TS_MESH_MAX_NAME + TS_MESH_MAX_RANK];
  const char *names[TS_MESH_MAX_RANK + 1];
  if (axis_names) {
    if (strlen(axis_names) >= sizeof names_buf) {
      set_error("axis names \"%.40s...\" are too long", axis_names);
      return NULL;
    }
    strcpy(names_buf, axis_names);
    int k = 0;
    char *p = names_buf;
    for (;;) {
      char *comma = strchr(p, ',');
      if (comma) *comma = '\0';
      if (k == TS_MESH_MAX_RANK + 1) break;
      names[k++] = p;
      if (!comma) break;
      p = comma + 1;
    }
    bool more = k == TS_MESH_MAX_RANK + 1;
    if (k != rank) {
      set_error("axis names \"%s\" list %s%d name%s but the mesh shape \"%s\" has rank %d",
                   axis_names, more ? "more than " : "", more ? k - 1 : k,
                   (more ? k - 1 : k) == 1 ? "" : "s", shape, rank);
      return NULL;
    }
  }
  int *ids = NULL;
  int64_t nids = 0;
  if (device_ids) {
    int64_t n = 1;
    for (int a = 0; a < rank; a++) n *= dims[a];
    if (n > ((int64_t)1 << 30)) {
      set_error("mesh shape \"%s\" has more than 2^30 devices", shape);
      return NULL;
    }
    int64_t *vals = malloc((size_t)(n + 1) * sizeof *vals);
    ids = malloc((size_t)(n + 1) * sizeof *ids);
    if (!vals || !ids) {
      free(vals), free(ids);
      set_error_code(TS_ERR_OUT_OF_MEMORY, "mesh: out of memory for %lld device ids", (long long)n);
      return NULL;
    }
    int k = util_parse_int_list(device_ids, "device ids", 0, INT32_MAX, vals, (int)n + 1);
    if (k >= 0 && k != n) {
      set_error("device ids \"%s\" list %s%d ids but the mesh shape \"%s\" has %lld devices",
                   device_ids, k > n ? "more than " : "", k > n ? (int)n : k, shape, (long long)n);
      k = -1;
    }
    for (int i = 0; i < k; i++) ids[i] = (int)vals[i];
    free(vals);
    if (k < 0) {
      free(ids);
      return NULL;
    }
    nids = k;
  }
  ts_mesh *m = ts_mesh_new(rank, dims, axis_names ? names : NULL, nids, ids);
  free(ids);
  return m;
}

void ts_mesh_free(ts_mesh *m) {
  if (!m) return;
  free(m->device_ids);
  free(m);
}

ts_mesh *spmd_mesh_clone(const ts_mesh *m) {
  ts_mesh *c = malloc(sizeof *c);
  int *ids = malloc((size_t)m->ndevices * sizeof *ids);
  if (!c || !ids) {
    free(c), free(ids);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "mesh: out of memory copying %lld device ids", (long long)m->ndevices);
    return NULL;
  }
  *c = *m;
  memcpy(ids, m->device_ids, (size_t)m->ndevices * sizeof *ids);
  c->device_ids = ids;
  return c;
}

int ts_mesh_rank(const ts_mesh *m) { return m->rank; }

int64_t ts_mesh_axis_size(const ts_mesh *m, int axis) {
  return axis >= 0 && axis < m->rank ? m->shape[axis] : 0;
}

int64_t ts_mesh_num_devices(const ts_mesh *m) { return m->ndevices; }

const char *ts_mesh_axis_name(const ts_mesh *m, int axis) {
  return m->named && axis >= 0 && axis < m->rank ? m->names[axis] : NULL;
}

int ts_mesh_axis_index(const ts_mesh *m, const char *name) {
  if (m->named)
    for (int a = 0; a < m->rank; a++)
      if (strcmp(m->names[a], name) == 0) return a;
  if (!m->named) return set_error("mesh has no axis names; axis '%s' must be given by index", name);
  char list[TS_MESH_MAX_RANK * (TS_MESH_MAX_NAME + 2)] = "";
  for (int a = 0; a < m->rank; a++) {
    if (a) strcat(list, ", ");
    strcat(list, m->names[a]);
  }
  return set_error("mesh has no axis '%s' (axes: %s)", name, list);
}

const int *ts_mesh_device_ids(const ts_mesh *m) { return m->device_ids; }

const char *spmd_axis_label(const ts_mesh *m, int axis, char *buf, size_t len) {
  if (m->named && axis >= 0 && axis < m->rank)
    snprintf(buf, len, "%s", m->names[axis]);
  else
    snprintf(buf, len, "%d", axis);
  return buf;
}
