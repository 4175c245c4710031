/*
 * smolrun's C ABI in one program: prints the N greedy tokens that follow PROMPT, exactly as
 * `smolrun run -m MODEL -p PROMPT -n N --temp 0` prints them (the text on stdout, then a
 * newline; speeds on stderr).
 *
 *     tools/build-c-example.sh                              # prints the program's path
 *     target/c-example/x86_64-unknown-linux-gnu/smolrun-c-example MODEL "Once upon a time" 16
 *     tools/build-c-example.sh aarch64-unknown-linux-musl   # a static binary for a device
 *
 * MODEL is a path to a .gguf file. N < 0 runs until the end of text or a full context.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "smolrun.h"

/* Each piece of text as soon as it is whole UTF-8; stops the generation when stdout fails
 * (a closed pipe). */
static int print_piece(const char *piece, size_t len, void *user_data) {
    (void)user_data;
    if (fwrite(piece, 1, len, stdout) != len || fflush(stdout) != 0) {
        return 1;
    }
    return 0;
}

/* Prints what went wrong, as the library says it, and returns the exit status. */
static int fail(const char *what, smolrun_status status) {
    fprintf(stderr, "%s: %s (%s)\n", what, smolrun_last_error(), smolrun_status_name(status));
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL PROMPT N\n", argv[0]);
        return 2;
    }
    char *end;
    errno = 0;
    long n = strtol(argv[3], &end, 10);
    if (errno != 0 || end == argv[3] || *end != '\0' || n > INT32_MAX || n < INT32_MIN) {
        fprintf(stderr, "N must be a whole number of tokens, not '%s'\n", argv[3]);
        return 2;
    }

    smolrun_engine *engine = NULL;
    smolrun_status status = smolrun_open(argv[1], NULL, &engine);
    if (status != SMOLRUN_OK) {
        return fail(argv[1], status);
    }

    /* Greedy: temperature 0 (the seed is then unused). */
    smolrun_result result;
    status = smolrun_generate(engine, argv[2], (int32_t)n, 0.0f, 0, print_piece, NULL, &result);
    if (status != SMOLRUN_OK) {
        int code = fail("generate", status);
        smolrun_free(engine);
        return code;
    }
    putchar('\n');
    fprintf(stderr, "prompt: %u tokens, %.1f tok/s | generated: %u tokens, %.1f tok/s\n",
            (unsigned)result.prompt_tokens, result.prompt_tokens_per_second,
            (unsigned)result.generated_tokens, result.generated_tokens_per_second);
    smolrun_free(engine);
    return 0;
}
