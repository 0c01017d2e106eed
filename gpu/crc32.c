/*
 * crc32.c — CRC-32 (see crc32.h): slicing by 8 bytes with tables built once,
 * and combination of two CRCs by multiplying by x^(8n) modulo the
 * polynomial, so pieces of one capture can be summed in parallel and joined.
 * In the reflected representation bit 31 is the coefficient of x^0.
 */
#include "gpu/crc32.h"

#include <pthread.h>
#include <string.h>

#define POLY 0xEDB88320u

static uint32_t table[8][256];
static uint32_t x2n[64];		/* x^(2^k) mod P */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* a * b mod P, both reflected. */
static uint32_t mulmod(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
	uint32_t p = 1u << 30;	/* x^1 */
	x2n[0] = p;
	for (int k = 1; k < 64; k++)
		x2n[k] = p = mulmod(p, p);
}

uint32_t ck_crc32(uint32_t crc, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	uint32_t c = ~crc;

	pthread_once(&once, init);
	while (n && ((uintptr_t)p & 7)) {
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
		n--;
	}
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		w ^= c;		/* little-endian: the low 32 bits meet the CRC */
		c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
		    table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
		    table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
	return ~c;
}

uint32_t ck_crc32_combine(uint32_t a, uint32_t b, uint64_t len_b)
{
	uint32_t p = 1u << 31;	/* x^0 */

	pthread_once(&once, init);
	/* x^(8 * len_b): bit k of len_b contributes x^(2^(k+3)). */
	for (unsigned k = 3; len_b; len_b >>= 1, k++)
		if (len_b & 1)
			p = mulmod(x2n[k & 63], p);
	return mulmod(p, a) ^ b;
}
