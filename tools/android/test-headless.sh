#!/bin/sh
# Tests tools/android/headless.sh on a PC: stand-ins for Android's am, cmd, pm, svc, settings and
# dumpsys on PATH append their argv to a log, print what the real ones print (Android 13's
# formats) and keep the one setting and the MemAvailable figure the script reads. Checks the exact
# sequence of calls for on, on again, off, off again, for three starting stay-on values.
# Runs under every POSIX shell found here: dash (sh), bash, and mksh (Android's own shell).
# Called by tools/test.sh; run it alone with: sh tools/android/test-headless.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
script="$here/headless.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/smolrun-headless-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fake="$work/bin"
mkdir -p "$fake"

# --- stand-ins -------------------------------------------------------------------------------
# Shared: log argv; the stay-on setting lives in $work/stay_on; MemAvailable in $work/meminfo.
cat >"$fake/_common" <<'EOF'
log() { printf '%s\n' "$*" >>"$FAKE_LOG"; }
free_kb() { # pretend a stopped app gave back $1 kB
    kb=$(sed -n 's/^MemAvailable: *\([0-9]*\).*/\1/p' "$FAKE_DIR/meminfo")
    sed "s/^MemAvailable:.*/MemAvailable:   $((kb + $1)) kB/" "$FAKE_DIR/meminfo" >"$FAKE_DIR/meminfo.new"
    mv "$FAKE_DIR/meminfo.new" "$FAKE_DIR/meminfo"
}
EOF
cat >"$fake/am" <<'EOF'
#!/bin/sh
. "$FAKE_DIR/bin/_common"; log am "$@"
case $1 in
    force-stop) free_kb 50000 ;;
    kill-all) free_kb 20000 ;;
    start) echo "Starting: Intent { act=... }" ;;
esac
EOF
cat >"$fake/cmd" <<'EOF'
#!/bin/sh
. "$FAKE_DIR/bin/_common"; log cmd "$@"
case "$*" in
    "package query-activities --components -a android.intent.action.MAIN -c android.intent.category.HOME")
        echo com.google.android.apps.tv.launcherx/com.google.android.apps.tv.launcherx.home.HomeActivity
        echo com.android.tv.settings/com.android.tv.settings.FallbackHome
        echo com.google.android.tvlauncher/.MainActivity ;;
    "package resolve-activity --brief -a android.settings.DATE_SETTINGS")
        echo "priority=0 preferredOrder=0 match=0x108000 specificIndex=-1 isDefault=true"
        echo com.android.tv.settings/.system.DateTimeActivity ;;
    "package list packages")
        for p in android com.android.tv.settings com.google.android.apps.tv.launcherx \
            com.google.android.tvlauncher com.google.android.gms com.google.android.katniss \
            com.google.android.youtube.tv com.android.vending com.android.shell; do
            echo "package:$p"
        done ;;
    *) echo "fake cmd: unexpected: $*" >&2; exit 1 ;;
esac
EOF
cat >"$fake/settings" <<'EOF'
#!/bin/sh
. "$FAKE_DIR/bin/_common"; log settings "$@"
case "$*" in
    "get global stay_on_while_plugged_in") cat "$FAKE_DIR/stay_on" ;;
    "put global stay_on_while_plugged_in "*) echo "$4" >"$FAKE_DIR/stay_on" ;;
    "delete global stay_on_while_plugged_in") echo null >"$FAKE_DIR/stay_on"; echo "Deleted 1 rows" ;;
    *) echo "fake settings: unexpected: $*" >&2; exit 1 ;;
esac
EOF
cat >"$fake/svc" <<'EOF'
#!/bin/sh
. "$FAKE_DIR/bin/_common"; log svc "$@"
case "$*" in
    "power stayon true") echo 7 >"$FAKE_DIR/stay_on" ;;
    "power stayon false") echo 0 >"$FAKE_DIR/stay_on" ;;
    *) echo "fake svc: unexpected: $*" >&2; exit 1 ;;
esac
EOF
for name in pm dumpsys; do # not expected to be called; logged if they are
    printf '#!/bin/sh\n. "$FAKE_DIR/bin/_common"; log %s "$@"\n' "$name" >"$fake/$name"
