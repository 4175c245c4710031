// gelu_table: writes the reference engine's GELU lookup table, the one its CPU backend reads for
// every GELU/GEGLU activation of an f32 input in (-10, 10): entry i holds the f16 bits of
// GELU(x) for the f16 input with bits i. 65536 little-endian u16, 128 KiB.
//   gelu_table OUT.bin
// Built and run by tools/oracle/ggml_ref.sh gelu_table. Our program: it only calls ggml_cpu_init
// (which fills the table) and copies the table out.
#include <stdint.h>
#include <stdio.h>

void ggml_cpu_init(void);
extern uint16_t ggml_table_gelu_f16[1 << 16];

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gelu_table OUT.bin\n");
        return 2;
    }
    ggml_cpu_init();
    FILE * f = fopen(argv[1], "wb");
    if (!f || fwrite(ggml_table_gelu_f16, sizeof(uint16_t), 1 << 16, f) != 1 << 16 || fclose(f) != 0) {
        fprintf(stderr, "gelu_table: cannot write %s\n", argv[1]);
        return 1;
    }
    return 0;
}
