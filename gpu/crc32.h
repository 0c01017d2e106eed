/*
 * crc32.h — CRC-32 as zip files carry it (ISO-HDLC, reflected polynomial
 * 0xEDB88320, initial and final xor ~0), computed by libckptfs from the
 * captured bytes in host memory after their copy, so a file written by
 * ckptfs.torch.save is a valid zip that plain torch.load (and unzip) accept.
 */
#ifndef CKPTFS_GPU_CRC32_H
#define CKPTFS_GPU_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continue crc (0 to start) over n bytes at p. */
uint32_t ck_crc32(uint32_t crc, const void *p, size_t n);
/* The CRC of A followed by B, from crc(A), crc(B) and B's length. */
uint32_t ck_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
