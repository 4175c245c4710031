// quant_ref: writes tests/golden/quant-blocks.json from the reference engine's own ggml build.
//
// For every weight type smolrun dots (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K Q1_0 Q2_0
// TQ1_0 TQ2_0 IQ4_NL IQ4_XS IQ2_XXS IQ3_XXS IQ2_XS IQ2_S IQ3_S IQ1_S IQ1_M) it records a few deterministic rows of blocks (quantized by ggml itself, raw
// random bytes with sane scales, zero scales, extreme scales and quants), what ggml's
// dequantizer (type_traits.to_float) makes of them, one activation row quantized into the
// type's vec_dot_type by ggml's reference quantizer, and the vec_dot of each row with it: both
// the one llama.cpp really runs on this CPU (SIMD) and ggml's scalar *_generic where exported.
// A separate list covers the activation quantizers on edge-case rows (zero blocks, ties,
// large values). A third list, "weight_quantizers", covers the quantizers llama-quantize runs
// without an importance matrix (ggml_quantize_chunk) on edge-case rows: what
// `smolrun gguf requant` must reproduce byte for byte. Floats are written as hex of their little-endian f32 bytes, so they compare
// bit for bit; dot results as decimal (they are compared with a tolerance).
//
// Built and run by tools/oracle/ggml_ref.sh quant_ref. Our own code: it only calls ggml's public API
// and exported symbols.

#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Exported by libggml-base / libggml-cpu but not declared in the public headers.
void quantize_row_q8_K_ref(const float * x, void * y, int64_t k);
void dequantize_row_q8_K(const void * x, float * y, int64_t k);
typedef void (*vec_dot_fn)(int n, float * s, size_t bs, const void * x, size_t bx, const void * y, size_t by, int nrc);
#define GENERIC(name) void name(int, float *, size_t, const void *, size_t, const void *, size_t, int);
GENERIC(ggml_vec_dot_q1_0_q8_0_generic)
GENERIC(ggml_vec_dot_q4_0_q8_0_generic)
GENERIC(ggml_vec_dot_q4_1_q8_1_generic)
GENERIC(ggml_vec_dot_q5_1_q8_1_generic)
GENERIC(ggml_vec_dot_q8_0_q8_0_generic)
GENERIC(ggml_vec_dot_q2_K_q8_K_generic)
GENERIC(ggml_vec_dot_q3_K_q8_K_generic)
GENERIC(ggml_vec_dot_q4_K_q8_K_generic)
GENERIC(ggml_vec_dot_q5_K_q8_K_generic)
GENERIC(ggml_vec_dot_q6_K_q8_K_generic)
GENERIC(ggml_vec_dot_tq1_0_q8_K_generic)
GENERIC(ggml_vec_dot_tq2_0_q8_K_generic)
GENERIC(ggml_vec_dot_iq4_nl_q8_0_generic)
GENERIC(ggml_vec_dot_iq4_xs_q8_K_generic)
GENERIC(ggml_vec_dot_iq2_xxs_q8_K_generic)
GENERIC(ggml_vec_dot_iq3_xxs_q8_K_generic)
GENERIC(ggml_vec_dot_iq2_xs_q8_K_generic)
GENERIC(ggml_vec_dot_iq2_s_q8_K_generic)
GENERIC(ggml_vec_dot_iq3_s_q8_K_generic)
GENERIC(ggml_vec_dot_iq1_s_q8_K_generic)
GENERIC(ggml_vec_dot_iq1_m_q8_K_generic)

struct weight_type {
    enum ggml_type type;
    int n;                    // row length used for this type
    int f16_fields[2];        // byte offsets of the f16 scales in a block (-1: none)
    vec_dot_fn generic;       // ggml's scalar dot, when exported
};

