#!/bin/sh
# Headless mode for an Android TV box (Android 12-14, no root needed: run as the adb shell user).
# Frees the memory that the launcher, Google's TV apps and cached processes hold, so a model can
# use it, and undoes that afterwards.
#
#   adb push tools/android/headless.sh /data/local/tmp/
#   adb shell sh /data/local/tmp/headless.sh on     # before the run
#   adb shell sh /data/local/tmp/headless.sh off    # after it
#
# `on`:  records the stay-on setting and what it is about to stop in a state file, then
#        svc power stayon true; starts a small foreground activity (Date settings), so that the
#        system has something to show other than the launcher and does not restart it;
#        force-stops every HOME activity's package (the launchers) and the installed packages of
#        HEAVY_APPS below; kills cached background processes (am kill-all); prints MemAvailable
#        before and after.
# `off`: only undoes what the state file records: starts the launcher again (am start ... HOME),
#        force-stops the foreground activity `on` started, puts the stay-on setting back to
#        its recorded value, deletes the state file. Without a state file it changes nothing.
# `status`: prints the state file and MemAvailable.
#
# Nothing persists: force-stop and kill end processes, they do not disable a package; every app
# starts again when opened, a reboot undoes everything. A force-stopped app does not receive
# broadcasts (alarms, boot, push) until it is opened once, which is why the list below holds only
# apps a user opens in front of them.
#
# Not in the default list, on purpose: com.google.android.gms (Play services: ~100 MB or more, but
# it restarts itself within a minute and until then casting, account sync, Play Store and apps
# that need it fail) and com.google.android.apps.mediashell (Chromecast built-in: casting to the
# box stops until the next reboot). Add them for one run with
#   SMOLRUN_HEADLESS_EXTRA="com.google.android.gms com.google.android.apps.mediashell" sh headless.sh on
#
# Environment (tests use these to run on a PC with stand-in am/cmd/svc/settings on PATH):
#   SMOLRUN_HEADLESS_STATE   state file       [/data/local/tmp/smolrun-headless.state]
#   SMOLRUN_MEMINFO          meminfo file     [/proc/meminfo]
#   SMOLRUN_HEADLESS_SETTLE  seconds to wait before measuring after stopping apps [3]
#   SMOLRUN_HEADLESS_EXTRA   more packages to force-stop (space-separated)
#
# POSIX sh: Android's mksh, dash and bash run it; only toybox's grep, sed, cut and sort are used.

STATE=${SMOLRUN_HEADLESS_STATE:-/data/local/tmp/smolrun-headless.state}
MEMINFO=${SMOLRUN_MEMINFO:-/proc/meminfo}
SETTLE=${SMOLRUN_HEADLESS_SETTLE:-3}

# The foreground activity `on` starts: Date & time settings exist on phones and TVs, and are small.
FG_ACTION=android.settings.DATE_SETTINGS

# Apps that hold memory on Google TV / Android TV boxes and that start again when opened.
HEAVY_APPS="
com.google.android.katniss
com.google.android.tvrecommendations
com.google.android.leanbacklauncher.recommendations
com.google.android.backdrop
com.google.android.youtube.tv
com.google.android.youtube.tvmusic
com.google.android.videos
com.google.android.play.games
com.android.vending
com.netflix.ninja
com.amazon.amazonvideo.livingroom
com.disney.disneyplus
"

# Never force-stopped even though they answer a HOME query: Settings' FallbackHome (direct boot),
# the system's chooser, and the foreground activity's own package.
NEVER_STOP="android com.android.settings com.android.tv.settings"

say() { printf 'headless: %s\n' "$*"; }
die() { printf 'headless: %s\n' "$*" >&2; exit 1; }

mem_available_kb() {
    sed -n 's/^MemAvailable:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$MEMINFO" 2>/dev/null
}

mb() { echo $(( ${1:-0} / 1024 )); }

# Value of key $1 in the state file.
state_get() {
    sed -n "s/^$1=//p" "$STATE" | head -n 1
}

# The package names in `cmd package query-activities --components` output (pkg/class per line).
home_packages() {
    cmd package query-activities --components -a android.intent.action.MAIN \
        -c android.intent.category.HOME 2>/dev/null |
        grep '^[A-Za-z0-9_.]*/' | cut -d/ -f1 | sort -u
}

# The package that answers an intent action (last line of resolve-activity --brief: pkg/class).
resolve_package() {
    cmd package resolve-activity --brief -a "$1" 2>/dev/null |
        grep '^[A-Za-z0-9_.]*/' | tail -n 1 | cut -d/ -f1
}

