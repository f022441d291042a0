// CRC-32C with the CPU's instruction: 8 bytes per instruction instead of a table lookup per byte.
// The Swift slicing-by-8 version in BeaconLog is the fallback and the reference the tests compare with.
#include "beacon_crc32c.h"
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

int beacon_crc32c_hw_available(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_SSE4_2) != 0;
}

__attribute__((target("sse4.2")))
uint32_t beacon_crc32c_hw(uint32_t crc, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n > 0) {
        c32 = __builtin_ia32_crc32qi(c32, *p++);
        n--;
    }
    return ~c32;
}

#elif defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif

int beacon_crc32c_hw_available(void) {
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
}

__attribute__((target("crc")))
uint32_t beacon_crc32c_hw(uint32_t crc, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_arm_crc32cd(c, v);
        p += 8;
        n -= 8;
    }
    while (n > 0) {
        c = __builtin_arm_crc32cb(c, *p++);
        n--;
    }
    return ~c;
}

#else
int beacon_crc32c_hw_available(void) { return 0; }
uint32_t beacon_crc32c_hw(uint32_t crc, const void *bytes, size_t n) { (void)bytes; (void)n; return crc; }
#endif