static const struct weight_type WEIGHTS[] = {
    {GGML_TYPE_F32, 64, {-1, -1}, NULL},
    {GGML_TYPE_F16, 64, {-1, -1}, NULL},
    {GGML_TYPE_BF16, 64, {-1, -1}, NULL},
    {GGML_TYPE_Q4_0, 128, {0, -1}, ggml_vec_dot_q4_0_q8_0_generic},
    {GGML_TYPE_Q4_1, 128, {0, 2}, ggml_vec_dot_q4_1_q8_1_generic},
    // Not ggml_vec_dot_q5_0_q8_0_generic: in this build (GCC 12.2, -O3 -march=native, AVX-512)
    // it returns +240 instead of -16 for a quant of 0 (the (int8_t) cast is lost when the loop
    // is vectorized): one block of zero quants and activations of 1 gives 30720, not -2048.
    // llama.cpp never calls it on x86 (the AVX kernel is used); its SIMD result is recorded.
    {GGML_TYPE_Q5_0, 128, {0, -1}, NULL},
    {GGML_TYPE_Q5_1, 128, {0, 2}, ggml_vec_dot_q5_1_q8_1_generic},
    {GGML_TYPE_Q8_0, 128, {0, -1}, ggml_vec_dot_q8_0_q8_0_generic},
    {GGML_TYPE_Q2_K, 512, {80, 82}, ggml_vec_dot_q2_K_q8_K_generic},
    {GGML_TYPE_Q3_K, 512, {108, -1}, ggml_vec_dot_q3_K_q8_K_generic},
    {GGML_TYPE_Q4_K, 512, {0, 2}, ggml_vec_dot_q4_K_q8_K_generic},
    {GGML_TYPE_Q5_K, 512, {0, 2}, ggml_vec_dot_q5_K_q8_K_generic},
    {GGML_TYPE_Q6_K, 512, {208, -1}, ggml_vec_dot_q6_K_q8_K_generic},
    {GGML_TYPE_Q1_0, 256, {0, -1}, ggml_vec_dot_q1_0_q8_0_generic},
    {GGML_TYPE_Q2_0, 128, {0, -1}, NULL},
    {GGML_TYPE_TQ1_0, 512, {52, -1}, ggml_vec_dot_tq1_0_q8_K_generic},
    {GGML_TYPE_TQ2_0, 512, {64, -1}, ggml_vec_dot_tq2_0_q8_K_generic},
    // Last, so that the types above keep their bytes (#33).
    {GGML_TYPE_IQ4_NL, 128, {0, -1}, ggml_vec_dot_iq4_nl_q8_0_generic},
    {GGML_TYPE_IQ4_XS, 512, {0, -1}, ggml_vec_dot_iq4_xs_q8_K_generic},
    {GGML_TYPE_IQ2_XXS, 512, {0, -1}, ggml_vec_dot_iq2_xxs_q8_K_generic},
    {GGML_TYPE_IQ3_XXS, 512, {0, -1}, ggml_vec_dot_iq3_xxs_q8_K_generic},
    {GGML_TYPE_IQ2_XS, 512, {0, -1}, ggml_vec_dot_iq2_xs_q8_K_generic},
    {GGML_TYPE_IQ2_S, 512, {0, -1}, ggml_vec_dot_iq2_s_q8_K_generic},
    {GGML_TYPE_IQ3_S, 512, {0, -1}, ggml_vec_dot_iq3_s_q8_K_generic},
    {GGML_TYPE_IQ1_S, 512, {0, -1}, ggml_vec_dot_iq1_s_q8_K_generic},
    {GGML_TYPE_IQ1_M, 512, {-1, -1}, ggml_vec_dot_iq1_m_q8_K_generic},
};

// splitmix64: deterministic across platforms.
static uint64_t rng_state = 0x5EED5EED12345678ull;
static uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float unit(void) { return (float)(next_u64() >> 40) / 16777216.0f; }
// Roughly normal: sum of 4 uniforms, centred, times `scale`.
static float normalish(float scale) { return (unit() + unit() + unit() + unit() - 2.0f) * scale; }

static FILE * out;

static void put_hex(const void * p, size_t n) {
    const uint8_t * b = p;
    fputc('"', out);
    for (size_t i = 0; i < n; i++) fprintf(out, "%02x", b[i]);
    fputc('"', out);
}

// JSON has no inf/NaN: those are written as the strings "inf", "-inf", "nan".
static void put_float(float v) {
    if (isnan(v)) fprintf(out, "\"nan\"");
    else if (isinf(v)) fprintf(out, v > 0 ? "\"inf\"" : "\"-inf\"");
    else fprintf(out, "%.9g", v);
}

