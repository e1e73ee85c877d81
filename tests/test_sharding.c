/* test_sharding.c — meshes, partition specs and shardings against the OpSharding
 * text PyTorch/XLA prints (torch_xla._XLAC._get_xla_sharding_spec after
 * xs.mark_sharding), every error path, and per-device index ranges.
 *
 * Expected strings come from two independent places:
 *  - pytorch/xla test/spmd/test_xla_sharding.py and test_fsdp_v2.py, which
 *    assert exact strings (instantiated here for 4 and 8 devices);
 *  - hand derivations from xla_sharding.py (_get_tile_assignment: transpose the
 *    logical mesh to (spec axes in order, unused axes ascending), merge tuple
 *    axes; _get_group_assignment: replica groups = the trailing unused axes)
 *    and XLA's HloSharding::PartialTile (sorts each group; group size 1 ->
 *    plain tiling; one group -> {replicated}), written next to each case. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spmd/spmd_internal.h"
#include "tessel/spmd.h"

// Sharding text for (mesh shape, names, ids, spec text, tensor rank); NULL on
// error. The caller frees it.
static char *sharding_text(const char *mesh_shape, const char *names, const char *ids,
                           const char *spec_text, int rank) {
  ts_mesh *m = ts_mesh_parse(mesh_shape, names, ids);
  if (!m) return NULL;
  ts_partition_spec spec;
  char *text = NULL;
  if (ts_partition_spec_parse(m, spec_text, &spec) == 0) {
    ts_sharding *s = ts_sharding_new(m, &spec, rank);
    if (s) text = ts_sharding_to_string(s);
    ts_sharding_free(s);
  }
  ts_mesh_free(m);
  return text;
}

#define EXPECT(mesh_shape, names, ids, spec, rank, want)                                   \
  do {                                                                                      \
    char *got_ = sharding_text(mesh_shape, names, ids, spec, rank);                         \
    CHECK(got_ && strcmp(got_, want) == 0, "mesh %s spec \"%s\": got %s (%s), want %s",      \
          mesh_shape, spec, got_ ? got_ : "NULL", got_ ? "" : ts_last_error(), want);        \
    free(got_);                                                                             \
  } while (0)

// The call fails and the message contains `part`.
#define EXPECT_ERROR(call, part)                                                            \
  do {                                                                                      \
    ts_clear_error();                                                                       \
    bool failed_ = (call);                                                                  \
    CHECK(failed_ && strstr(ts_last_error(), part), "%s: message \"%s\" lacks \"%s\"", #call, \
          ts_last_error(), part);                                                           \
  } while (0)

static bool sharding_fails(const char *mesh_shape, const char *names, const char *ids,
                           const char *spec, int rank) {
  char *t = sharding_text(mesh_shape, names, ids, spec, rank);
  free(t);
  return t == NULL;
}

// Cases asserted verbatim by PyTorch/XLA's own tests, for 4 and 8 devices.
static void test_pytorch_xla_cases(void) {
  // test_tupled_partition_spec: mesh (2, n/2), t rank 1, spec ((0, 1),).
  EXPECT("2,2", NULL, NULL, "0+1", 1, "{devices=[4]0,1,2,3}");
  EXPECT("2,4", NULL, NULL, "0+1", 1, "{devices=[8]0,1,2,3,4,5,6,7}");
  // test_named_partial_tupled_partition_spec: mesh (1, 2, n/2) ('r', 'b', 'm').
  EXPECT("1,2,2", "r,b,m", NULL, "r+b,None", 2, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT("1,2,4", "r,b,m", NULL, "r+b,None", 2,
         "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  EXPECT("1,2,4", "r,b,m", NULL, "None,b+m", 2, "{devices=[1,8]0,1,2,3,4,5,6,7}");
  // (None, ('r', 'm')): devices = logical mesh transposed (0, 2, 1), flattened.
  EXPECT("1,2,2", "r,b,m", NULL, "None,r+m", 2, "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT("1,2,4", "r,b,m", NULL, "None,r+m", 2,
         "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
  // (None, ('m', 'b')): logical mesh transposed (2, 1, 0), flattened.
  EXPECT("1,2,4", "r,b,m", NULL, "None,m+b", 2, "{devices=[1,8]0,4,1,5,2,6,3,7}");
  // test_multiple_tuples_in_spec: mesh (1, 2, n/2, 1) ('a', 'b', 'c', 'd').
  EXPECT("1,2,4,1", "a,b,c,d", NULL, "a+b,c+d", 2, "{devices=[2,4]0,1,2,3,4,5,6,7}");
  EXPECT("1,2,2,1", "a,b,c,d", NULL, "a+b,c+d", 2, "{devices=[2,2]0,1,2,3}");
  // test_3d_tensor_2d_mesh: mesh (2, n/2), spec (None, 0, 1).
  EXPECT("2,4", NULL, NULL, "None,0,1", 3, "{devices=[1,2,4]0,1,2,3,4,5,6,7}");
  // test_custom_tile_assignment: mesh (1, n) with reversed ids, spec (0, 1).
  EXPECT("1,4", NULL, "3,2,1,0", "0,1", 2, "{devices=[1,4]3,2,1,0}");
  EXPECT("1,8", NULL, "7,6,5,4,3,2,1,0", "0,1", 2, "{devices=[1,8]7,6,5,4,3,2,1,0}");
  // test_mark_sharding_2d / _4d.
  EXPECT("1,4", NULL, NULL, "0,1", 2, "{devices=[1,4]0,1,2,3}");
  EXPECT("1,1,2,4", NULL, NULL, "0,1,2,3", 4, "{devices=[1,1,2,4]0,1,2,3,4,5,6,7}");
  // test_mark_sharding_partial: mesh (2, n/2), spec (0, None) -> [2,1,n/2].
  EXPECT("2,2", NULL, NULL, "0,None", 2, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT("2,4", NULL, NULL, "0,None", 2, "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  // test_mark_sharding_partial_unordered: mesh (2, 1, n/2), spec (1, None, 0)
  // -> [1,1,2,n/2]; the transposed mesh (axes 1, 0, 2) is the identity order.
  EXPECT("2,1,4", NULL, NULL, "1,None,0", 3,
         "{devices=[1,1,2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  // test_2d_tensor_3d_mesh: mesh (2, n/2, 1), spec (2, 1) -> [1,n/2,2];
  // devices: transposed to axes (2, 1, 0), i.e. y-major: 0,2,1,3.
  EXPECT("2,2,1", NULL, NULL, "2,1", 2, "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT("2,1,1", NULL, NULL, "2,1", 2, "{replicated}");
  EXPECT("1,1,1", NULL, NULL, "2,1", 2, "{replicated}");
  // test_xla_sharding_type: a 1-device mesh is replicated; (None, None) too.
  EXPECT("1,1", NULL, NULL, "0,1", 2, "{replicated}");
  EXPECT("2,2", NULL, NULL, "None,None", 2, "{replicated}");
  // test_fsdp_v2_multi_slice: mesh (2, n/2, 1) ('data', 'fsdp', 'tensor').
  EXPECT("2,2,1", "data,fsdp,tensor", NULL, "data+fsdp,None", 2, "{devices=[4,1]0,1,2,3}");
  EXPECT("2,4,1", "data,fsdp,tensor", NULL, "data+fsdp,None", 2,
         "{devices=[8,1]0,1,2,3,4,5,6,7}");
  // Its weight annotation, {devices=[1,n/2,2]...}, is a (None, 'fsdp') spec.
  EXPECT("2,2,1", "data,fsdp,tensor", NULL, "None,fsdp", 2,
         "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT("2,4,1", "data,fsdp,tensor", NULL, "None,fsdp", 2,
         "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
}

// Hand-derived cases over 1-D to 4-D meshes.
static void test_derived_cases(void) {
  // The examples: mesh (2, 2) ('data', 'model').
  EXPECT("2,2", "data,model", NULL, "model,data", 2, "{devices=[2,2]0,2,1,3}");
  EXPECT("2,2", "data,model", NULL, "data,None", 2, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT("2,2", "data,model", NULL, "None,None", 2, "{replicated}");

  // 1-D mesh (4,).
  EXPECT("4", "x", NULL, "x", 1, "{devices=[4]0,1,2,3}");
  // (None, x): T = [0,1,2,3] is already rank 1 <= 2 -> PARTIAL with 4 groups
  // of 1 and group tile [1,4] -> PartialTile drops the size-1 last dim.
  EXPECT("4", "x", NULL, "None,x", 2, "{devices=[1,4]0,1,2,3}");
  EXPECT("4", "x", NULL, "None", 1, "{replicated}");
  EXPECT("4", "x", "3,2,1,0", "x,None", 2, "{devices=[4,1]3,2,1,0}");

  // 2-D mesh (2, 4) ('data', 'model'): logical [[0,1,2,3],[4,5,6,7]].
  EXPECT("2,4", "data,model", NULL, "data,model", 2, "{devices=[2,4]0,1,2,3,4,5,6,7}");
  EXPECT("2,4", "data,model", NULL, "model,data", 2, "{devices=[4,2]0,4,1,5,2,6,3,7}");
  EXPECT("2,4", NULL, NULL, "1,0", 2, "{devices=[4,2]0,4,1,5,2,6,3,7}");
  EXPECT("2,4", "data,model", NULL, "data,None", 2,
         "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  // (None, model): T = mesh.T = [[0,4],[1,5],[2,6],[3,7]]; groups are its rows.
  EXPECT("2,4", "data,model", NULL, "None,model", 2,
         "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
  EXPECT("2,4", "data,model", NULL, "data+model,None", 2, "{devices=[8,1]0,1,2,3,4,5,6,7}");
  EXPECT("2,4", "data,model", NULL, "model+data,None", 2, "{devices=[8,1]0,4,1,5,2,6,3,7}");
  EXPECT("2,4", "data,model", NULL, "model", 1,
         "{devices=[4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
  EXPECT("2,4", "data,model", NULL, "data", 1,
         "{devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  // (data, None, model, None): 8 groups of 1 with group tile [2,1,4,1].
  EXPECT("2,4", "data,model", NULL, "data,None,model,None", 4,
         "{devices=[2,1,4,1]0,1,2,3,4,5,6,7}");
  // Reversed ids, (data, None): T = [[7,6,5,4],[3,2,1,0]]; PartialTile sorts
  // each group -> 4,5,6,7 then 0,1,2,3. Tiled specs keep the order.
  EXPECT("2,4", "data,model", "7,6,5,4,3,2,1,0", "data,None", 2,
         "{devices=[2,1,4]4,5,6,7,0,1,2,3 last_tile_dim_replicate}");
  EXPECT("2,4", "data,model", "7,6,5,4,3,2,1,0", "data,model", 2,
         "{devices=[2,4]7,6,5,4,3,2,1,0}");
  EXPECT("2,4", "data,model", "7,6,5,4,3,2,1,0", "model,data", 2,
         "{devices=[4,2]7,3,6,2,5,1,4,0}");
  // Custom ids: logical [[1,3,5,7],[0,2,4,6]]. (None, data): T = the mesh,
  // groups its rows (already sorted). (None, model): T = mesh.T =
  // [[1,0],[3,2],[5,4],[7,6]] -> groups sorted: 0,1 2,3 4,5 6,7.
  EXPECT("2,4", "data,model", "1,3,5,7,0,2,4,6", "None,data", 2,
         "{devices=[1,2,4]1,3,5,7,0,2,4,6 last_tile_dim_replicate}");
  EXPECT("2,4", "data,model", "1,3,5,7,0,2,4,6", "None,model", 2,
         "{devices=[1,4,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");

  // 3-D mesh (2, 2, 2) ('x', 'y', 'z'): device = 4x + 2y + z.
  EXPECT("2,2,2", "x,y,z", NULL, "x,y,z", 3, "{devices=[2,2,2]0,1,2,3,4,5,6,7}");
  // (z, None, x): T axes (z, x, y) -> 0,2,4,6,1,3,5,7; groups over y.
  EXPECT("2,2,2", "x,y,z", NULL, "z,None,x", 3,
         "{devices=[2,1,2,2]0,2,4,6,1,3,5,7 last_tile_dim_replicate}");
  // (y+x, None): T axes (y, x, z) -> 0,1,4,5,2,3,6,7; groups over z.
  EXPECT("2,2,2", "x,y,z", NULL, "y+x,None", 2,
         "{devices=[4,1,2]0,1,4,5,2,3,6,7 last_tile_dim_replicate}");
  // Reversed ids, (None, z): T axes (z, x, y) -> 7,5,3,1,6,4,2,0; groups of 4
  // sorted -> 1,3,5,7 and 0,2,4,6.
  EXPECT("2,2,2", "x,y,z", "7,6,5,4,3,2,1,0", "None,z", 2,
         "{devices=[1,2,4]1,3,5,7,0,2,4,6 last_tile_dim_replicate}");

  // 4-D mesh (2, 1, 2, 2) ('a', 'b', 'c', 'd'): device = 4a + 2c + d.
  EXPECT("2,1,2,2", "a,b,c,d", NULL, "a,b,c,d", 4, "{devices=[2,1,2,2]0,1,2,3,4,5,6,7}");
  // (d+a, c): T axes (d, a, c, b) -> 0,2,4,6,1,3,5,7; the unused b has size 1.
  EXPECT("2,1,2,2", "a,b,c,d", NULL, "d+a,c", 2, "{devices=[4,2]0,2,4,6,1,3,5,7}");
  // (b, None): one group of all 8 -> replicated.
  EXPECT("2,1,2,2", "a,b,c,d", NULL, "b,None", 2, "{replicated}");
  // (c, None, None, a): T axes (c, a, b, d) -> 0,1,4,5,2,3,6,7; groups over d.
  EXPECT("2,1,2,2", "a,b,c,d", NULL, "c,None,None,a", 4,
         "{devices=[2,1,1,2,2]0,1,4,5,2,3,6,7 last_tile_dim_replicate}");

  // Size-1 axes: sharding over them alone replicates.
  EXPECT("1,4", NULL, NULL, "0,None", 2, "{replicated}");
  EXPECT("4,1", NULL, NULL, "0", 1, "{devices=[4]0,1,2,3}");
  EXPECT("4,1", NULL, NULL, "0,1", 2, "{devices=[4,1]0,1,2,3}");

  // 1-device meshes: MAXIMAL in PyTorch/XLA, which CreateOpSharding makes Replicate.
  EXPECT("1", "x", NULL, "x", 1, "{replicated}");
  EXPECT("1", "x", NULL, "x,None", 2, "{replicated}");
  EXPECT("1,1", NULL, NULL, "0", 1, "{replicated}");

  // Scalars: rank 0 is always replicated.
  EXPECT("2,4", "data,model", NULL, "", 0, "{replicated}");
  EXPECT("8", NULL, NULL, "  ", 0, "{replicated}");
  // Spaces around entries are allowed.
  EXPECT("2,2", "data,model", NULL, " model , data ", 2, "{devices=[2,2]0,2,1,3}");
  EXPECT("2,2", "data,model", NULL, "model + data,None", 2, "{devices=[4,1]0,2,1,3}");
}

// The programmatic API gives the same shardings as the parser.
static void test_programmatic(void) {
  int64_t shape[2] = {2, 4};
  const char *names[2] = {"data", "model"};
  int ids[8] = {7, 6, 5, 4, 3, 2, 1, 0};
  ts_mesh *m = ts_mesh_new(2, shape, names, 8, ids);
  CHECK(m != NULL, "%s", ts_last_error());
  if (!m) return;
  CHECK(ts_mesh_rank(m) == 2 && ts_mesh_num_devices(m) == 8, "mesh queries");
  CHECK(ts_mesh_axis_size(m, 1) == 4 && ts_mesh_axis_size(m, 2) == 0, "axis sizes");
  CHECK(strcmp(ts_mesh_axis_name(m, 1), "model") == 0 && !ts_mesh_axis_name(m, 2), "axis names");
  CHECK(ts_mesh_axis_index(m, "model") == 1, "axis index");
  CHECK(ts_mesh_device_ids(m)[0] == 7, "device ids copied");

  ts_partition_spec spec;
  CHECK_OK(ts_partition_spec_init(&spec, 2));
  CHECK_OK(ts_partition_spec_add_axis(&spec, 0, ts_mesh_axis_index(m, "model")));
  CHECK_OK(ts_partition_spec_add_axis(&spec, 0, 0));
  ts_sharding *s = ts_sharding_new(m, &spec, 2);
  CHECK(s != NULL, "%s", ts_last_error());
  ts_partition_spec parsed;
  CHECK_OK(ts_partition_spec_parse(m, "model+data,None", &parsed));
  ts_sharding *p = ts_sharding_new(m, &parsed, 2);
  if (s && p) {
    CHECK(ts_sharding_equal(s, p), "programmatic == parsed");
    char *t = ts_sharding_to_string(s);
    // T = ids.T = [[7,3],[6,2],[5,1],[4,0]], merged to 8 blocks.
    CHECK(t && strcmp(t, "{devices=[8,1]7,3,6,2,5,1,4,0}") == 0, "got %s", t);
    free(t);
    CHECK(ts_sharding_rank(s) == 2 && !ts_sharding_is_replicated(s), "queries");
    CHECK(ts_sharding_num_tiles(s, 0) == 8 && ts_sharding_num_tiles(s, 1) == 1, "tiles");
    CHECK(ts_sharding_replication(s) == 1 && ts_sharding_num_devices(s) == 8, "replication");
    CHECK(ts_sharding_tile_devices(s)[1] == 3, "tile devices");
    CHECK(ts_sharding_spec(s)->naxes[0] == 2 && ts_sharding_spec(s)->axes[0][0] == 1, "spec copy");
    CHECK(ts_mesh_num_devices(ts_sharding_mesh(s)) == 8, "mesh copy");
  }
  ts_sharding_free(p);
  ts_mesh_free(m);  // the sharding keeps its own copy
  if (s) {
    int64_t tile[2], replica;
    CHECK_OK(ts_sharding_device_tile(s, 3, tile, &replica));
    CHECK(tile[0] == 1 && tile[1] == 0 && replica == 0, "device 3 is block (1, 0)");
  }
  ts_sharding_free(s);

  // Default ids and an unnamed mesh.
  int64_t shape3[3] = {2, 2, 2};
  ts_mesh *u = ts_mesh_new(3, shape3, NULL, 0, NULL);
  CHECK(u && ts_mesh_device_ids(u)[5] == 5 && !ts_mesh_axis_name(u, 0), "unnamed default mesh");
  EXPECT_ERROR(ts_mesh_axis_index(u, "x") < 0, "mesh has no axis names");
  ts_mesh_free(u);
}

static void test_mesh_errors(void) {
  int64_t shape[3] = {2, 2, 0};
  const char *dup[2] = {"data", "data"};
  const char *none[2] = {"data", "None"};
  const char *plus[2] = {"a+b", "c"};
  const char *empty[2] = {"a", ""};
  int ids_dup[4] = {0, 1, 1, 3}, ids_big[4] = {0, 1, 2, 4}, ids_neg[4] = {0, -1, 2, 3};
  EXPECT_ERROR(!ts_mesh_new(0, shape, NULL, 0, NULL), "mesh rank 0 is out of range");
  EXPECT_ERROR(!ts_mesh_new(9, shape, NULL, 0, NULL), "mesh rank 9 is out of range");
  EXPECT_ERROR(!ts_mesh_new(3, shape, NULL, 0, NULL), "mesh axis 2 has size 0");
  EXPECT_ERROR(!ts_mesh_new(2, shape, dup, 0, NULL), "mesh axis name 'data' is used twice");
  EXPECT_ERROR(!ts_mesh_new(2, shape, none, 0, NULL), "cannot be called 'None'");
  EXPECT_ERROR(!ts_mesh_new(2, shape, plus, 0, NULL), "mesh axis name 'a+b' contains '+'");
  EXPECT_ERROR(!ts_mesh_new(2, shape, empty, 0, NULL), "mesh axis 1 has an empty name");
  EXPECT_ERROR(!ts_mesh_new(2, shape, NULL, 3, ids_dup), "mesh shape has 4 devices but 3 device ids");
  EXPECT_ERROR(!ts_mesh_new(2, shape, NULL, 4, ids_dup), "device id 1 appears twice");
  EXPECT_ERROR(!ts_mesh_new(2, shape, NULL, 4, ids_big), "device id 4 (position 3) is out of range");
  EXPECT_ERROR(!ts_mesh_new(2, shape, NULL, 4, ids_neg), "device id -1 (position 1) is out of range");

  EXPECT_ERROR(!ts_mesh_parse("", NULL, NULL), "has rank 0");
  EXPECT_ERROR(!ts_mesh_parse("1,1,1,1,1,1,1,1,1", NULL, NULL), "has rank 9; expected 1..8");
  EXPECT_ERROR(!ts_mesh_parse("2,x", NULL, NULL), "mesh shape \"2,x\": entry 1 is not an integer");
  EXPECT_ERROR(!ts_mesh_parse("2,0", NULL, NULL), "entry 1 is 0, expected 1..");
  EXPECT_ERROR(!ts_mesh_parse("2,2", "data", NULL), "list 1 name but the mesh shape \"2,2\" has rank 2");
  EXPECT_ERROR(!ts_mesh_parse("2,2", "a,b,c", NULL), "list 3 names");
  EXPECT_ERROR(!ts_mesh_parse("2,2", "a,a", NULL), "mesh axis name 'a' is used twice");
  EXPECT_ERROR(!ts_mesh_parse("2,2", "a,", NULL), "mesh axis 1 has an empty name");
  EXPECT_ERROR(!ts_mesh_parse("2,2", NULL, "0,1,2"), "list 3 ids but the mesh shape \"2,2\" has 4 devices");
  EXPECT_ERROR(!ts_mesh_parse("2,2", NULL, "0,1,2,3,4"), "list more than 4 ids");
  EXPECT_ERROR(!ts_mesh_parse("2,2", NULL, "0,1,1,3"), "device id 1 appears twice");
  EXPECT_ERROR(!ts_mesh_parse("2,2", NULL, "0,1,2,7"), "device id 7 (position 3) is out of range");
  EXPECT_ERROR(!ts_mesh_parse("2,2", NULL, "0,1,-2,3"), "entry 2 is -2");
}

static void test_spec_errors(void) {
  ts_mesh *m = ts_mesh_parse("2,4", "data,model", NULL);
  ts_mesh *u = ts_mesh_parse("2,4", NULL, NULL);
  CHECK(m && u, "%s", ts_last_error());
  if (!m || !u) return;
  ts_partition_spec spec;
  EXPECT_ERROR(ts_partition_spec_parse(m, "data,batch", &spec) < 0,
               "entry 1: mesh has no axis 'batch' (axes: data, model)");
  EXPECT_ERROR(ts_partition_spec_parse(m, "2,None", &spec) < 0,
               "entry 0 uses mesh axis 2 but the mesh has rank 2");
  EXPECT_ERROR(ts_partition_spec_parse(m, "data,data", &spec) < 0,
               "mesh axis 'data' is used twice in partition spec (data, data) (entries 0 and 1)");
  EXPECT_ERROR(ts_partition_spec_parse(m, "data+model,model", &spec) < 0,
               "mesh axis 'model' is used twice");
  EXPECT_ERROR(ts_partition_spec_parse(m, "data+data", &spec) < 0, "mesh axis 'data' is used twice");
  EXPECT_ERROR(ts_partition_spec_parse(u, "1,1", &spec) < 0, "mesh axis '1' is used twice");
  EXPECT_ERROR(ts_partition_spec_parse(m, "data,,None", &spec) < 0, "entry 1 is empty");
  EXPECT_ERROR(ts_partition_spec_parse(m, "data,", &spec) < 0, "entry 1 is empty");
  EXPECT_ERROR(ts_partition_spec_parse(m, "data+", &spec) < 0, "entry 0 has an empty axis");
  EXPECT_ERROR(ts_partition_spec_parse(m, "data+None", &spec) < 0, "entry 0 mixes None");
  EXPECT_ERROR(ts_partition_spec_parse(u, "data", &spec) < 0, "mesh has no axis names");
  EXPECT_ERROR(ts_partition_spec_parse(u, "12345", &spec) < 0, "uses mesh axis 12345");
  EXPECT_ERROR(ts_partition_spec_parse(m, "None,None,None,None,None,None,None,None,None", &spec) < 0,
               "more than 8 entries");
  EXPECT_ERROR(ts_partition_spec_parse(m, NULL, &spec) < 0, "no text");
  // Indices work on a named mesh too (PyTorch/XLA accepts ints either way).
  CHECK_OK(ts_partition_spec_parse(m, "1,0", &spec));

  EXPECT_ERROR(ts_partition_spec_init(&spec, 9) < 0, "partition spec rank 9 is out of range");
  CHECK_OK(ts_partition_spec_init(&spec, 2));
  EXPECT_ERROR(ts_partition_spec_add_axis(&spec, 2, 0) < 0, "entry 2 does not exist");
  EXPECT_ERROR(ts_partition_spec_add_axis(&spec, 0, -1) < 0, "mesh axis -1 is out of range");

  // Checks at ts_sharding_new.
  CHECK_OK(ts_partition_spec_parse(m, "data,None,model", &spec));
  EXPECT_ERROR(!ts_sharding_new(m, &spec, 2), "partition spec has 3 entries but the tensor is rank 2");
  CHECK_OK(ts_partition_spec_init(&spec, 2));
  CHECK_OK(ts_partition_spec_add_axis(&spec, 1, 5));
  EXPECT_ERROR(!ts_sharding_new(m, &spec, 2), "entry 1 uses mesh axis 5 but the mesh has rank 2");
  CHECK_OK(ts_partition_spec_init(&spec, 2));
  CHECK_OK(ts_partition_spec_add_axis(&spec, 0, 1));
  CHECK_OK(ts_partition_spec_add_axis(&spec, 1, 1));
  EXPECT_ERROR(!ts_sharding_new(m, &spec, 2), "mesh axis 'model' is used twice in partition spec (model, model)");
  EXPECT_ERROR(!ts_sharding_new(NULL, &spec, 2), "no mesh");
  EXPECT_ERROR(!ts_sharding_new(m, &spec, 9), "tensor rank 9 is out of range");
  EXPECT_ERROR(sharding_fails("2,2", "a,b", NULL, "a,b", 3), "partition spec has 2 entries but the tensor is rank 3");
  ts_mesh_free(m);
  ts_mesh_free(u);
}

// Device d's [start, limit) along every dim equals the expected lists.
static void expect_ranges(const ts_sharding *s, const int64_t *shape, int device,
                          const int64_t *want_start, const int64_t *want_limit) {
  int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
  int rc = ts_sharding_shard_range(s, shape, device, start, limit);
  CHECK(rc == 0, "device %d: %s", device, ts_last_error());
  if (rc) return;
  for (int d = 0; d < ts_sharding_rank(s); d++)
    CHECK(start[d] == want_start[d] && limit[d] == want_limit[d],
          "device %d dim %d: [%lld, %lld), want [%lld, %lld)", device, d, (long long)start[d],
          (long long)limit[d], (long long)want_start[d], (long long)want_limit[d]);
}

static ts_sharding *make(const char *mesh_shape, const char *names, const char *ids,
                         const char *spec_text, int rank) {
  ts_mesh *m = ts_mesh_parse(mesh_shape, names, ids);
  ts_partition_spec spec;
  ts_sharding *s = NULL;
  if (m && ts_partition_spec_parse(m, spec_text, &spec) == 0) s = ts_sharding_new(m, &spec, rank);
  ts_mesh_free(m);
  CHECK(s != NULL, "make %s %s: %s", mesh_shape, spec_text, ts_last_error());
  return s;
}

static void test_shard_ranges(void) {
  // test_padded_xla_shards: n + 1 = 5 elements on 4 devices -> blocks of 2,
  // clamped: [0,2) [2,4) [4,5) [5,5).
  ts_sharding *s = make("4", NULL, NULL, "0", 1);
  if (s) {
    int64_t shape[1] = {5}, block[1];
    int64_t want[5] = {0, 2, 4, 5, 5};
    for (int d = 0; d < 4; d++) expect_ranges(s, shape, d, &want[d], &want[d + 1]);
    CHECK_OK(ts_sharding_shard_shape(s, shape, block));
    CHECK(block[0] == 2, "padded block size %lld", (long long)block[0]);
    int64_t zero[1] = {0}, z0[1] = {0};
    expect_ranges(s, zero, 3, z0, z0);  // an empty dim gives empty blocks
    int64_t start[1], limit[1];
    EXPECT_ERROR(ts_sharding_shard_range(s, shape, 4, start, limit) < 0, "device 4 is not in the mesh");
    int64_t neg[1] = {-1};
    EXPECT_ERROR(ts_sharding_shard_range(s, neg, 0, start, limit) < 0, "negative size -1");
  }
  ts_sharding_free(s);

  // Uneven 2-D: (5, 7) on (2, 4): rows of 3 ([0,3) [3,5)), columns of 2
  // ([0,2) [2,4) [4,6) [6,7)); device 6 = block (1, 2).
  s = make("2,4", "data,model", NULL, "data,model", 2);
  if (s) {
    int64_t shape[2] = {5, 7};
    expect_ranges(s, shape, 6, (int64_t[]){3, 4}, (int64_t[]){5, 6});
    expect_ranges(s, shape, 3, (int64_t[]){0, 6}, (int64_t[]){3, 7});
    expect_ranges(s, shape, 4, (int64_t[]){3, 0}, (int64_t[]){5, 2});
  }
  ts_sharding_free(s);

  // test_partially_replicated_xla_shards: mesh (n/2, 2), (None, 1) on (16, 16):
  // device i holds columns [(i % 2) * 8, +8) and is replica i / 2.
  s = make("2,2", NULL, NULL, "None,1", 2);
  if (s) {
    int64_t shape[2] = {16, 16};
    for (int i = 0; i < 4; i++) {
      expect_ranges(s, shape, i, (int64_t[]){0, (i % 2) * 8}, (int64_t[]){16, (i % 2) * 8 + 8});
      int64_t tile[2], replica;
      CHECK_OK(ts_sharding_device_tile(s, i, tile, &replica));
      CHECK(replica == i / 2, "device %d replica %lld", i, (long long)replica);
    }
  }
  ts_sharding_free(s);

  // Replicated: every device holds everything.
  s = make("2,2", NULL, "3,1,2,0", "None,None", 2);
  if (s) {
    int64_t shape[2] = {3, 5};
    for (int i = 0; i < 4; i++) expect_ranges(s, shape, i, (int64_t[]){0, 0}, (int64_t[]){3, 5});
  }
  ts_sharding_free(s);
}

static uint64_t rng_next(uint64_t *state) {  // splitmix64
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Random meshes, specs and shapes: every element is held by exactly
// `replication` devices, each block has the padded shape or less, and the
// devices sharing a block are the sorted group in the tile assignment.
static void test_random_coverage(uint64_t seed) {
  uint64_t st = seed;
  for (int iter = 0; iter < 300; iter++) {
    int mrank = 1 + (int)(rng_next(&st) % 3);
    int64_t mshape[3];
    int64_t n = 1;
    for (int a = 0; a < mrank; a++) n *= (mshape[a] = 1 + (int64_t)(rng_next(&st) % 3));
    int ids[27];
    for (int i = 0; i < n; i++) ids[i] = i;
    for (int i = (int)n - 1; i > 0; i--) {  // shuffle
      int j = (int)(rng_next(&st) % (uint64_t)(i + 1)), t = ids[i];
      ids[i] = ids[j], ids[j] = t;
    }
    ts_mesh *m = ts_mesh_new(mrank, mshape, NULL, n, ids);
    int rank = (int)(rng_next(&st) % 4);
    ts_partition_spec spec;
    ts_partition_spec_init(&spec, rank);
    for (int a = 0; a < mrank; a++) {
      uint64_t r = rng_next(&st) % (uint64_t)(rank + 1);
      if (r < (uint64_t)rank) ts_partition_spec_add_axis(&spec, (int)r, a);  // else unused
    }
    int64_t shape[3] = {1, 1, 1}, numel = 1;
    for (int d = 0; d < rank; d++) numel *= (shape[d] = (int64_t)(rng_next(&st) % 7));
    ts_sharding *s = m ? ts_sharding_new(m, &spec, rank) : NULL;
    CHECK(s != NULL, "iter %d: %s", iter, ts_last_error());
    if (s) {
      int *count = calloc((size_t)numel + 1, sizeof *count);
      for (int dev = 0; dev < n; dev++) {
        int64_t start[3], limit[3];
        CHECK_OK(ts_sharding_shard_range(s, shape, dev, start, limit));
        int64_t idx[3] = {0, 0, 0};
        for (int d = 0; d < rank; d++) idx[d] = start[d];
        bool empty = false;
        for (int d = 0; d < rank; d++) empty = empty || start[d] >= limit[d];
        while (!empty) {  // count every element of the block
          int64_t flat = 0;
          for (int d = 0; d < rank; d++) flat = flat * shape[d] + idx[d];
          count[flat]++;
          int d = rank - 1;
          for (; d >= 0; d--) {
            if (++idx[d] < limit[d]) break;
            idx[d] = start[d];
          }
          if (d < 0) break;
        }
      }
      for (int64_t e = 0; e < numel; e++)
        CHECK(count[e] == ts_sharding_replication(s), "iter %d: element %lld held %d times, want %lld",
              iter, (long long)e, count[e], (long long)ts_sharding_replication(s));
      const int *td = ts_sharding_tile_devices(s);
      for (int64_t i = 1; i < n; i++)
        if (i % ts_sharding_replication(s)) CHECK(td[i - 1] < td[i], "iter %d: group not sorted", iter);
      free(count);
    }
    ts_sharding_free(s);
    ts_mesh_free(m);
  }
}

static void test_visualize(void) {
  ts_sharding *s = make("2,2", "data,model", NULL, "data,None", 2);
  if (s) {
    char *v = ts_sharding_visualize(s, (int64_t[]){16, 16});
    const char *want =
        "tensor (16, 16) on mesh (data=2, model=2): 2 blocks of (8, 16), each on 2 devices\n"
        "+-------+\n"
        "|  0,1  |\n"
        "+-------+\n"
        "|  2,3  |\n"
        "+-------+\n";
    CHECK(v && strcmp(v, want) == 0, "got\n%s", v ? v : ts_last_error());
    free(v);
  }
  ts_sharding_free(s);
  s = make("2,2", "data,model", NULL, "model,data", 2);
  if (s) {
    char *v = ts_sharding_visualize(s, (int64_t[]){4, 6});
    CHECK(v && strstr(v, "|  0  |  2  |\n+-----+-----+\n|  1  |  3  |\n"), "got\n%s", v);
    free(v);
  }
  ts_sharding_free(s);
  s = make("2,2", NULL, NULL, "0,None,1", 3);
  if (s) {
    char *v = ts_sharding_visualize(s, (int64_t[]){4, 3, 5});
    CHECK(v && strstr(v, "device 3: block (1, 0, 1) [2:4, 0:3, 3:5]\n"), "got\n%s", v);
    free(v);
  }
  ts_sharding_free(s);
}

int main(void) {
  uint64_t seed = ts_test_init("test_sharding", 20261202);
  test_pytorch_xla_cases();
  test_derived_cases();
  test_programmatic();
  test_mesh_errors();
  test_spec_errors();
  test_shard_ranges();
  test_random_coverage(seed);
  test_visualize();
  return ts_test_finish();
}
