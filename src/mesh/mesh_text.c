/* mesh_text.c — meshes from the CLI's one-string form "data=4,model=2". */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/mesh.h"
#include "tessel/runtime.h" /* TS_MAX_DEVICES */

ts_mesh *ts_mesh_from_text(const char *text) {
  if (!text || !*text) {
    set_error("mesh: empty mesh text (expected e.g. \"data=4,model=2\")");
    return NULL;
  }
  char names[TS_MESH_MAX_RANK][TS_MESH_MAX_NAME];
  const char *ptrs[TS_MESH_MAX_RANK];
  int64_t shape[TS_MESH_MAX_RANK];
  int rank = 0;
  double devices = 1; /* the product of the sizes so far (exact up to 2^53) */
  const char *p = text;
  while (*p) {
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (rank == TS_MESH_MAX_RANK) {
      set_error("mesh: '%s' has more than %d axes", text, TS_MESH_MAX_RANK);
      return NULL;
    }
    if (!eq || eq == p || (size_t)(eq - p) >= TS_MESH_MAX_NAME) {
      set_error("mesh: '%.*s' in '%s' is not name=size", (int)(end - p), p, text);
      return NULL;
    }
    memcpy(names[rank], p, (size_t)(eq - p));
    names[rank][eq - p] = '\0';
    char *num_end;
    errno = 0;
    long long v = strtoll(eq + 1, &num_end, 10);
    if (num_end != end || num_end == eq + 1 || v < 1) {
      set_error("mesh: size of axis '%s' in '%s' is not an integer >= 1", names[rank], text);
      return NULL;
    }
    if (errno == ERANGE || v > TS_MAX_DEVICES) {
      set_error("mesh: axis '%s' in '%s' has %s devices; a mesh has at most %d devices in all (TS_MAX_DEVICES)",
                   names[rank], text, errno == ERANGE ? "too many" : eq + 1, TS_MAX_DEVICES);
      return NULL;
    }
    devices *= (double)v;
    shape[rank] = v;
    ptrs[rank] = names[rank];
    rank++;
    p = *end ? end + 1 : end;
    if (*end && !*p) {
      set_error("mesh: '%s' ends with a comma", text);
      return NULL;
    }
  }
  if (devices > TS_MAX_DEVICES) {
    set_error("mesh: '%s' has %.0f devices; a mesh has at most %d devices in all (TS_MAX_DEVICES)", text,
                 devices, TS_MAX_DEVICES);
    return NULL;
  }
  return ts_mesh_new(rank, shape, ptrs, 0, NULL);
}
