#!/usr/bin/env bash
# nightly.sh: validate a dataset every night; fail only when something new is wrong.
#
# Usage: nightly.sh [DATA [STATE]]
#   DATA   the dataset (default: $SCRUB_DATA)
#   STATE  where the baseline, tonight's manifest, summary.json and the cache live
#          (default: $SCRUB_STATE, else ./scrub-state)
# Exits with scrub's code: 0 nothing new, 1 new or reappeared errors, 2 unusable, 130 interrupted.
# Dataset options (num-classes, check-severity, ...) belong in a scrub.toml beside the data.
set -eu

DATA=${1:-${SCRUB_DATA:?pass DATA or set SCRUB_DATA}}
STATE=${2:-${SCRUB_STATE:-scrub-state}}
mkdir -p "$STATE"

if [ ! -f "$STATE/baseline.jsonl" ]; then
    # First night: today's issues become the baseline (scrub writes baseline.scan.json beside
    # it). Exit 1 only says known issues exist; 2 or 130 is a real failure. The cache is filled
    # too, so that tomorrow's scan reads only what changed.
    rc=0
    scrub scan "$DATA" --manifest "$STATE/baseline.jsonl" --cache "$STATE/cache" \
        --json "$STATE/summary.json" || rc=$?
    if [ "$rc" -gt 1 ]; then
        rm -f "$STATE/baseline.jsonl" "$STATE/baseline.scan.json"  # retry tomorrow
        exit "$rc"
    fi
    echo "nightly: baseline created: $STATE/baseline.jsonl (scrub exited $rc)"
    exit 0
fi

# Every other night: class tonight's issues against the baseline. `|| rc=$?` keeps set -e
# from ending the script on scrub's non-zero exit.
rc=0
scrub scan "$DATA" --baseline "$STATE/baseline.jsonl" --manifest "$STATE/tonight.jsonl" \
    --fail-on new --cache "$STATE/cache" --json "$STATE/summary.json" || rc=$?

if [ "$rc" -eq 0 ]; then
    # Nothing new: tonight's manifest (resolved lines included) is tomorrow's baseline.
    # The scan record first, the manifest last.
    mv -f "$STATE/tonight.scan.json" "$STATE/baseline.scan.json"
    mv -f "$STATE/tonight.jsonl" "$STATE/baseline.jsonl"
    echo "nightly: nothing new; baseline updated"
elif [ "$rc" -eq 1 ]; then
    # New or reappeared errors: keep the baseline, so the job fails every night until they are
    # fixed, or accepted by hand:
    #   cp STATE/tonight.scan.json STATE/baseline.scan.json && cp STATE/tonight.jsonl STATE/baseline.jsonl
    echo "nightly: new or reappeared errors, see $STATE/tonight.jsonl; baseline kept" >&2
fi
exit "$rc"
