#!/usr/bin/env bash
# The Miri checks `.ci/run` makes (TESTING.md, "Miri and ThreadSanitizer"),
# runnable alone: scripts/ci-miri.sh (needs a nightly toolchain with the
# miri and rust-src components; MIRIFLAGS=-Zmiri-tree-borrows scripts/ci-miri.sh
# runs it all under Tree Borrows). `.ci/run` runs it beside its other steps:
# Miri interprets on one core, and the builds and test runs leave the other
# idle much of the time.
set -euo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# The library's unit tests over the fake device, the core's among them:
# the unsafe code outside the core (mapped slices, flushes, margins, ring
# writes, the fake device's host bytes), Miri's data-race detector on one
# small threaded walk, and the core (no unsafe code; overflow). Pure-logic
# tests too slow under Miri are skipped here, or ignored under it
# (`#[cfg_attr(miri, ignore = ...)]`, with the reason).
cargo +nightly miri test --lib --features fake-device -- \
    --skip memory_type_choice --skip runs:: --skip host_memory_tests
# The documentation's examples (the README's among them), which write
# through mapped pointers as users will copy them (about 40 s).
cargo +nightly miri test --doc --features fake-device
# The fake-memory layer's host cache, whose bytes the application reaches
# through the pointer it was given while the layer holds them (a few
# seconds). A filter, so the count that ran is checked, as below.
cargo +nightly miri test -p vk-fake-memory-layer host_cache 2>&1 | tee "$log"
ran=$(awk '/^test result: ok\./ { ran += $4 } END { print ran + 0 }' "$log")
expected=5
if [ "${ran:-0}" -ne "$expected" ]; then
    echo "Miri ran ${ran:-0} of the $expected host_cache tests of the layer: the filter" \
        "no longer matches them, or matches tests not counted (update \$expected)" >&2
    exit 1
fi
# The filters name tests: a renamed one would silently drop out, so the
# count that ran is checked, exactly: a test added under a prefix filter
# (`backend_panics::`) would otherwise hide one that dropped out. Miri's isolation
# hides the clock the randomised tests seed from, so the seed is forwarded;
# MIRIFLAGS from the caller (-Zmiri-tree-borrows, say) are kept. The panic
# walk under `backend_panics::` is left to the native runs: twenty walks
# of hundreds of steps, whose caught panics' backtraces read the working
# directory, which the isolation hides too.
VK_SUBALLOC_SEED=1 MIRIFLAGS="${MIRIFLAGS:+$MIRIFLAGS }-Zmiri-env-forward=VK_SUBALLOC_SEED" \
    cargo +nightly miri test --features fake-device --test fake_device -- \
    mapping::neighbours::a_slice_outlives mapping::neighbours::a_shared_slice \
    mapping::host_access::copies_flush \
    margins::overrun_checks::an_overrun_is_caught_when_its_allocation_is_freed \
    margins::overrun_checks::check_corruption_lists backend_panics:: \
    frames::ring_writes::ring_writes_flush \
    frames::ring_growth::two_threads_growing \
    frames::ring_destroyed_under_a_write::a_ring_destroyed_while_a_write_copies \
    frames::ring_writes::two_threads_ring_writing_one_allocation \
    threads::whole_api::whole_api_from_threads_on_a_small_mobile_gpu \
    threads::whole_api::whole_api_from_threads_with_debug_work_on_a_small_mobile_gpu \
    ring_fill::allocation_checks::a_stale_host_write_is_caught_by_the_next_ring_allocation \
    ring_fill::non_coherent_memory::non_coherent_host_and_gpu_writes_after_reclaim_are_caught \
    ring_fill::beside_writes:: \
    thread_exit:: --skip backend_panics::panic_walk 2>&1 | tee "$log"
ran=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$log")
expected=23
if [ "${ran:-0}" -ne "$expected" ]; then
    echo "Miri ran ${ran:-0} of the $expected named fake-device tests: a filter no longer" \
        "matches, or matches tests not counted (update \$expected)" >&2
    exit 1
fi