done
chmod +x "$fake"/*

# --- checks ----------------------------------------------------------------------------------
failures=0
fail() { printf 'FAIL: %s\n' "$*"; failures=$((failures + 1)); }

# expect_calls TITLE EXPECTED: the log since the last check must be exactly EXPECTED.
expect_calls() {
    printf '%s\n' "$2" | sed '/^$/d' >"$work/expected"
    if ! diff -u "$work/expected" "$FAKE_LOG" >"$work/diff"; then
        fail "$1: calls differ (- expected, + made):"; cat "$work/diff"
    fi
    : >"$FAKE_LOG"
}
expect_output() { # expect_output TITLE PATTERN
    grep -q -- "$2" "$work/out" || { fail "$1: output lacks '$2':"; cat "$work/out"; }
}

ON_CALLS='settings get global stay_on_while_plugged_in
cmd package resolve-activity --brief -a android.settings.DATE_SETTINGS
cmd package query-activities --components -a android.intent.action.MAIN -c android.intent.category.HOME
cmd package list packages
svc power stayon true
am start -W -a android.settings.DATE_SETTINGS
am force-stop com.google.android.apps.tv.launcherx
am force-stop com.google.android.tvlauncher
am force-stop com.google.android.katniss
am force-stop com.google.android.youtube.tv
am force-stop com.android.vending
am kill-all'
ON_AGAIN_CALLS='am force-stop com.google.android.apps.tv.launcherx
am force-stop com.google.android.tvlauncher
am force-stop com.google.android.katniss
am force-stop com.google.android.youtube.tv
am force-stop com.android.vending
am kill-all'
OFF_CALLS_HEAD='am start -a android.intent.action.MAIN -c android.intent.category.HOME
am force-stop com.android.tv.settings'

run() { # run SHELL on|off: output in $work/out
    if ! $1 "$script" "$2" >"$work/out" 2>&1; then fail "$1 headless.sh $2 exited non-zero:"; cat "$work/out"; fi
}

# scenario SHELL STAY_ON_BEFORE RESTORE_CALL
scenario() {
    sh_=$1 before=$2 restore=$3 title="$1, stay_on=$2"
    printf '%s\n' "$before" >"$work/stay_on"
    printf 'MemTotal:        2000000 kB\nMemFree:          100000 kB\nMemAvailable:     400000 kB\n' >"$work/meminfo"
    rm -f "$SMOLRUN_HEADLESS_STATE"
    : >"$FAKE_LOG"

    run "$sh_" off
    expect_calls "$title: off before on" ""
    expect_output "$title: off before on" "not on .*nothing changed"

    run "$sh_" on
    expect_calls "$title: on" "$ON_CALLS"
    # 400000 kB before; five force-stops at 50000 kB and kill-all at 20000 kB: 670000 kB after.
    expect_output "$title: on" "MemAvailable 390 MB -> 654 MB (freed 263 MB)"
    [ "$(cat "$work/stay_on")" = 7 ] || fail "$title: on did not set stay-on"
    grep -qx "stay_on=$before" "$SMOLRUN_HEADLESS_STATE" || fail "$title: state file lacks stay_on=$before"

    run "$sh_" on
    expect_calls "$title: on twice" "$ON_AGAIN_CALLS"
    expect_output "$title: on twice" "already on"
    grep -qx "stay_on=$before" "$SMOLRUN_HEADLESS_STATE" || fail "$title: second on lost stay_on=$before"

    run "$sh_" off
    expect_calls "$title: off" "$OFF_CALLS_HEAD
$restore"
    [ "$(cat "$work/stay_on")" = "$before" ] || fail "$title: off left stay_on=$(cat "$work/stay_on"), not $before"
    [ ! -e "$SMOLRUN_HEADLESS_STATE" ] || fail "$title: off left the state file"

    run "$sh_" off
    expect_calls "$title: off twice" ""
    expect_output "$title: off twice" "nothing changed"
}

export FAKE_DIR="$work" FAKE_LOG="$work/log" PATH="$fake:$PATH"
export SMOLRUN_HEADLESS_STATE="$work/state/smolrun-headless.state" SMOLRUN_MEMINFO="$work/meminfo"
export SMOLRUN_HEADLESS_SETTLE=0

shells=sh
for s in bash mksh; do command -v "$s" >/dev/null && shells="$shells $s"; done
for s in $shells; do
    scenario "$s" 3 "settings put global stay_on_while_plugged_in 3"
    scenario "$s" 0 "svc power stayon false"
    scenario "$s" null "settings delete global stay_on_while_plugged_in"
done

if [ "$failures" -ne 0 ]; then
    echo "test-headless: $failures failure(s)"
    exit 1
fi
echo "test-headless: ok (shells: $shells)"
