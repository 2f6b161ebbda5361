/* CRC-32C (Castagnoli) by the SSE4.2 crc32 instruction, for loops that run without the GIL
 * (the crc32c package's function needs it). Three streams are interleaved (the instruction's
 * latency is three times its throughput) and joined by shifting a CRC over zeros with tables,
 * as Mark Adler's crc32c.c does. kfs_crc32c_hw_available() says whether this CPU has the
 * instruction; callers fall back to the crc32c package when it does not (or off x86-64).
 *
 *   uint32_t kfs_crc32c(uint32_t crc, const void* buf, size_t len): crc32c.crc32c(buf, crc)
 */
#ifndef KFS_CRC32C_HW_H
#define KFS_CRC32C_HW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KFS_CRC32C_POLY 0x82f63b78u  /* reflected */
#define KFS_CRC32C_LONG 8192         /* bytes per stream of a long block (3 streams) */
#define KFS_CRC32C_SHORT 256         /* bytes per stream of a short block */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

static uint32_t kfs_crc32c_long[4][256], kfs_crc32c_short[4][256];
static int kfs_crc32c_ready = -1; /* -1: not yet checked; 0: no instruction; 1: tables made */

static uint32_t kfs_gf2_times(const uint32_t* mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1)
            sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void kfs_gf2_square(uint32_t* square, const uint32_t* mat) {
    for (int n = 0; n < 32; n++)
        square[n] = kfs_gf2_times(mat, mat[n]);
}

/* the operator that feeds len zero bytes (a power of two) through a CRC */
static void kfs_crc32c_zeros_op(uint32_t* even, size_t len) {
    uint32_t odd[32], row = 1;
    odd[0] = KFS_CRC32C_POLY; /* one zero bit */
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    kfs_gf2_square(even, odd); /* two zero bits */
    kfs_gf2_square(odd, even); /* four */
    do {
        kfs_gf2_square(even, odd); /* eight: one byte, then doubling */
        len >>= 1;
        if (len == 0)
            return;
        kfs_gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void kfs_crc32c_zeros(uint32_t zeros[4][256], size_t len) {
    uint32_t op[32];
    kfs_crc32c_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = kfs_gf2_times(op, n);
        zeros[1][n] = kfs_gf2_times(op, n << 8);
        zeros[2][n] = kfs_gf2_times(op, n << 16);
        zeros[3][n] = kfs_gf2_times(op, n << 24);
    }
}

static inline uint32_t kfs_crc32c_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

/* Whether the instruction is there; makes the tables the first time (call it with the GIL
 * held: it is the only writer). */
static int kfs_crc32c_hw_available(void) {
    if (kfs_crc32c_ready < 0) {
        __builtin_cpu_init();
        kfs_crc32c_ready = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        if (kfs_crc32c_ready) {
            kfs_crc32c_zeros(kfs_crc32c_long, KFS_CRC32C_LONG);
            kfs_crc32c_zeros(kfs_crc32c_short, KFS_CRC32C_SHORT);
        }
    }
    return kfs_crc32c_ready;
}

static inline uint64_t kfs_load64(const unsigned char* p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* three streams of `block` bytes each from `next`, joined into crc0 */
#define KFS_CRC32C_BLOCKS(block, zeros)                                                     \
    while (len >= 3 * (block)) {                                                            \
        uint64_t crc1 = 0, crc2 = 0;                                                        \
        const unsigned char* end = next + (block);                                          \
        do {                                                                                \
            crc0 = __builtin_ia32_crc32di(crc0, kfs_load64(next));                          \
            crc1 = __builtin_ia32_crc32di(crc1, kfs_load64(next + (block)));                \
            crc2 = __builtin_ia32_crc32di(crc2, kfs_load64(next + 2 * (block)));            \
            next += 8;                                                                      \
        } while (next < end);                                                               \
        crc0 = kfs_crc32c_shift(zeros, (uint32_t)crc0) ^ crc1;                              \
        crc0 = kfs_crc32c_shift(zeros, (uint32_t)crc0) ^ crc2;                              \
        next += 2 * (block);                                                                \
        len -= 3 * (block);                                                                 \
    }

/* CRC-32C of buf[0:len] continuing crc (0 to start); only after kfs_crc32c_hw_available()
 * said 1. Needs no GIL. */
__attribute__((target("sse4.2"))) static uint32_t kfs_crc32c(uint32_t crc, const void* buf,
                                                             size_t len) {
    const unsigned char* next = (const unsigned char*)buf;
    uint64_t crc0 = crc ^ 0xffffffffu;
    while (len && ((uintptr_t)next & 7) != 0) {
        crc0 = __builtin_ia32_crc32qi((uint32_t)crc0, *next++);
        len--;
    }
    KFS_CRC32C_BLOCKS(KFS_CRC32C_LONG, kfs_crc32c_long)
    KFS_CRC32C_BLOCKS(KFS_CRC32C_SHORT, kfs_crc32c_short)
    while (len >= 8) {
        crc0 = __builtin_ia32_crc32di(crc0, kfs_load64(next));
        next += 8;
        len -= 8;
    }
    while (len) {
        crc0 = __builtin_ia32_crc32qi((uint32_t)crc0, *next++);
        len--;
    }
    return (uint32_t)crc0 ^ 0xffffffffu;
}

#else /* no SSE4.2 instruction to use: callers take the crc32c package */

static int kfs_crc32c_hw_available(void) { return 0; }
static uint32_t kfs_crc32c(uint32_t crc, const void* buf, size_t len) {
    (void)buf;
    (void)len;
    return crc;
}

#endif
#endif