contains() { # contains WORD LIST...
    w=$1; shift
    for x in "$@"; do [ "$x" = "$w" ] && return 0; done
    return 1
}

force_stop_all() { # force_stop_all PKG...: the ones stopped, one line
    for p in "$@"; do
        am force-stop "$p" && printf '%s ' "$p"
    done
}

print_freed() { # print_freed BEFORE_KB
    after=$(mem_available_kb)
    if [ -n "$1" ] && [ -n "$after" ]; then
        say "MemAvailable $(mb "$1") MB -> $(mb "$after") MB (freed $(mb $(( after - $1 ))) MB)"
    else
        say "MemAvailable unknown (no MemAvailable line in $MEMINFO)"
    fi
}

cmd_on() {
    before=$(mem_available_kb)
    if [ -f "$STATE" ]; then
        # A second `on` keeps the first one's record (the stay-on value from before any `on`),
        # and stops again what the first one stopped: apps restart by themselves.
        say "already on (state in $STATE, original settings kept); stopping again what it stopped"
        # shellcheck disable=SC2046
        force_stop_all $(state_get launchers) $(state_get apps) >/dev/null
        am kill-all
        [ "$SETTLE" = 0 ] || sleep "$SETTLE"
        print_freed "$before"
        return 0
    fi

    stay_on=$(settings get global stay_on_while_plugged_in)
    [ -n "$stay_on" ] || stay_on=null
    fg_pkg=$(resolve_package "$FG_ACTION")

    launchers=
    for p in $(home_packages); do
        contains "$p" $NEVER_STOP "$fg_pkg" || launchers="$launchers $p"
    done
    installed=$(cmd package list packages 2>/dev/null | sed -n 's/^package://p')
    apps=
    for p in $HEAVY_APPS $SMOLRUN_HEADLESS_EXTRA; do
        # shellcheck disable=SC2086
        if contains "$p" $installed && ! contains "$p" $launchers $apps; then apps="$apps $p"; fi
    done

    # Written before anything changes, so an `on` cut short can still be undone by `off`.
    mkdir -p "$(dirname "$STATE")" || die "cannot create the folder of $STATE"
    {
        echo "stay_on=$stay_on"
        echo "fg_package=$fg_pkg"
        echo "launchers=$(echo $launchers)"
        echo "apps=$(echo $apps)"
        echo "mem_before_kb=$before"
    } >"$STATE.tmp" && mv "$STATE.tmp" "$STATE" || die "cannot write $STATE"

    svc power stayon true
    say "stay awake while plugged in (was stay_on_while_plugged_in=$stay_on)"
    if [ -n "$fg_pkg" ]; then
        am start -W -a "$FG_ACTION" >/dev/null
        say "foreground activity: $FG_ACTION ($fg_pkg)"
    else
        say "no activity answers $FG_ACTION; the system may restart the launcher"
    fi
    # shellcheck disable=SC2086
    stopped=$(force_stop_all $launchers $apps)
    say "force-stopped: ${stopped:-nothing}"
    am kill-all
    say "killed cached background processes"
    [ "$SETTLE" = 0 ] || sleep "$SETTLE"
    print_freed "$before"
    say "undo with: sh $0 off"
}

cmd_off() {
    if [ ! -f "$STATE" ]; then
        say "not on (no $STATE): nothing to restore, nothing changed"
        return 0
    fi
    stay_on=$(state_get stay_on)
    fg_pkg=$(state_get fg_package)
    launchers=$(state_get launchers)

    if [ -n "$launchers" ]; then
        am start -a android.intent.action.MAIN -c android.intent.category.HOME >/dev/null
        say "launcher started again"
    fi
    [ -z "$fg_pkg" ] || am force-stop "$fg_pkg"
    case $stay_on in
        0) svc power stayon false ;;
        '' | null) settings delete global stay_on_while_plugged_in >/dev/null ;;
        *[!0-9]*) die "state file $STATE has stay_on=$stay_on, not a number; left it in place" ;;
        *) settings put global stay_on_while_plugged_in "$stay_on" ;;
    esac
    say "stay_on_while_plugged_in back to $stay_on"
    rm -f "$STATE"
    say "off: restored what 'on' changed; apps it stopped start again when opened"
}

cmd_status() {
    if [ -f "$STATE" ]; then
        say "on; state in $STATE:"
        sed 's/^/  /' "$STATE"
    else
        say "off"
    fi
    say "MemAvailable $(mb "$(mem_available_kb)") MB"
}

case ${1:-} in
    on) cmd_on ;;
    off) cmd_off ;;
    status) cmd_status ;;
    *) die "usage: sh headless.sh on|off|status" ;;
esac
