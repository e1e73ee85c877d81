/* hash.h — a 64-bit non-cryptographic hash of bytes (util/hash.c). The value
 * depends only on the bytes, the length and the seed, never on the machine. */
#ifndef TS_UTIL_HASH_H
#define TS_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t util_hash64(const void *data, size_t len, uint64_t seed);

#endif
