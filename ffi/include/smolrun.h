/*
 * smolrun.h: the C ABI of smolrun's engine (the crate smolrun-ffi; libsmolrun_ffi.a or
 * libsmolrun_ffi.so). Open a GGUF model, tokenize, generate text with a callback, cancel from
 * another thread, read the last error as text.
 *
 *     smolrun_engine *engine;
 *     if (smolrun_open("gemma-3-270m-q4_k_m.gguf", NULL, &engine) != SMOLRUN_OK) {
 *         fprintf(stderr, "%s\n", smolrun_last_error());
 *         return 1;
 *     }
 *     smolrun_generate(engine, "The capital of France is", 16, 0.0f, 0, print_piece, NULL, NULL);
 *     smolrun_free(engine);
 *
 * Linking the static library: `cc main.c libsmolrun_ffi.a -lpthread -ldl -lm` (glibc), or
 * with a musl toolchain `cc -static main.c libsmolrun_ffi.a`, adding the libunwind.a of Rust's
 * musl target when the toolchain's libgcc_eh is built for glibc (tools/build-c-example.sh
 * shows both).
 *
 * Rules of the road:
 *  - Every function returns a status; a NULL handle or pointer where one is required returns
 *    SMOLRUN_NULL_ARGUMENT, never crashes. After any status other than SMOLRUN_OK,
 *    smolrun_last_error() says what went wrong and what to do next.
 *  - A Rust panic inside the engine is caught at the boundary and returned as SMOLRUN_PANIC; it
 *    never unwinds into C nor aborts the process (the library must be built with panic=unwind,
 *    Cargo's default). An engine whose call panicked answers SMOLRUN_PANIC from then on: free it
 *    and open the model again.
 *  - Calls on one engine run one at a time (a second call waits for the first), except
 *    smolrun_cancel, which any thread may call at any time while the engine is alive.
 *    Different engines are independent and may run at the same time.
 *  - Strings given to smolrun are UTF-8 and NUL-terminated; text given back (the pieces of
 *    smolrun_generate) is UTF-8 with a length and no NUL.
 */
#ifndef SMOLRUN_H
#define SMOLRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What every function returns. The error kinds mirror the engine's EngineError::kind();
 * smolrun_status_name() gives the same short names ("model-not-found", ...). */
typedef enum smolrun_status {
    SMOLRUN_OK = 0,
    /* No such model: not a file, not in the models folder, not a known short name. */
    SMOLRUN_MODEL_NOT_FOUND = 1,
    /* Not a GGUF model this engine runs (damaged header, unknown architecture or type). */
    SMOLRUN_BAD_FILE = 2,
    /* The model does not fit in the memory (or address space) this run may use. */
    SMOLRUN_DOES_NOT_FIT = 3,
    /* An option has a value it cannot take (0 threads, a context longer than trained...). */
    SMOLRUN_BAD_OPTION = 4,
    /* The prompt cannot run: empty, not UTF-8, or longer than the context. */
    SMOLRUN_BAD_PROMPT = 5,
    /* Reading the model file failed (the message names the tensor). */
    SMOLRUN_READ = 6,
    /* The forward pass failed or gave non-finite logits (a damaged file). */
    SMOLRUN_MODEL = 7,
    /* Generation stopped: less memory left than the floor. The text so far was delivered. */
    SMOLRUN_LOW_MEMORY = 8,
    /* smolrun_cancel stopped the generation. The text so far was delivered. */
    SMOLRUN_CANCELLED = 9,
    /* The operating system refused something the engine needs (threads, a folder). */
    SMOLRUN_SYSTEM = 10,
    /* A handle or pointer that must not be NULL was NULL. */
    SMOLRUN_NULL_ARGUMENT = 11,
    /* The engine panicked (a bug in smolrun: please report the message). */
    SMOLRUN_PANIC = 12,
    /* smolrun_tokenize: the output array is too small; *n_tokens is the size needed. */
    SMOLRUN_BUFFER_TOO_SMALL = 13,
    /* A piece callback called a smolrun function on its own engine (only smolrun_cancel may). */
    SMOLRUN_BUSY = 14
} smolrun_status;

/* The short name of a status ("ok", "model-not-found", ..., "busy"); "unknown"
 * for a value that is none of them. A static string: never freed. */
const char *smolrun_status_name(int status);

