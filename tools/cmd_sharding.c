/* cmd_sharding.c — `tessel sharding`: the OpSharding text of a partition spec
 * on a device mesh (what torch_xla._XLAC._get_xla_sharding_spec would print
 * after xs.mark_sharding), then a picture of which device holds which block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"                // cli_flag, cli_error, exit codes
#include "util/parse.h"  // util_parse_int_list
#include "tessel/spmd.h"

int ts_cmd_sharding(int argc, char **argv);

static const char *CMD = "sharding";

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessel sharding --mesh-shape 2,4 [--axis-names data,model]\n"
          "                       [--device-ids 0,1,...] --shape 16,16 --spec data,None\n"
          "\n"
          "Prints the XLA OpSharding text of the partition spec on the mesh (first line),\n"
          "then which device holds which block of the tensor.\n"
          "\n"
          "  --mesh-shape   devices along each mesh axis, e.g. 2,4 (rank 1..8)\n"
          "  --axis-names   one unique name per mesh axis (default: axes by index)\n"
          "  --device-ids   the devices in row-major mesh order (default 0..N-1)\n"
          "  --shape        the tensor's global shape, e.g. 16,16 ('' for a scalar)\n"
          "  --spec         one entry per tensor dim: None, a mesh axis (name or\n"
          "                 index), or axes joined by '+' (split over their product,\n"
          "                 first one major), e.g. data+model,None ('' for a scalar)\n");
}

int ts_cmd_sharding(int argc, char **argv) {
  const char *mesh_shape = NULL, *axis_names = NULL, *device_ids = NULL, *shape_text = NULL,
             *spec_text = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return CLI_EXIT_OK;
    }
    struct { const char *flag; const char **value; } flags[] = {
        {"--mesh-shape", &mesh_shape}, {"--axis-names", &axis_names},
        {"--device-ids", &device_ids}, {"--shape", &shape_text},
        {"--spec", &spec_text}};
    int hit = 0;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0] && !hit; k++) {
      hit = cli_flag(CMD, argc, argv, &i, flags[k].flag, flags[k].value);
      if (hit < 0) return CLI_EXIT_USAGE;
    }
    if (!hit) {
      cli_error(CMD, "unknown flag '%s' (valid: --mesh-shape, --axis-names, --device-ids, "
                     "--shape, --spec, --help)", argv[i]);
      return CLI_EXIT_USAGE;
    }
  }
  const char *missing = !mesh_shape ? "--mesh-shape" : !shape_text ? "--shape"
                      : !spec_text  ? "--spec" : NULL;
  if (missing) {
    cli_error(CMD, "%s is required (see 'tessel sharding --help')", missing);
    return CLI_EXIT_USAGE;
  }

  ts_mesh *mesh = ts_mesh_parse(mesh_shape, axis_names, device_ids);
  if (!mesh) {
    cli_error(CMD, "%s", ts_last_error());
    return CLI_EXIT_USAGE;
  }
  int rc = CLI_EXIT_USAGE;
  ts_sharding *s = NULL;
  char *text = NULL, *picture = NULL;
  int64_t shape[TS_MAX_RANK];
  int rank = util_parse_int_list(shape_text, "--shape", 0, INT64_MAX / 2, shape, TS_MAX_RANK);
  ts_partition_spec spec;
  if (rank < 0 || ts_partition_spec_parse(mesh, spec_text, &spec) < 0 ||
      !(s = ts_sharding_new(mesh, &spec, rank))) {
    cli_error(CMD, "%s", ts_last_error());
    goto done;
  }
  text = ts_sharding_to_string(s);
  picture = ts_sharding_visualize(s, shape);
  if (!text || !picture) {
    cli_error(CMD, "%s", ts_last_error());
    rc = CLI_EXIT_FAIL;
    goto done;
  }
  printf("%s\n%s", text, picture);
  rc = CLI_EXIT_OK;
done:
  free(text);
  free(picture);
  ts_sharding_free(s);
  ts_mesh_free(mesh);
  return rc;
}
