// quantize runs ggml's own quantisers (ggml_quantize_chunk with no importance
// matrix, which llama-quantize calls and which takes quantize_row_*_ref)
// over the float rows that the Go test TestGoldenWriteQuantInput writes,
// producing the golden output the tensor package's QuantizeRow is checked
// against. Each row is quantised in a child process, because ggml's IQ3
// quantisers abort on some inputs; the rows where the child dies are listed.
//
// Input: uint32 row count, uint32 row length, then the float32 rows.
// Output: uint64 FNV-1a hash of the whole input file, then per type: uint32
// ggml type, uint32 byte count, the bytes (zeros for a row whose child
// died), uint32 count of those rows, their uint32 indices. All
// little-endian. See make.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ggml.h"

static const enum ggml_type types[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
    GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
    GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S,
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ROWS OUT\n", argv[0]);
        return 2;
    }
    setenv("GGML_NO_BACKTRACE", "1", 1); // the aborts are expected
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
        size_t rs = ggml_row_size(type, n_per_row), size = nrows * rs;
        // Shared with the children, which write one row each.
        unsigned char *dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        uint32_t *aborted = calloc((size_t)nrows, sizeof(uint32_t));
        uint32_t naborted = 0;
        if (dst == MAP_FAILED || !aborted) {
            perror("quantize: alloc");
            return 1;
        }
        memset(dst, 0, size);
        ggml_quantize_init(type); // once, in the parent
        for (int64_t r = 0; r < nrows; r++) {
            fflush(NULL);
            pid_t pid = fork();
            if (pid < 0) {
                perror("quantize: fork");
                return 1;
            }
            if (pid == 0) {
                freopen("/dev/null", "w", stderr);
                size_t got = ggml_quantize_chunk(type, src + r * n_per_row, dst + r * rs, 0, 1, n_per_row, NULL);
                _exit(got == rs ? 0 : 3);
            }
            int st;
            if (waitpid(pid, &st, 0) != pid) {
                perror("quantize: wait");
                return 1;
            }
            if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
                fprintf(stderr, "quantize: %s wrote the wrong size\n", ggml_type_name(type));
                return 1;
            }
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                memset(dst + r * rs, 0, rs);
                aborted[naborted++] = (uint32_t)r;
            }
        }
        uint32_t ohdr[2] = {type, (uint32_t)size};
        if (fwrite(ohdr, sizeof ohdr, 1, out) != 1 || fwrite(dst, 1, size, out) != size ||
            fwrite(&naborted, sizeof naborted, 1, out) != 1 ||
            fwrite(aborted, sizeof(uint32_t), naborted, out) != naborted) {
            perror("quantize: write");
            return 1;
        }
        fprintf(stderr, "%-7s %lld rows, %zu bytes, %u aborted\n", ggml_type_name(type), (long long)nrows, size, naborted);
        munmap(dst, size);
        free(aborted);
    }
    if (fclose(out) != 0) {
        perror("quantize: close");
        return 1;
    }
    return 0;
}