/* The message of the last call on this thread that returned a status other than SMOLRUN_OK:
 * the file, tensor or option, the expected and found values, and what to do next. "" before
 * any error. Valid until the next failing smolrun call on this thread; copy it to keep it. */
const char *smolrun_last_error(void);

/* ---- Options: how an engine runs. Every setter returns SMOLRUN_OK, SMOLRUN_NULL_ARGUMENT or
 * SMOLRUN_BAD_OPTION (with the reason in smolrun_last_error()). An options value is only read
 * by smolrun_open: change it or free it afterwards as you like. */

typedef struct smolrun_options smolrun_options;

/* Where the weights live while running (smolrun_options_set_weights). */
typedef enum smolrun_weights {
    /* Mapped when the model fits; streamed from flash (or its experts paged) when it does
     * not; read with pread when not even that fits the address space. */
    SMOLRUN_WEIGHTS_AUTO = 0,
    /* The file mapped read-only. */
    SMOLRUN_WEIGHTS_RESIDENT = 1,
    /* A resident set in RAM, the rest streamed from flash every token. */
    SMOLRUN_WEIGHTS_STREAM = 2,
    /* Nothing mapped: each weight read into one buffer just before its use (slow). */
    SMOLRUN_WEIGHTS_PREAD = 3
} smolrun_weights;

/* The defaults of `smolrun run -m MODEL`, without its models folder: set one with
 * smolrun_options_set_models_dir to open models by short name. NULL if out of memory. */
smolrun_options *smolrun_options_new(void);
/* Frees options from smolrun_options_new; NULL is ignored. */
void smolrun_options_free(smolrun_options *options);

/* Context length in tokens; 0: 4096, or the model's trained context if smaller. */
smolrun_status smolrun_options_set_context(smolrun_options *options, uint32_t n_ctx);
/* Threads for the forward pass; 0: the fast cores this process may run on. */
smolrun_status smolrun_options_set_threads(smolrun_options *options, uint32_t threads);
/* One of smolrun_weights. */
smolrun_status smolrun_options_set_weights(smolrun_options *options, int weights);
/* Bytes this engine may use in all, instead of what the device reports; 0: what it reports. */
smolrun_status smolrun_options_set_memory_budget(smolrun_options *options, uint64_t bytes);
/* Non-zero: load even when the model does not fit, and never stop for low memory. */
smolrun_status smolrun_options_set_no_guard(smolrun_options *options, int no_guard);
/* Non-zero: recurrent models (Qwen3.5) keep their state in f16 instead of f32. */
smolrun_status smolrun_options_set_state_f16(smolrun_options *options, int state_f16);
/* Mixture of experts: experts per layer kept in RAM. SMOLRUN_MOE_POOL_AUTO (paged only when
 * the model does not fit), SMOLRUN_MOE_POOL_ALL, or a number of slots (> 0). */
#define SMOLRUN_MOE_POOL_AUTO 0
#define SMOLRUN_MOE_POOL_ALL (-1)
smolrun_status smolrun_options_set_moe_pool(smolrun_options *options, int32_t slots);
/* Mixture of experts, paged runs: a selection bonus for experts already in RAM (0: off). */
smolrun_status smolrun_options_set_moe_cache_bias(smolrun_options *options, float bias);
/* Speculative decoding: "off" (default), "ngram" (prompt lookup), "mtp" (the model's MTP
 * layer), "auto", or a draft model (a path or a name in the models folder) with the same
 * vocabulary; max_tokens drafted per pass, 0: the default for that kind. */
smolrun_status smolrun_options_set_draft(smolrun_options *options, const char *draft,
                                         uint32_t max_tokens);
/* Non-zero: the scalar reference kernels instead of this CPU's fastest ones. */
smolrun_status smolrun_options_set_scalar_kernels(smolrun_options *options, int scalar);
/* The folder for repack caches (weights repacked for this CPU, written once, mapped after);
 * NULL: beside the model file (the default). */
smolrun_status smolrun_options_set_repack_cache_dir(smolrun_options *options, const char *dir);
/* Non-zero: write and read no repack cache (repack in memory at every start). */
smolrun_status smolrun_options_set_repack_cache_off(smolrun_options *options, int off);
/* The folder where short model names ("gemma3-270m") are looked up; NULL: paths only. */
smolrun_status smolrun_options_set_models_dir(smolrun_options *options, const char *dir);

/* ---- The engine: one model, loaded. */

typedef struct smolrun_engine smolrun_engine;

