/* serialize.h — exact binary form of a graph (every node with its attrs,
 * constants' bytes, fused programs, input names, outputs and aliases), for
 * the persistent compile cache. Little-endian, fixed-width fields; the reader
 * checks every count and operand against the bytes it was given, so a
 * truncated or corrupt buffer gives an error, never a bad graph. */
#ifndef TS_SERIALIZE_H
#define TS_SERIALIZE_H

#include <stddef.h>

#include "ir/ir.h"

/* Bumped whenever the layout below changes (readers reject other versions).
 * 2: ops stored by name (ops.def) instead of enum value.
 * 3: conv and pool attrs carry their activation layout (ts_layout). */
#define TS_SERIALIZE_VERSION 3

/* Appends the binary form of g to *buf (malloc'd, grown as needed; *len
 * bytes used, *cap allocated). Returns 0, or -1 with the error set. */
int ir_serialize(const ts_graph *g, unsigned char **buf, size_t *len, size_t *cap);
/* Reads one graph from data[*pos .. len), advancing *pos past it. Returns a
 * new graph (verified with ts_graph_verify) or NULL with an error naming the
 * byte offset and what was wrong. */
ts_graph *ir_deserialize(const unsigned char *data, size_t len, size_t *pos);

#endif
