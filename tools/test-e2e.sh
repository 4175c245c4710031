#!/usr/bin/env bash
# End-to-end checks of `smolrun serve` against a real model (run at the end of tools/test.sh):
# the official `openai` and `ollama` clients, the chat page in headless Chromium, and a load
# test. Installs the `openai` and `ollama` packages and Chromium if missing. Uses the release binary (debug decode
# is too slow).
# The model is qwen2.5-coder-0.5b (override: SMOLRUN_E2E_MODEL): gemma3-270m is faster but its
# chat answers loop ("The model is a 10-bit integer." x5) and miss the stop-string check.
set -uo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n== %s\n' "$*"; }
MODEL="${SMOLRUN_E2E_MODEL:-qwen2.5-coder-0.5b}"

say "e2e: python packages openai, ollama, chromium"
python3 -c 'import openai' 2>/dev/null || python3 -m pip install --quiet openai || exit 1
python3 -c 'import ollama' 2>/dev/null || python3 -m pip install --quiet ollama || exit 1
if [ ! -x /usr/bin/chromium ]; then
    { apt-get update && apt-get install -y chromium; } || exit 1
fi

# A no-op when the cargo test step already built it; guards against a stale binary otherwise.
say "e2e: cargo build --release -p smolrun"
cargo build --release -p smolrun || exit 1
export SMOLRUN_BIN="$PWD/target/release/smolrun"

scripts=(openai_client.py ollama_client.py browser.py load.py)
failed=()
for script in "${scripts[@]}"; do
    say "e2e: tests/e2e/$script -m $MODEL"
    start=$(date +%s)
    if python3 "tests/e2e/$script" -m "$MODEL"; then
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