/* Opens `model` (a path, or a name in the options' models folder) with `options` (NULL: the
 * defaults) and stores the engine in *engine (NULL on failure). Checks the memory before
 * reading any weight. */
smolrun_status smolrun_open(const char *model, const smolrun_options *options,
                            smolrun_engine **engine);
/* Frees an engine; NULL is ignored. No other call on it may be running. */
void smolrun_free(smolrun_engine *engine);

/* Turns `text` into token ids. add_special: the model's BOS (as `smolrun run` does);
 * parse_special: texts of control tokens such as <|im_start|> become those tokens.
 * Writes up to `capacity` ids to `tokens` (which may be NULL when capacity is 0) and the
 * count to *n_tokens. When capacity is too small, nothing is written, *n_tokens is the count
 * needed and the status is SMOLRUN_BUFFER_TOO_SMALL. */
smolrun_status smolrun_tokenize(smolrun_engine *engine, const char *text, int add_special,
                                int parse_special, uint32_t *tokens, size_t capacity,
                                size_t *n_tokens);

/* Receives each piece of generated text as soon as it is whole UTF-8: `len` bytes at `piece`,
 * not NUL-terminated, valid only during the call. Return 0 to go on, non-zero to stop.
 * The callback runs on the thread that called smolrun_generate. It must return normally: it
 * must not throw a C++ exception nor longjmp out (nothing can unwind through smolrun's Rust
 * frames; the process would abort), and calls it makes on its own engine return SMOLRUN_BUSY,
 * except smolrun_cancel. */
typedef int (*smolrun_piece_fn)(const char *piece, size_t len, void *user_data);

/* Why a generation ended (smolrun_result.stop). */
typedef enum smolrun_stop {
    /* The model produced an end-of-generation token. */
    SMOLRUN_STOP_END_OF_TEXT = 0,
    /* max_tokens tokens were produced. */
    SMOLRUN_STOP_LENGTH = 1,
    /* The context is full. */
    SMOLRUN_STOP_CONTEXT_FULL = 2,
    /* The callback returned non-zero. */
    SMOLRUN_STOP_CALLBACK = 3,
    /* smolrun_cancel (the status is SMOLRUN_CANCELLED). */
    SMOLRUN_STOP_CANCELLED = 4,
    /* Less memory left than the floor (the status is SMOLRUN_LOW_MEMORY). */
    SMOLRUN_STOP_LOW_MEMORY = 5
} smolrun_stop;

/* What a generation did, filled in by smolrun_generate when it got as far as generating. */
typedef struct smolrun_result {
    /* Tokens in the prompt, and how many of them ran (the rest was cached from the last call). */
    uint32_t prompt_tokens;
    uint32_t prompt_evaluated;
    /* Tokens generated (an end-of-generation token that stopped it included). */
    uint32_t generated_tokens;
    /* One of smolrun_stop. */
    int32_t stop;
    /* Speeds in tokens per second. */
    double prompt_tokens_per_second;
    double generated_tokens_per_second;
} smolrun_result;

/* Continues `prompt` (tokenized as smolrun_tokenize(add_special=1, parse_special=1) does,
 * like `smolrun run -p`) for at most max_tokens tokens (negative: until the end of text or a
 * full context), and hands each piece of text to on_piece (NULL: nothing is delivered).
 * temperature <= 0 is greedy decoding (the highest logit, no repeat penalty: `--temp 0`);
 * above 0, `smolrun run`'s sampling (top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.15)
 * with the random numbers seeded by `seed`. The engine keeps its cache: a prompt that starts
 * with the last call's prompt and text only runs its new tokens.
 * Returns SMOLRUN_OK when it ended by itself or the callback stopped it, SMOLRUN_CANCELLED
 * after smolrun_cancel, SMOLRUN_LOW_MEMORY, or an error; `result` (may be NULL) says why it
 * ended. */
smolrun_status smolrun_generate(smolrun_engine *engine, const char *prompt, int32_t max_tokens,
                                float temperature, uint64_t seed, smolrun_piece_fn on_piece,
                                void *user_data, smolrun_result *result);

/* Stops the generation running on `engine` before its next token (from any thread, without
 * waiting for it), or, if none is running, the next one to start: the request is cleared when
 * a smolrun_generate returns. */
smolrun_status smolrun_cancel(smolrun_engine *engine);

#ifdef __cplusplus
}
#endif

#endif /* SMOLRUN_H */
