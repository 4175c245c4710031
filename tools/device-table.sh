#!/usr/bin/env bash
# The device table (#32 item 5): each row of the reference write-ups that smolrun can stand in for
# with a shaped file (random weights, the real model's shape) run under smoldevice's limits of
# that device (RAM cap with page cache, throttled flash, 2 cores), beside llama.cpp b11434 on the
# stock file under the same limits.
#
#   tools/device-table.sh [--rows a,b] [--parts stock,fitted,llama] [--force] [--list] [--table]
#
# For each row: makes the shaped file if absent (cached in $SMOLRUN_MODELS), fits it with
# `smolrun fit --device ...`, runs `smolrun bench --json` on the stock and on the fitted file and
# llama-bench on the stock file, each under `smoldevice --mem M --read-mbps R --cpus 0-1 --dev
# $SMOLRUN_MODELS` (the iPad rows add its 1.7 GB address space by `ulimit -v` inside), then
# prints the markdown table. Each row's results are kept in $SMOLRUN_MODELS/device-table.json,
# so a rerun runs only the rows (and parts of a row) missing there (--force reruns the rows
# asked for, --parts only those parts of them; --table only prints what is stored).
#
# Environment: SMOLRUN (the smolrun binary; default target/release/smolrun or the one on PATH),
# SMOLDEVICE (default /work/shared/tools/smoldevice or the one on PATH), SMOLRUN_ORACLE (llama.cpp
# b11434 from tools/oracle/build.sh), LLAMA_TIMEOUT (seconds for one llama-bench run, default 240),
# DT_GEN / DT_PROMPT (decode and prompt tokens, default 16 and 16), DT_CTX (fit's context, default
# 1024: the iPad write-up's), DT_REFIT=1 (fit again though the fitted file exists).
#
# Every speed here is measured on whatever machine runs the script (x86-64 standing in for an ARM
# board: its compute is not the device's, only RAM and flash are), and every file has synthetic
# weights: the bytes read per token and the memory plan are the real model's, the text is noise
# and the routing is a synthetic skew (tools/oracle/ling_shaped.py --bias-scale).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
models=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
oracle=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
results=$models/device-table.json
llama_timeout=${LLAMA_TIMEOUT:-240}
gen=${DT_GEN:-16}
prompt=${DT_PROMPT:-16}
ctx=${DT_CTX:-1024}

if [[ -n ${SMOLRUN:-} ]]; then smolrun=$SMOLRUN
elif [[ -x ${CARGO_TARGET_DIR:-$root/target}/release/smolrun ]]; then smolrun=${CARGO_TARGET_DIR:-$root/target}/release/smolrun
else smolrun=$(command -v smolrun || true); fi
[[ -x $smolrun ]] || { echo "device-table: no smolrun binary (cargo build --release -p smolrun, or SMOLRUN=)" >&2; exit 2; }
smoldevice=${SMOLDEVICE:-$(command -v smoldevice || echo /work/shared/tools/smoldevice)}
llama_bench=$oracle/build/bin/llama-bench

# id | device preset | smoldevice --mem | --read-mbps | address space (ulimit -v, or -) | fit's --mem (or -) |
# file maker | reference (tok/s) | reference (where)
rows_table='
ling-tv-1g|tv-box|1G|278|-|-|ling|5.1|Ling-mini-2.0 16B MoE, TV box, chat
ling-tv-1.15g|tv-box-headless|1.15G|278|-|-|ling|5.1|Ling-mini-2.0 16B MoE, TV box (43 experts/layer), chat
bonsai8b-tv-1.15g|tv-box-headless|1.15G|278|-|-|bonsai8b|5.2|Bonsai-8B Q1_0, TV box headless, chat
qwen35-2b-tv-1g|tv-box|1G|278|-|-|qwen35-2b|7.7|Qwen3.5-2B, TV box, chat
ling-ipad-640m|ipad-air|640M|260|1.7G|640M|ling|2.6|Ling-mini-2.0, iPad Air (4.5 with bias 0.3)
moonbeam-tv-1g|tv-box|1G|278|-|-|moonbeam|7.2|Moon-Beam-8B-A1B, TV box, chat
moonbeam-ipad-640m|ipad-air|640M|260|1.7G|640M|moonbeam|3.5|Moon-Beam-8B-A1B, iPad Air
qwen35-9b-tv-1g|tv-box|1G|278|-|-|qwen35-9b|0.27|Qwen3.5-9B streamed + MTP, TV box, chat
'