static void put_f16(uint8_t * p, float v) {
    ggml_fp16_t h = ggml_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

// ggml's reference quantizer for an activation type (exactly what smolrun must reproduce).
static void quantize_ref(enum ggml_type t, const float * x, void * y, int n) {
    if (t == GGML_TYPE_F32) {
        memcpy(y, x, (size_t) n * 4);
    } else if (t == GGML_TYPE_Q8_K) {
        quantize_row_q8_K_ref(x, y, n);
    } else {
        ggml_get_type_traits(t)->from_float_ref(x, y, n);
    }
}

static void dequantize(enum ggml_type t, const void * x, float * y, int n) {
    if (t == GGML_TYPE_Q8_K) {
        dequantize_row_q8_K(x, y, n);
    } else if (t == GGML_TYPE_F32) {
        memcpy(y, x, (size_t) n * 4);
    } else {
        ggml_get_type_traits(t)->to_float(x, y, n);
    }
}

// One activation row: f32 input, its reference quantization, and whether the CPU backend's own
// (possibly SIMD) from_float agrees byte for byte.
static void put_activation(enum ggml_type t, const char * name, const float * x, int n) {
    size_t sz = ggml_row_size(t, n);
    uint8_t * ref = calloc(1, sz), * cpu = calloc(1, sz);
    quantize_ref(t, x, ref, n);
    ggml_get_type_traits_cpu(t)->from_float(x, cpu, n);
    fprintf(out, "  {\"type\": \"%s\", \"case\": \"%s\", \"n\": %d, \"x\": ", ggml_type_name(t), name, n);
    put_hex(x, (size_t) n * 4);
    fprintf(out, ", \"q\": ");
    put_hex(ref, sz);
    fprintf(out, ", \"cpu_from_float_equal\": %s}", memcmp(ref, cpu, sz) == 0 ? "true" : "false");
    free(ref);
    free(cpu);
}

static void activation_cases(void) {
    const enum ggml_type types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q8_1, GGML_TYPE_Q8_K};
    fprintf(out, " \"activations\": [\n");
    int first = 1;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        enum ggml_type t = types[ti];
        const int n = 256;
        float x[256];
        // Non-finite inputs only where ggml's reference handles them with defined arithmetic
        // (the Q8_0/Q8_1 quantizers convert NaN to int8, which C leaves undefined).
        const int n_cases = (t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q8_1) ? 4 : 5;
        for (int c = 0; c < n_cases; c++) {
            const char * name = "";
            for (int i = 0; i < n; i++) x[i] = normalish(1.0f);
            if (c == 0) {
                name = "random";
            } else if (c == 1) {
                // A zero first half (zero blocks: d = 0 paths), then tiny values.
                name = "zeros_and_tiny";
                for (int i = 0; i < n; i++) x[i] = i < n / 2 ? 0.0f : normalish(1e-6f);
            } else if (c == 2) {
                // Exact ties: with max |x| = 127 the scale is 1, so k + 0.5 sits halfway.
                name = "ties";
                for (int i = 0; i < n; i++) x[i] = (float)((int)(next_u64() % 254) - 127) + 0.5f;
                for (int b = 0; b < n; b += 32) x[b] = (b / 32) % 2 ? -127.0f : 127.0f;
            } else if (c == 4) {
                name = "nan_and_inf";
                x[5] = NAN; x[6] = -NAN; x[100] = INFINITY; x[101] = -INFINITY;
            } else {
                // Large values, negative extremes first, and f16 overflow / subnormal ranges.
                name = "extremes";
                for (int i = 0; i < n; i++) x[i] = normalish(1e4f);
                x[0] = -70000.0f; x[1] = 65504.0f; x[2] = 1e-7f; x[3] = -3e-8f;
                x[40] = 1e30f; x[200] = -1e30f;
            }
            if (!first) fprintf(out, ",\n");
            first = 0;
            put_activation(t, name, x, n);
        }
    }
    fprintf(out, "\n ],\n");
}

static void weight_case(const struct weight_type * w, const char * name, const uint8_t * blocks,
                        const void * act, int first) {
    const int n = w->n;
    enum ggml_type vt = ggml_get_type_traits_cpu(w->type)->vec_dot_type;
    float * y = malloc((size_t) n * 4);
    dequantize(w->type, blocks, y, n);
    float dot = 0.0f, dot_generic = NAN;
    ggml_get_type_traits_cpu(w->type)->vec_dot(n, &dot, 0, blocks, 0, act, 0, 1);
    if (w->generic) w->generic(n, &dot_generic, 0, blocks, 0, act, 0, 1);
    (void) vt;
    if (!first) fprintf(out, ",\n");
    fprintf(out, "    {\"case\": \"%s\", \"w\": ", name);
    put_hex(blocks, ggml_row_size(w->type, n));
    fprintf(out, ", \"dequant\": ");
    put_hex(y, (size_t) n * 4);
    fprintf(out, ", \"dot\": ");
    put_float(dot);
    if (w->generic) {
        fprintf(out, ", \"dot_generic\": ");
        put_float(dot_generic);
    }
    fprintf(out, "}");
    free(y);
}

