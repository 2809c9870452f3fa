//! Unit tests of the offset allocator that need its internals; the property
//! tests against a shadow model live in `tests/offset_model.rs`.
//!
//! They are split by what they check, one file each: `placement` (the
//! bins' search and aligned placement), `allocation_ids` (stale, double
//! and foreign frees, slots and generations), `argument_errors` (the typed
//! error of each bad argument), `capacity_and_slots` (growth, slot limits
//! and metadata), `queries` (`allocation_at`, `gaps_around`, counters),
//! `random_model` (random runs against a model), `packed_calls` (the
//! pools' packed calls against the public ones), `free_bound` (the pools'
//! `largest_free_bound` over the property tests' shadow model) and
//! `shadow_retirement` (that model through retired slots). This file keeps the
//! xorshift the two random files share.

mod allocation_ids;
mod argument_errors;
mod capacity_and_slots;
mod free_bound;
mod packed_calls;
mod placement;
mod queries;
mod random_model;
mod shadow_retirement;

// The property tests' shadow model, which `free_bound` and
// `shadow_retirement` run with the internals at hand.
#[path = "../../tests/offset_model/shadow.rs"]
#[allow(unreachable_pub, unused_imports, missing_debug_implementations)]
mod shadow;

/// A small xorshift so this test needs no crate; the property tests use proptest.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
