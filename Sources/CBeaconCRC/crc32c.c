// CRC-32C with the CPU's instruction: 8 bytes per instruction instead of a table lookup per byte.
// The Swift slicing-by-8 version in BeaconLog is the fallback and the reference the tests compare with.
#include "beacon_crc32c.h"
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>

int beacon_crc32c_hw_available(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_SSE4_2) != 0;
}

// The instruction's latency is 3 cycles and its throughput 1 per cycle: one dependent chain of
// crc32q uses a third of the unit. Inputs of 3 * BLOCK bytes or more run three independent chains
// over consecutive blocks and join them (as Linux's crc32c-intel and Mark Adler's crc32c.c do):
// CRC registers are linear, so the register after blocks A B C from c is
//   zeros(3 * BLOCK, c) ^ zeros(2 * BLOCK, 0 over A) ^ zeros(BLOCK, 0 over B) ^ (0 over C),
// where zeros(k, x) is the register after k zero bytes from x, read from four 256-entry tables
// per shift (one per byte of x). Every chain starts from 0, so the join of one group runs while
// the next group's chains do.
#define BLOCK 64

static uint32_t shift1[4][256];  // zeros(BLOCK, x)
static uint32_t shift2[4][256];  // zeros(2 * BLOCK, x)
static uint32_t shift3[4][256];  // zeros(3 * BLOCK, x)
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static int tables_ready;  // read with acquire; set once the tables are written

__attribute__((target("sse4.2")))
static uint32_t zeros(uint32_t x, size_t bytes) {
    uint64_t c = x;
    for (size_t i = 0; i < bytes; i += 8) c = _mm_crc32_u64(c, 0);
    return (uint32_t)c;
}

static void make_tables(void) {
    for (int k = 0; k < 4; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            shift1[k][b] = zeros(b << (8 * k), BLOCK);
            shift2[k][b] = zeros(b << (8 * k), 2 * BLOCK);
            shift3[k][b] = zeros(b << (8 * k), 3 * BLOCK);
        }
    }
    __atomic_store_n(&tables_ready, 1, __ATOMIC_RELEASE);
}

static inline uint32_t shift(uint32_t table[4][256], uint32_t x) {
    return table[0][x & 0xFF] ^ table[1][(x >> 8) & 0xFF] ^ table[2][(x >> 16) & 0xFF] ^ table[3][x >> 24];
}

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

// The one loop of both entry points; `scan` (a constant at each call) adds the newline test:
// 16 bytes compared per SSE2 instruction, in the shadow of the CRC's latency.
__attribute__((target("sse4.2"), always_inline))
static inline uint32_t crc32c_core(uint32_t crc, const unsigned char *p, size_t n, int scan, int *newline) {
    uint64_t c = (uint32_t)~crc;
    const __m128i lf = _mm_set1_epi8(0x0A);
    __m128i seen = _mm_setzero_si128();
    if (n >= 3 * BLOCK) {
        if (!__atomic_load_n(&tables_ready, __ATOMIC_ACQUIRE)) pthread_once(&tables_once, make_tables);
        do {
            uint64_t c0 = 0, c1 = 0, c2 = 0;
            for (int i = 0; i < BLOCK; i += 16) {
                c0 = _mm_crc32_u64(c0, load64(p + i));
                c1 = _mm_crc32_u64(c1, load64(p + BLOCK + i));
                c2 = _mm_crc32_u64(c2, load64(p + 2 * BLOCK + i));
                c0 = _mm_crc32_u64(c0, load64(p + i + 8));
                c1 = _mm_crc32_u64(c1, load64(p + BLOCK + i + 8));
                c2 = _mm_crc32_u64(c2, load64(p + 2 * BLOCK + i + 8));
                if (scan) {
                    __m128i a = _mm_loadu_si128((const __m128i *)(p + i));
                    __m128i b = _mm_loadu_si128((const __m128i *)(p + BLOCK + i));
                    __m128i d = _mm_loadu_si128((const __m128i *)(p + 2 * BLOCK + i));
                    seen = _mm_or_si128(seen, _mm_or_si128(_mm_cmpeq_epi8(a, lf), _mm_or_si128(_mm_cmpeq_epi8(b, lf), _mm_cmpeq_epi8(d, lf))));
                }
            }
            c = shift(shift3, (uint32_t)c) ^ shift(shift2, (uint32_t)c0) ^ shift(shift1, (uint32_t)c1) ^ (uint32_t)c2;
            p += 3 * BLOCK;
            n -= 3 * BLOCK;
        } while (n >= 3 * BLOCK);
    }
    while (n >= 16) {
        c = _mm_crc32_u64(c, load64(p));
        c = _mm_crc32_u64(c, load64(p + 8));
        if (scan) seen = _mm_or_si128(seen, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), lf));
        p += 16;
        n -= 16;
    }
    int found = 0;
    if (n >= 8) {
        uint64_t v = load64(p);
        c = _mm_crc32_u64(c, v);
        if (scan) {
            uint64_t x = v ^ 0x0A0A0A0A0A0A0A0AULL;  // a zero byte where v has a newline
            found = ((x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL) != 0;
        }
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n > 0) {
        if (scan) found |= *p == 0x0A;
        c32 = _mm_crc32_u8(c32, *p++);
        n--;
    }
    if (scan) *newline = found || _mm_movemask_epi8(seen) != 0;
    return ~c32;
}

__attribute__((target("sse4.2")))
uint32_t beacon_crc32c_hw(uint32_t crc, const void *bytes, size_t n) {
    return crc32c_core(crc, bytes, n, 0, NULL);
}

__attribute__((target("sse4.2")))
uint32_t beacon_crc32c_hw_scan(uint32_t crc, const void *bytes, size_t n, int *newline) {
    return crc32c_core(crc, bytes, n, 1, newline);
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

uint32_t beacon_crc32c_hw_scan(uint32_t crc, const void *bytes, size_t n, int *newline) {
    *newline = memchr(bytes, 0x0A, n) != NULL;
    return beacon_crc32c_hw(crc, bytes, n);
}

#else
int beacon_crc32c_hw_available(void) { return 0; }
uint32_t beacon_crc32c_hw(uint32_t crc, const void *bytes, size_t n) { (void)bytes; (void)n; return crc; }
uint32_t beacon_crc32c_hw_scan(uint32_t crc, const void *bytes, size_t n, int *newline) {
    *newline = memchr(bytes, 0x0A, n) != NULL;
    return crc;
}
#endif