static void weight_cases(void) {
    fprintf(out, " \"weights\": [\n");
    for (size_t wi = 0; wi < sizeof(WEIGHTS) / sizeof(WEIGHTS[0]); wi++) {
        const struct weight_type * w = &WEIGHTS[wi];
        const int n = w->n;
        const enum ggml_type t = w->type;
        const enum ggml_type vt = ggml_get_type_traits_cpu(t)->vec_dot_type;
        const size_t row = ggml_row_size(t, n);
        const size_t bsz = ggml_type_size(t);
        const int nb = (int)(row / bsz);
        float * x = malloc((size_t) n * 4);
        uint8_t * blocks = malloc(row);
        uint8_t * act = calloc(1, ggml_row_size(vt, n));

        for (int i = 0; i < n; i++) x[i] = normalish(1.0f);
        quantize_ref(vt, x, act, n);
        // The f32 row itself is not written: the activation quantizers have their own cases.
        fprintf(out, "  {\"type\": \"%s\", \"vec_dot_type\": \"%s\", \"n\": %d, \"act\": ", ggml_type_name(t),
                ggml_type_name(vt), n);
        put_hex(act, ggml_row_size(vt, n));
        fprintf(out, ",\n   \"cases\": [\n");

        // 1. What ggml's own quantizer writes for a realistic row (weights ~ N(0, 0.05)).
        float * src = malloc((size_t) n * 4);
        for (int i = 0; i < n; i++) src[i] = normalish(0.05f);
        if (t == GGML_TYPE_F32) memcpy(blocks, src, row);
        else if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) ggml_get_type_traits(t)->from_float_ref(src, blocks, n);
        else {
            // The 2- and 3-bit i-quants need an importance matrix: x^2 plus a floor (what
            // llama-imatrix gathers is a mean of squared activations; any positive weights do).
            float * imatrix = NULL;
            if (ggml_quantize_requires_imatrix(t)) {
                imatrix = malloc((size_t) n * 4);
                for (int i = 0; i < n; i++) imatrix[i] = 1e-3f + src[i] * src[i];
            }
            ggml_quantize_chunk(t, src, blocks, 0, 1, n, imatrix);
            free(imatrix);
        }
        weight_case(w, "quantized", blocks, act, 1);

        // 2. Random bytes everywhere, with moderate random scales (every quant bit pattern).
        for (size_t i = 0; i < row; i++) blocks[i] = (uint8_t) next_u64();
        if (t == GGML_TYPE_F32) for (int i = 0; i < n; i++) ((float *) blocks)[i] = normalish(3.0f);
        if (t == GGML_TYPE_F16) for (int i = 0; i < n; i++) put_f16(blocks + 2 * i, normalish(3.0f));
        if (t == GGML_TYPE_BF16) for (int i = 0; i < n; i++) blocks[2 * i + 1] = 0x3f + (blocks[2 * i + 1] & 0x80);
        for (int b = 0; b < nb; b++)
            for (int k = 0; k < 2; k++)
                if (w->f16_fields[k] >= 0) put_f16(blocks + b * bsz + w->f16_fields[k], normalish(0.02f));
        weight_case(w, "random_bytes", blocks, act, 0);

        // 3. Zero scales in the first block (and negative ones in the rest), random quants.
        for (int b = 0; b < nb; b++)
            for (int k = 0; k < 2; k++)
                if (w->f16_fields[k] >= 0) put_f16(blocks + b * bsz + w->f16_fields[k], b == 0 ? 0.0f : -0.01f);
        if (w->f16_fields[0] < 0) memset(blocks, 0, row / 2); // float types: a run of zeros
        weight_case(w, "zero_and_negative_scales", blocks, act, 0);

        // 4. Extremes: every quant byte 0xFF or 0x00 alternating by block, largest finite f16 scales.
        for (int b = 0; b < nb; b++) {
            memset(blocks + b * bsz, b % 2 ? 0x00 : 0xFF, bsz);
            for (int k = 0; k < 2; k++)
                if (w->f16_fields[k] >= 0) put_f16(blocks + b * bsz + w->f16_fields[k], k ? -65504.0f : 65504.0f);
        }
        if (t == GGML_TYPE_F32) for (int i = 0; i < n; i++) ((float *) blocks)[i] = i % 2 ? 3.0e38f : -1e-45f;
        if (t == GGML_TYPE_F16) for (int i = 0; i < n; i++) put_f16(blocks + 2 * i, i % 2 ? 65504.0f : 6e-8f);
        if (t == GGML_TYPE_BF16) for (int i = 0; i < n; i++) { blocks[2 * i] = 0xff; blocks[2 * i + 1] = i % 2 ? 0x7f : 0x00; }
        weight_case(w, "extremes", blocks, act, 0);

        fprintf(out, "\n   ]}%s\n", wi + 1 < sizeof(WEIGHTS) / sizeof(WEIGHTS[0]) ? "," : "");
        free(src);
        free(x);
        free(blocks);
        free(act);
    }
    fprintf(out, " ],\n");
}

