#!/usr/bin/env python3
"""smolrun bench and llama.cpp's llama-bench side by side on the same GGUF files, in one run.

    tools/bench-vs-llama.py [-t 2] [-r 5] [-p 128] [-n 64] [-d 0] [--prefix CMD] [--smolrun BINARY] [MODEL[:SMOLRUN_MODEL] ...]

MODEL is a short name or a path; MODEL:SMOLRUN_MODEL runs llama.cpp on MODEL and smolrun on
another file (a pruned head, which llama.cpp cannot load), e.g. the stock Gemma file against its
pruned copy. --prefix runs both under a wrapper, e.g. --prefix "/work/shared/tools/smoldevice
--mem 1G --read-mbps 278 --" for a TV box's memory and flash; --llama-n/--llama-r cap llama.cpp's
run when it is very slow there, --llama-args "--repack 0" keeps it from being killed for its
repacked copy under a memory cap. -p 0 skips the prompt test.

Builds smolrun (cargo build --release) and the reference (tools/oracle/build.sh, cached outside
the repo), then for each model runs both, alternating, and prints a table of medians with the
ratio smolrun / llama.cpp. Peak RSS is each process's ru_maxrss (from wait4). The machines these
run on are shared and noisy: read the ratios, not the absolute figures.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
}


def run(cmd):
    """Runs cmd; returns (stdout text, peak RSS MB of the child)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed with status {os.waitstatus_to_exitcode(status)}")
    text = b"".join(chunks).decode()
    # A wrapper's own report line (smoldevice) is not the tool's output; keep its read_mb.
    global LAST_DEVICE_READ_MB
    LAST_DEVICE_READ_MB = None
    for l in text.splitlines():
        if l.startswith("smoldevice:"):
            for field in l.split():
                if field.startswith("read_mb="):
                    LAST_DEVICE_READ_MB = float(field.split("=", 1)[1])
    text = "\n".join(l for l in text.splitlines() if not l.startswith("smoldevice:"))
    return text, usage.ru_maxrss / 1024.0


LAST_DEVICE_READ_MB = None


def llama_bench(binary, path, args):
    n = args.llama_n or args.n
    r = args.llama_r or args.r
    out, rss = run(args.prefix + [binary, "-m", path, "-p", str(args.p), "-n", str(n), "-t", str(args.t),
                                  "-r", str(r), "-d", str(args.d), "-o", "json"] + shlex.split(args.llama_args))
    pp = tg = 0.0
    for test in json.loads(out):
        med = statistics.median(test["samples_ts"])
        if test["n_prompt"] > 0 and test["n_gen"] == 0:
            pp = med
        elif test["n_gen"] > 0 and test["n_prompt"] == 0:
            tg = med
    return pp, tg, rss