want=""; force=0; table_only=0; only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rows) want=$2; shift 2;;
    --force) force=1; shift;;
    --parts) only=$2; shift 2;;
    --table) table_only=1; shift;;
    --list) echo "$rows_table" | awk -F'|' 'NF>1 {print $1 "\t" $2 " --mem " $3 "\t" $7}'; exit 0;;
    -h|--help) sed -n '2,26p' "$0"; exit 0;;
    *) echo "device-table: unknown option $1" >&2; exit 2;;
  esac
done
[[ -f $results ]] || echo '{}' > "$results"

# The stock (as published) file of a shape, made if absent; prints its path, or "!why" when the
# existing tools cannot make it.
make_file() {
  local kind=$1 out
  case $kind in
    ling)
      out=$models/ling-mini-shaped.gguf
      [[ -f $out ]] || python3 "$root/tools/oracle/ling_shaped.py" --out "$out" >&2;;
    moonbeam)
      # Ling's shape with 128 experts, 6 used (the issue's stand-in for Moon-Beam-8B-A1B)
      out=$models/moonbeam-shaped.gguf
      [[ -f $out ]] || python3 "$root/tools/oracle/ling_shaped.py" --experts 128 --experts-used 6 --out "$out" >&2;;
    bonsai8b)
      out=$models/bonsai8b-shaped-q1_0.gguf
      [[ -f $out ]] || python3 "$root/tools/oracle/bonsai_shaped.py" --out "$out" >&2;;
    qwen35-2b)
      # Qwen3.5-2B's shape with its 248,320 rows of vocabulary (synth_model.py qwen35-2b: the
      # qwen35 test vocabulary padded), every matrix requantized to Q4_K as the write-up's file
      out=$models/qwen35-2b-shaped-q4_k.gguf
      if [[ ! -f $out ]]; then
        [[ -f $models/synthetic-qwen35-2b.gguf ]] || python3 "$root/tools/oracle/synth_model.py" qwen35-2b --out "$models" >&2
        "$smolrun" gguf requant -m "$models/synthetic-qwen35-2b.gguf" --type Q4_K -o "$out" >&2
      fi;;
    qwen35-9b)
      echo "!not run: no tool writes a 9B qwen35 shape with its MTP layer (synth_model.py's qwen35-0.8b is the largest; a 9B in its float path would take hours here)"; return;;
    *) echo "!unknown shape $kind"; return;;
  esac
  echo "$out"
}

# Runs CMD under the row's limits; stdout to $1.out, stderr to $1.err; the smoldevice line is the
# last line of $1.out (smoldevice prints it to stdout).
under_device() {
  local log=$1 mem=$2 mbps=$3 as=$4; shift 4
  local inner=("$@")
  if [[ $as != - ]]; then
    local kb; kb=$(python3 -c "import sys; print(int(float(sys.argv[1].rstrip('G')) * 1024 * 1024))" "$as")
    inner=(bash -c 'ulimit -v '"$kb"'; exec "$@"' _ "$@")
  fi
  set +e
  "$smoldevice" --mem "$mem" --read-mbps "$mbps" --cpus 0-1 --dev "$models" -- "${inner[@]}" >"$log.out" 2>"$log.err"
  local code=$?
  set -e
  return $code
}

