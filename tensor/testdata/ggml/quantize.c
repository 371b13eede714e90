// quantize runs ggml's own quantisers (ggml_quantize_chunk with no importance
// matrix, which llama-quantize calls and which takes quantize_row_*_ref)
// over the float rows that the Go test TestGoldenWriteQuantInput writes,
// producing the golden output the tensor package's QuantizeRow is checked
// against.
//
// Input: uint32 row count, uint32 row length, then the float32 rows.
// Output: uint64 FNV-1a hash of the whole input file, then per type: uint32
// ggml type, uint32 byte count, then the bytes. All little-endian. See make.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"

static const enum ggml_type types[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
    GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
    GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ROWS OUT\n", argv[0]);
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    FILE *out = fopen(argv[2], "wb");
    if (!in || !out) {
        perror("quantize: open");
        return 1;
    }
    uint32_t hdr[2];
    if (fread(hdr, sizeof hdr, 1, in) != 1) {
        fprintf(stderr, "quantize: short header\n");
        return 1;
    }
    int64_t nrows = hdr[0], n_per_row = hdr[1], n = nrows * n_per_row;
    float *src = malloc((size_t)n * sizeof(float));
    if (!src || fread(src, sizeof(float), (size_t)n, in) != (size_t)n) {
        fprintf(stderr, "quantize: short input\n");
        return 1;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)hdr;
    for (size_t i = 0; i < sizeof hdr; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    p = (const unsigned char *)src;
    for (size_t i = 0; i < (size_t)n * sizeof(float); i++) h = (h ^ p[i]) * 0x100000001b3ull;
    fwrite(&h, sizeof h, 1, out);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        enum ggml_type type = types[t];
        size_t size = nrows * ggml_row_size(type, n_per_row);
        void *dst = calloc(1, size);
        size_t got = ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, NULL);
        if (got != size) {
            fprintf(stderr, "quantize: %s wrote %zu bytes, want %zu\n", ggml_type_name(type), got, size);
            return 1;
        }
        uint32_t ohdr[2] = {type, (uint32_t)size};
        if (fwrite(ohdr, sizeof ohdr, 1, out) != 1 || fwrite(dst, 1, size, out) != size) {
            perror("quantize: write");
            return 1;
        }
        fprintf(stderr, "%-6s %lld rows, %zu bytes\n", ggml_type_name(type), (long long)nrows, size);
        free(dst);
    }
    if (fclose(out) != 0) {
        perror("quantize: close");
        return 1;
    }
    return 0;
}
