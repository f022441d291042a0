#ifndef BEACON_CRC32C_H
#define BEACON_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/// 1 if this CPU has a CRC-32C instruction (x86-64 SSE4.2, or the AArch64 CRC extension).
int beacon_crc32c_hw_available(void);

/// Continues a CRC-32C (Castagnoli) over `n` bytes with the CPU's instruction. `crc` is the
/// pre- and post-inverted value, as in `update(checksum(a), b) == checksum(a + b)`. Only call when
/// `beacon_crc32c_hw_available()` returned 1.
uint32_t beacon_crc32c_hw(uint32_t crc, const void *bytes, size_t n);

/// `beacon_crc32c_hw`, also setting `*newline` to 1 if the bytes hold a newline (0x0A), else 0:
/// the append path's check and checksum in one pass over the record.
uint32_t beacon_crc32c_hw_scan(uint32_t crc, const void *bytes, size_t n, int *newline);

#endif
