//! `largest_free_bound`, which the Vulkan pools ask before
//! `allocate_packed`, over proptest sequences run through the property
//! tests' shadow model (`tests/offset_model/shadow.rs`, which checks every
//! step as those tests do): after each step the bound is at least the
//! largest free range (less would turn a request that fits away) and at
//! most the free bytes (more would let through requests a test of the
//! free bytes turned away). Here, not in `tests/offset_model.rs`, because
//! the bound is the crate's own.
//!
//! The bound matters where a bin's bound outlives the range it was
//! taken from: the bin's largest range taken whole while smaller ones stay
//! in it, and fewer bytes free in all than that range had. Requests of
//! unrelated sizes almost never leave the allocator that full;
//! `Op::FillFreeRange` takes a free range whole, or all but a part, and so
//! fills it to the byte.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::shadow::{Op, Shadow};

/// Requests log-uniform up to the capacity, mostly unaligned, frees, and
/// free ranges taken whole or in part.
fn op(capacity: u64) -> impl Strategy<Value = Op> {
    let bits = 64 - capacity.leading_zeros();
    let size = (0..bits).prop_flat_map(|b| (1u64 << b)..(2u64 << b));
    let align = prop_oneof![3 => Just(1u64), 1 => (1u32..=8).prop_map(|s| 1u64 << s)];
    let request = (size, align);
    prop_oneof![
        4 => request.clone().prop_map(|(size, align)| Op::Allocate { size, align }),
        1 => request.prop_map(|(size, align)| Op::AllocateMinMemory { size, align }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        3 => (any::<usize>(), prop_oneof![Just(0u8), any::<u8>()])
            .prop_map(|(pick, leave)| Op::FillFreeRange { pick, leave }),
    ]
}

/// A capacity of 1 byte to 1 MiB, a few to many slots, up to 200 steps.
fn case() -> impl Strategy<Value = (u64, u32, Vec<Op>)> {
    (1u64..=1 << 20, 1u32..64).prop_flat_map(|(capacity, slots)| {
        (
            Just(capacity),
            Just(slots),
            prop::collection::vec(op(capacity), 1..200),
        )
    })
}

fn bound_run<const M: u32>(capacity: u64, slots: u32, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut shadow = Shadow::<M>::new(capacity, slots);
    for (step, &op) in ops.iter().enumerate() {
        shadow.apply(op);
        let report = shadow.heap.storage_report();
        let bound = shadow.heap.largest_free_bound();
        prop_assert!(
            report.largest_free_range <= bound && bound <= report.free_bytes,
            "step {step}, {op:?}: largest_free_bound {bound}, {report:?}"
        );
    }
    shadow.finish();
    Ok(())
}

proptest! {
    // 256 cases (`PROPTEST_CASES` overrides); a failing case's seed is
    // kept in `free_bound.regressions` beside this file (commit it).
    // Not under Miri: the offset core has no unsafe code, and this runs
    // natively with overflow checks.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    #[cfg_attr(miri, ignore)]
    fn the_free_bound_lies_between_the_largest_range_and_the_free_bytes(
        m in 2u32..=6,
        (capacity, slots, ops) in case(),
    ) {
        match m {
            2 => bound_run::<2>(capacity, slots, &ops)?,
            3 => bound_run::<3>(capacity, slots, &ops)?,
            4 => bound_run::<4>(capacity, slots, &ops)?,
            5 => bound_run::<5>(capacity, slots, &ops)?,
            _ => bound_run::<6>(capacity, slots, &ops)?,
        }
    }
}
