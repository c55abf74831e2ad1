// ggml_quantize_ref.c — a thin command-line front of ggml's own quantizers and dequantizers, for the peer
// check tests/peer/check_kquants_ggml.py. Linked against libggml-base.a of the llama.cpp build made by
// tests/peer/build_llama_cpp.sh (the script compiles it). Files are raw little-endian arrays.
//
//   ggml_quantize_ref ref     TYPE ROWS COLS IN.f32 OUT.bin            ggml type traits' from_float_ref
//                                                                      (quantize_row_*_ref)
//   ggml_quantize_ref chunk   TYPE ROWS COLS IN.f32 OUT.bin [IMATRIX.f32]   ggml_quantize_chunk: what
//                                                                      llama-quantize calls, with the
//                                                                      importance matrix (COLS floats) or without
//   ggml_quantize_ref dequant TYPE ROWS COLS IN.bin OUT.f32            the type's to_float
//
// TYPE is ggml's name, case-insensitive (q4_k, Q6_K, iq4_nl, ...).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ggml.h"

static void die(const char* what) {
    fprintf(stderr, "ggml_quantize_ref: %s\n", what);
    exit(2);
}

static void* read_file(const char* path, size_t expect) {
    FILE* f = fopen(path, "rb");
    if (!f) die(path);
    void* buf = malloc(expect ? expect : 1);
    if (fread(buf, 1, expect, f) != expect) die("short read");
    fclose(f);
    return buf;
}

static void write_file(const char* path, const void* buf, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) die(path);
    fclose(f);
}

int main(int argc, char** argv) {
    if (argc < 7) die("usage: ref|chunk|dequant TYPE ROWS COLS IN OUT [IMATRIX]");
    const char* mode = argv[1];
    enum ggml_type type = GGML_TYPE_COUNT;
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char* name = ggml_type_name((enum ggml_type)t);
        if (name && strcasecmp(name, argv[2]) == 0) type = (enum ggml_type)t;
    }
    if (type == GGML_TYPE_COUNT) die("unknown type");
    const int64_t rows = atoll(argv[3]), cols = atoll(argv[4]);
    const struct ggml_type_traits* tr = ggml_get_type_traits(type);
    if (cols % tr->blck_size) die("columns not a multiple of the block");
    const size_t n = (size_t)(rows * cols), bytes = (size_t)rows * ggml_row_size(type, cols);

    if (strcmp(mode, "dequant") == 0) {
        void* q = read_file(argv[5], bytes);
        float* y = malloc(n * sizeof(float));
        tr->to_float(q, y, (int64_t)n);
        write_file(argv[6], y, n * sizeof(float));
        return 0;
    }
    float* x = read_file(argv[5], n * sizeof(float));
    void* q = calloc(bytes, 1);
    if (strcmp(mode, "ref") == 0) {
        if (!tr->from_float_ref) die("no reference quantizer for this type");
        tr->from_float_ref(x, q, (int64_t)n);
    } else if (strcmp(mode, "chunk") == 0) {
        float* imatrix = argc > 7 ? read_file(argv[7], (size_t)cols * sizeof(float)) : NULL;
        if (ggml_quantize_chunk(type, x, q, 0, rows, cols, imatrix) != bytes) die("ggml_quantize_chunk size");
    } else {
        die("mode must be ref, chunk or dequant");
    }
    write_file(argv[6], q, bytes);
    return 0;
}
