#!/usr/bin/env bash
# End-to-end checks of `smolrun serve` against a real model (run at the end of tools/test.sh):
# the official `openai` and `ollama` clients, the chat page in headless Chromium, and a load
# test; then nginx balancing two instances of the fake model (tests/e2e/nginx_balance.py), one
# killed and one drained under load. Installs the `openai` and `ollama` packages, Chromium and
# nginx if missing. Uses the release binary (debug decode is too slow).
# The model is qwen2.5-coder-0.5b (override: SMOLRUN_E2E_MODEL): gemma3-270m is faster but its
# chat answers loop ("The model is a 10-bit integer." x5) and miss the stop-string check.
set -uo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n== %s\n' "$*"; }
MODEL="${SMOLRUN_E2E_MODEL:-qwen2.5-coder-0.5b}"

say "e2e: python packages openai, ollama, chromium, nginx"
python3 -c 'import openai' 2>/dev/null || python3 -m pip install --quiet openai || exit 1
python3 -c 'import ollama' 2>/dev/null || python3 -m pip install --quiet ollama || exit 1
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ ${#missing[@]} -ne 0 ]; then
    # The test starts an nginx of its own; the package's service (if it starts) is not used.
    { apt-get update && apt-get install -y "${missing[@]}"; } || exit 1
fi

# A no-op when the cargo test step already built it; guards against a stale binary otherwise.
say "e2e: cargo build --release -p smolrun"
cargo build --release -p smolrun || exit 1
export SMOLRUN_BIN="$PWD/target/release/smolrun"

# Each entry: a script and its arguments (the real model, or none for the fake-model ones).
scripts=("openai_client.py -m $MODEL" "ollama_client.py -m $MODEL" "structured.py -m $MODEL"
         "browser.py -m $MODEL"
         "load.py -m $MODEL" "nginx_balance.py")
failed=()
for entry in "${scripts[@]}"; do
    read -r script args <<<"$entry"
    say "e2e: tests/e2e/$entry"
    start=$(date +%s)
    # shellcheck disable=SC2086 # $args is split on purpose
    if python3 "tests/e2e/$script" $args; then
        echo "e2e $script: ok ($(( $(date +%s) - start )) s)"
    else
        echo "e2e $script: FAILED ($(( $(date +%s) - start )) s)"
        failed+=("$script")
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "e2e: failed: ${failed[*]}"
else
    echo "e2e: all passed"
fi
echo "$(( ${#scripts[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
