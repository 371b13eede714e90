// dequant runs ggml's own dequantisers (ggml_get_type_traits(type)->to_float,
// i.e. dequantize_row_*) over the blocks that the Go test TestGoldenWriteBlocks
// writes, producing the golden output the tensor package is checked against.
//
// Input, per type: uint32 ggml type, uint32 block count, uint32 block bytes,
// then the blocks. Output, per type: uint32 ggml type, uint32 value count,
// then the float32 values. All little-endian. See make.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s BLOCKS OUT\n", argv[0]);
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    FILE *out = fopen(argv[2], "wb");
    if (!in || !out) {
        perror("dequant: open");
        return 1;
    }
    uint32_t hdr[3];
    while (fread(hdr, sizeof hdr, 1, in) == 1) {
        uint32_t type = hdr[0], nblocks = hdr[1], bytes = hdr[2];
        if (type >= GGML_TYPE_COUNT || ggml_type_size((enum ggml_type)type) != bytes) {
            fprintf(stderr, "dequant: type %u with %u-byte blocks is not ggml's\n", type, bytes);
            return 1;
        }
        const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)type);
        if (!tr->to_float) {
            fprintf(stderr, "dequant: ggml has no to_float for %s\n", tr->type_name);
            return 1;
        }
        int64_t n = (int64_t)nblocks * tr->blck_size;
        void *src = malloc((size_t)nblocks * bytes);
        float *dst = malloc((size_t)n * sizeof(float));
        if (!src || !dst || fread(src, bytes, nblocks, in) != nblocks) {
            fprintf(stderr, "dequant: %s: short input\n", tr->type_name);
            return 1;
        }
        tr->to_float(src, dst, n);
        uint32_t ohdr[2] = {type, (uint32_t)n};
        if (fwrite(ohdr, sizeof ohdr, 1, out) != 1 || fwrite(dst, sizeof(float), (size_t)n, out) != (size_t)n) {
            perror("dequant: write");
            return 1;
        }
        fprintf(stderr, "%-8s %u blocks\n", tr->type_name, nblocks);
        free(src);
        free(dst);
    }
    if (fclose(out) != 0) {
        perror("dequant: close");
        return 1;
    }
    return 0;
}