run_row() {
  local id=$1 preset=$2 mem=$3 mbps=$4 as=$5 fitmem=$6 kind=$7 ref=$8 refwhere=$9 parts=${10}
  local logdir=$models/device-table-logs/$id
  mkdir -p "$logdir"
  echo "== $id: $preset under --mem $mem --read-mbps $mbps, address space $as" >&2
  local stock; stock=$(make_file "$kind")
  if [[ $stock == !* ]]; then
    python3 - "$results" "$id" "$ref" "$refwhere" "${stock#!}" <<'PY'
import json, sys
path, rid, ref, where, why = sys.argv[1:]
d = json.load(open(path)); d[rid] = {"ref": float(ref), "ref_where": where, "not_run": why}
json.dump(d, open(path, "w"), indent=1)
PY
    return
  fi
  local fitted=${stock%.gguf}.fit-$preset.gguf
  [[ $fitmem != - ]] && fitted=${stock%.gguf}.fit-$preset-$fitmem.gguf
  local fitargs=(--device "$preset" -c "$ctx")
  [[ $fitmem != - ]] && fitargs+=(--mem "$fitmem")
  # the head's rows from the corpus counts and the tokenizer alone: the predictions of random
  # weights say nothing, and 4096 positions of an 8B take most of an hour here
  local fitonly=(--model-positions 0)
  if [[ ! -f $fitted || ${DT_REFIT:-0} == 1 ]]; then
    "$smolrun" fit "$stock" -o "$fitted" "${fitargs[@]}" "${fitonly[@]}" >"$logdir/fit.log" 2>&1 || { cat "$logdir/fit.log" >&2; echo "device-table: fit failed" >&2; }
  fi
  "$smolrun" plan "$fitted" "${fitargs[@]}" >"$logdir/plan-fitted.log" 2>&1 || true
  "$smolrun" plan "$stock" "${fitargs[@]}" >"$logdir/plan-stock.log" 2>&1 || true
  # the stock file at bench's default context (4096, or less if trained for less); the fitted one
  # at its profile's (fit -c $ctx)
  local bench=(bench -p "$prompt" -n "$gen" -r 1 -t 2 --json)
  if [[ $parts == *stock* ]]; then
    echo "   smolrun stock" >&2
    under_device "$logdir/stock" "$mem" "$mbps" "$as" "$smolrun" "${bench[@]}" -m "$stock" || true
  fi
  if [[ $parts == *fitted* ]]; then
    echo "   smolrun fitted" >&2
    [[ -f $fitted ]] && { under_device "$logdir/fitted" "$mem" "$mbps" "$as" "$smolrun" "${bench[@]}" -m "$fitted" || true; }
  fi
  if [[ $parts != *llama* ]]; then :
  elif [[ -x $llama_bench ]]; then
    echo "   llama.cpp stock (timeout ${llama_timeout}s)" >&2
    # -r 1 --no-warmup: one timed run; --repack 0 (a repacked copy would not fit); mmap on (the
    # default): the file is paged from flash as the cgroup's RAM allows
    under_device "$logdir/llama" "$mem" "$mbps" "$as" timeout -s KILL "$llama_timeout" \
      env LD_LIBRARY_PATH="$oracle/build/bin" "$llama_bench" -m "$stock" -p 0 -n 4 -r 1 -t 2 \
      --no-warmup --repack 0 -o json || true
  else
    echo "llama-bench missing: tools/oracle/build.sh" >"$logdir/llama.err"; : >"$logdir/llama.out"
  fi
  python3 - "$results" "$id" "$preset" "$mem" "$mbps" "$as" "$ref" "$refwhere" "$stock" "$fitted" "$logdir" "$llama_timeout" "$ctx" "$parts" <<'PY'
import json, os, re, sys
path, rid, preset, mem, mbps, aspace, ref, where, stock, fitted, logdir, ltimeout, ctx, parts = sys.argv[1:]
mbps = float(mbps)

def smoldev(text):
    m = re.search(r"smoldevice: exit=(\d+) peak_mem_mb=(\d+) read_mb=(\d+) wall_s=([\d.]+)", text)
    return dict(exit=int(m[1]), peak_mem_mb=int(m[2]), read_mb=int(m[3]), wall_s=float(m[4])) if m else None

def read(name):
    try:
        return open(os.path.join(logdir, name), errors="replace").read()
    except FileNotFoundError:
        return ""

def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") or line.startswith("["):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None

def why_failed(out, err, dev):
    if dev and dev["exit"] in (137, -9) or "Killed" in err:
        return "OOM-killed" if dev and dev["peak_mem_mb"] > 0 else "killed"
    tail = [l for l in err.strip().splitlines() if l.strip()][-1:] or ["no output"]
    return "failed: " + tail[0][:160]

def plan_resident(tag):
    m = re.search(r"weights in RAM: ([\d.]+) MB", read(f"plan-{tag}.log"))
    return float(m[1]) if m else None

def smolrun_run(tag):
    out, err = read(tag + ".out"), read(tag + ".err")
    dev = smoldev(out)
    j = last_json(out)
    r = {"device": dev}
    if not j or "tg_tok_s" not in j:
        r["error"] = why_failed(out, err, dev)
        return r
    mb_tok = (j.get("stream_mb_per_token") or 0) + (j.get("moe_read_mb_per_token") or 0)
    r.update(tg_tok_s=j["tg_tok_s"], n_gen=j.get("n_gen"), pp_tok_s=j.get("pp_tok_s"), peak_rss_mb=j.get("peak_rss_mb"),
             resident_mb=j.get("resident_mb") or plan_resident(tag), flash_mb_per_token=mb_tok,
             moe_slots_per_layer=j.get("moe_slots_per_layer"), moe_miss_rate=j.get("moe_miss_rate"),
             moe_pool_mb=j.get("moe_pool_mb"), json=j)
    if mb_tok > 0:
        r["flash_limit_tok_s"] = mbps / mb_tok
        r["limit_share"] = j["tg_tok_s"] / r["flash_limit_tok_s"]
    return r

def llama_run():
    out, err = read("llama.out"), read("llama.err")
    dev = smoldev(out)
    r = {"device": dev}
    try:
        body = out[: out.rfind("smoldevice:")] if "smoldevice:" in out else out
        j = json.loads(body)
        tg = [x for x in j if x.get("n_gen", 0) > 0]
        r["tg_tok_s"] = tg[0]["avg_ts"]
        r["n_gen"] = tg[0]["n_gen"]
        return r
    except Exception:
        pass
    if dev and dev["exit"] == 137 and dev["wall_s"] >= float(ltimeout) - 1:
        r["error"] = f"no token timed within {ltimeout} s (< {4 / float(ltimeout):.3f} tok/s)"
    elif "failed to load" in err or "error loading model" in err or "failed to mmap" in err or "Cannot allocate" in err:
        r["error"] = "cannot load"
    else:
        r["error"] = why_failed(out, err, dev)
    r["stderr_tail"] = err.strip().splitlines()[-3:]
    return r

plan = read("plan-fitted.log")
d = json.load(open(path))
old = d.get(rid, {})
row = dict(ref=float(ref), ref_where=where, preset=preset, mem=mem, read_mbps=mbps,
           address_space=None if aspace == "-" else aspace, ctx=int(ctx),
           stock_file=os.path.basename(stock), stock_mb=os.path.getsize(stock) / 1e6,
           fitted_file=os.path.basename(fitted),
           fitted_mb=os.path.getsize(fitted) / 1e6 if os.path.exists(fitted) else None,
           plan_fitted=plan[-4000:])
# every part from its log (the logs of earlier runs stay in the row's log folder)
for part, fn in (("stock", lambda: smolrun_run("stock")), ("fitted", lambda: smolrun_run("fitted")), ("llama", llama_run)):
    row[part] = fn() if os.path.exists(os.path.join(logdir, part + ".out")) else old.get(part, {"error": "not run"})
d[rid] = row
json.dump(d, open(path, "w"), indent=1)
PY
}

if [[ $table_only == 0 ]]; then
  while IFS='|' read -r id preset mem mbps as fitmem kind ref refwhere; do
    [[ -n $id ]] || continue
    if [[ -n $want ]] && [[ ",$want," != *",$id,"* ]]; then continue; fi
    # the parts of the row to run: all with --force, else those not stored (a llama.cpp run that
    # found no llama-bench counts as not stored)
    parts=stock,fitted,llama
    if [[ $force == 0 ]]; then
      parts=$(python3 - "$results" "$id" "$only" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])).get(sys.argv[2])