// The weight quantizers llama-quantize calls (ggml_quantize_chunk, no importance matrix) on
// rows of 512: random, zero blocks beside tiny values, negative only, one huge value, values on
// the quant grid's ties, and large values near f16's range. Its own generator, so the lists
// above keep their bytes.
static void weight_quantizer_cases(void) {
    const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                                    GGML_TYPE_Q2_K, GGML_TYPE_Q2_0, GGML_TYPE_Q1_0, GGML_TYPE_TQ2_0,
                                    GGML_TYPE_TQ1_0, GGML_TYPE_F16, GGML_TYPE_BF16,
                                    GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
    static const char * names[] = {"random", "zeros_and_tiny", "negative_only", "one_huge", "ties", "extremes"};
    uint64_t rng = 0x5eed1234abcdULL;
    #define RNG_UNIT() (rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, (float)(rng >> 40) / (float)(1u << 24))
    fprintf(out, " \"weight_quantizers\": [\n");
    int first = 1;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const enum ggml_type t = types[ti];
        const int n = 512;
        float x[512];
        for (int c = 0; c < 6; c++) {
            for (int i = 0; i < n; i++) x[i] = (RNG_UNIT() + RNG_UNIT() + RNG_UNIT() - 1.5f) * 0.05f;
            if (c == 1) {
                for (int i = 0; i < n; i++) x[i] = i < 256 ? 0.0f : x[i] * 1e-5f;
                for (int i = 256; i < 288; i++) x[i] = 0.0f;
            } else if (c == 2) {
                for (int i = 0; i < n; i++) x[i] = -fabsf(x[i]) - 0.01f;
            } else if (c == 3) {
                x[3] = 40.0f; x[300] = -1000.0f;
            } else if (c == 4) {
                // Integers and half-integers up to +-8: exact ties of round(x / d) for d = 1.
                for (int i = 0; i < n; i++) x[i] = (float)((int)(RNG_UNIT() * 33.0f) - 16) * 0.5f;
                for (int b = 0; b < n; b += 32) x[b] = (b / 32) % 2 ? -8.0f : 8.0f;
            } else if (c == 5) {
                for (int i = 0; i < n; i++) x[i] *= 6e5f;
                x[0] = 65504.0f; x[1] = -65519.0f; x[2] = 1e-7f;
            }
            const size_t sz = ggml_row_size(t, n);
            uint8_t * q = calloc(1, sz);
            ggml_quantize_chunk(t, x, q, 0, 1, n, NULL);
            if (!first) fprintf(out, ",\n");
            first = 0;
            fprintf(out, "  {\"type\": \"%s\", \"case\": \"%s\", \"n\": %d, \"x\": ", ggml_type_name(t), names[c], n);
            put_hex(x, (size_t) n * 4);
            fprintf(out, ", \"q\": ");
            put_hex(q, sz);
            fprintf(out, "}");
            free(q);
        }
    }
    #undef RNG_UNIT
    fprintf(out, "\n ]\n");
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
        return 2;
    }
    out = fopen(argv[1], "w");
    if (!out) {
        perror(argv[1]);
        return 1;
    }
    ggml_cpu_init();
    fprintf(out, "{\n \"producer\": \"tools/oracle/quant_ref.c against ggml (llama.cpp b11434)\",\n");
    activation_cases();
    weight_cases();
    weight_quantizer_cases();
    fprintf(out, "}\n");
    fclose(out);
    return 0;
}
