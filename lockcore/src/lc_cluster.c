/* lc_cluster.c — Redis Cluster's hash slots and redirects (lc_cluster.h).
 * The slot is the cluster specification's: CRC16-CCITT (XMODEM: polynomial
 * 0x1021, initial value 0) of the key or of its hash tag, mod 16384. */
#include "lc_cluster.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint16_t)(unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

int lc_key_slot(const char *key, size_t len)
{
    /* The tag: between the first '{' and the first '}' after it, when
     * something lies between them; else the whole key ("foo{}{bar}" hashes
     * all of itself, "foo{{bar}}zap" hashes "{bar"). */
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t start = (size_t)(open - key) + 1;
        const char *close = memchr(key + start, '}', len - start);
        if (close != NULL && close > key + start)
            return crc16(key + start, (size_t)(close - (key + start))) & (LC__SLOTS - 1);
    }
    return crc16(key, len) & (LC__SLOTS - 1);
}

/* A decimal in lo..hi spanning exactly [s, e). */
static int number(const char *s, const char *e, long lo, long hi, int *out)
{
    if (s == e || e - s > 6)
        return -1;
    long v = 0;
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int lc__redirect_parse(const char *str, size_t len, lc__redirect *out)
{
    const char *end = str + len;
    memset(out, 0, sizeof *out);
    if (len > 6 && memcmp(str, "MOVED ", 6) == 0) {
        out->kind = LC__REDIR_MOVED;
        str += 6;
    } else if (len > 4 && memcmp(str, "ASK ", 4) == 0) {
        out->kind = LC__REDIR_ASK;
        str += 4;
    } else {
        return -1;
    }
    const char *sp = memchr(str, ' ', (size_t)(end - str));
    if (sp == NULL || number(str, sp, 0, LC__SLOTS - 1, &out->slot) != 0)
        return -1;
    const char *host = sp + 1, *colon = NULL;
    for (const char *p = host; p < end; p++)
        if (*p == ':')
            colon = p;
    if (colon == NULL || number(colon + 1, end, 1, 65535, &out->port) != 0)
        return -1;
    const char *hend = colon;
    if (hend - host >= 2 && host[0] == '[' && hend[-1] == ']') {
        host++;
        hend--;
    }
    size_t hlen = (size_t)(hend - host);
    if (hlen >= sizeof out->host || memchr(host, ' ', hlen) != NULL)
        return -1;
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    return 0;
}