want = sys.argv[3].split(",") if sys.argv[3] else ["stock", "fitted", "llama"]
if d is None:
    print(",".join(want))
elif "not_run" in d:
    print("")
else:
    print(",".join(p for p in want if p not in d or d[p].get("error") == "not run" or "llama-bench missing" in str(d[p].get("error", ""))))
PY
)
      [[ -n $parts ]] || { echo "== $id: stored in $results (--force to rerun)" >&2; continue; }
    elif [[ -n $only ]]; then parts=$only; fi
    run_row "$id" "$preset" "$mem" "$mbps" "$as" "$fitmem" "$kind" "$ref" "$refwhere" "$parts"
  done <<<"$rows_table"
fi

python3 - "$results" "$rows_table" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
order = [l.split("|")[0] for l in sys.argv[2].strip().splitlines()]
f = lambda x, p=2: "—" if x is None else f"{x:.{p}f}"
print("| row | device limits (smoldevice) | reference tok/s (write-up's model and device) | smolrun stock tok/s | smolrun fitted tok/s | llama.cpp b11434 stock tok/s | resident MB (fitted, plan) | flash MB/token (fitted) | flash limit tok/s at the throttle's MB/s (share reached) | experts/layer in RAM fitted (stock) | peak RSS MB stock / fitted | weights |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for rid in order:
    r = d.get(rid)
    if r is None:
        continue
    if "not_run" in r:
        print(f"| {rid} | — | {r['ref']:g} ({r['ref_where']}) | {r['not_run']} | — | — | — | — | — | — | — | — |")
        continue
    lim = f"{r['preset']}: {r['mem']}, {r['read_mbps']:g} MB/s" + (f", {r['address_space']} address space" if r.get("address_space") else "")
    def tok(run):
        if "tg_tok_s" in run:
            n = run.get("n_gen") or run.get("json", {}).get("n_gen")
            return f(run["tg_tok_s"]) + (f" (tg{n})" if n else "")
        return run.get("error", "—")
    s, t, l = r["stock"], r["fitted"], r["llama"]
    if t.get("limit_share"):
        share = f"{f(t.get('flash_limit_tok_s'))} ({t['limit_share'] * 100:.0f} %)"
    elif "tg_tok_s" in t:
        share = "none: resident"
    else:
        share = "—"
    if s.get("limit_share"):
        share += f"; stock {f(s.get('flash_limit_tok_s'))} ({s['limit_share'] * 100:.0f} %)"
    slots = t.get("moe_slots_per_layer")
    slots = "—" if slots is None else f"{slots:g}" + (f" ({s['moe_slots_per_layer']:g})" if s.get("moe_slots_per_layer") is not None else "")
    rss = f"{f(s.get('peak_rss_mb'), 0)} / {f(t.get('peak_rss_mb'), 0)}"
    print(f"| {rid} | {lim} | {r['ref']:g} ({r['ref_where']}) | {tok(s)} | {tok(t)} | {tok(l)} | {f(t.get('resident_mb'), 0)} | {f(t.get('flash_mb_per_token'), 1)} | {share} | {slots} | {rss} | synthetic (shaped) |")
PY