def smolrun_bench(binary, path, args):
    out, rss = run(args.prefix + [binary, "bench", "-m", path, "-p", str(args.p), "-n", str(args.n),
                                  "-t", str(args.t), "-r", str(args.r), "-d", str(args.d), "--json"]
                   + shlex.split(args.smolrun_args))
    doc = json.loads(out.strip().splitlines()[-1])
    doc["device_read_mb"] = LAST_DEVICE_READ_MB
    return doc["pp_tok_s"], doc["tg_tok_s"], rss, doc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-d", type=int, default=0, help="tokens already in the context before each "
                    "test (llama-bench's -d)")
    ap.add_argument("--prefix", default="", help="wrapper command for both tools")
    ap.add_argument("--llama-n", type=int, default=0, help="llama.cpp's -n (default: -n)")
    ap.add_argument("--llama-r", type=int, default=0, help="llama.cpp's -r (default: -r)")
    ap.add_argument("--llama-args", default="", help="more llama-bench arguments, e.g. "
                    "\"--repack 0\" under a memory cap: its repacked copy of the weights is "
                    "anonymous memory, which gets it killed where its mapped pages would be evicted")
    ap.add_argument("--smolrun-args", default="", help="more smolrun bench arguments, e.g. "
                    "\"--moe-pool 24 --flash-mbps 278\"")
    ap.add_argument("--smolrun", help="a smolrun binary to measure instead of building "
                    "target/release/smolrun (e.g. an older build, for before/after ratios)")
    ap.add_argument("models", nargs="*", default=list(MODELS))
    args = ap.parse_args()
    args.prefix = shlex.split(args.prefix)

    if not args.smolrun:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "smolrun"], cwd=ROOT, check=True)
    subprocess.run([os.path.join(ROOT, "tools/oracle/build.sh")], check=True)
    cache = os.environ.get("SMOLRUN_ORACLE", os.path.expanduser("~/.cache/smolrun/oracle"))
    llama = os.path.join(cache, "build/bin/llama-bench")
    smol = args.smolrun or os.path.join(ROOT, "target/release/smolrun")
    mdir = os.environ.get("SMOLRUN_MODELS", os.path.expanduser("~/.cache/smolrun/models"))

    print(f"| model | test | llama.cpp t/s | smolrun t/s | ratio | threads {args.t}, median of {args.r} |")
    print("|---|---|---|---|---|---|")
    for spec in args.models:
        name, _, smol_name = spec.partition(":")
        path = os.path.join(mdir, MODELS.get(name, name))
        smol_path = os.path.join(mdir, MODELS.get(smol_name, smol_name)) if smol_name else path
        missing = [p for p in (path, smol_path) if not os.path.exists(p)]
        if missing:
            print(f"| {spec} | (absent: {missing[0]}; tools/fetch-models.sh {name}) |||||")
            continue
        l_pp, l_tg, l_rss = llama_bench(llama, path, args)
        l_read = LAST_DEVICE_READ_MB
        s_pp, s_tg, s_rss, doc = smolrun_bench(smol, smol_path, args)
        kernels = doc["kernels"]
        ratio = lambda s, l: f"{s / l:.2f}x" if l > 0 else "-"
        depth = f" @ d{args.d}" if args.d else ""
        if args.p > 0:
            print(f"| {spec} | pp{args.p}{depth} | {l_pp:.2f} | {s_pp:.2f} | {ratio(s_pp, l_pp)} | kernels {kernels} |")
        n_note = f" (llama.cpp: tg{args.llama_n or args.n}, -r {args.llama_r or args.r})" if (args.llama_n or args.llama_r) else ""
        print(f"| {spec} | tg{args.n}{depth} | {l_tg:.2f} | {s_tg:.2f} | {ratio(s_tg, l_tg)} | {n_note} |")
        print(f"| {spec} | peak RSS MB | {l_rss:.0f} | {s_rss:.0f} | {s_rss / l_rss:.2f}x | |")
        if "stream_mb_per_token" in doc:
            # Streamed: the flash limit and how close generation gets to it.
            limit = doc["flash_limit_tok_s"]
            print(f"| {spec} | streamed MB/token | | {doc['stream_mb_per_token']:.1f} | | "
                  f"resident {doc['resident_mb']:.0f} MB, read {doc['read_mb_s']:.0f} MB/s |")
            print(f"| {spec} | flash limit t/s | | {limit:.3f} | {s_tg / limit:.0%} of it | "
                  f"flash {doc['flash_mb_s']:.0f} MB/s |")
        if "moe_miss_rate" in doc:
            # Experts paged: what the misses (and guesses) read, and the flash limit that sets.
            limit = doc["flash_limit_tok_s"]
            print(f"| {spec} | expert MB/token read | | {doc['moe_read_mb_per_token']:.1f} | | "
                  f"{doc['moe_slots_per_layer']:.0f} experts/layer in {doc['moe_pool_mb']:.0f} MB, "
                  f"{doc['moe_miss_rate']:.1%} missed ({doc['moe_missed_mb_per_token']:.1f} MB), "
                  f"guesses {doc['moe_prefetch_accuracy']:.0%} right |")
            print(f"| {spec} | flash limit t/s | | {limit:.3f} | {s_tg / limit:.0%} of it | "
                  f"flash {doc['flash_mb_s']:.0f} MB/s |")
        if l_read is not None and doc.get("device_read_mb") is not None:
            ours = doc.get("flash_read_mb_total")
            note = f"smolrun counted {ours:.0f}" if ours else ""
            print(f"| {spec} | device read MB | {l_read:.0f} | {doc['device_read_mb']:.0f} | | {note} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
