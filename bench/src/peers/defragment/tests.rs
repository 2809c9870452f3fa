//! Unit tests of the `--defragment` measurement that need its internals:
//! the parsing of `--defragment-every` and a replay's figures over its
//! plans (sums, medians, per-move costs). They are apart from
//! `defragment.rs` so that the measurement itself, which replays the traces
//! with plans, reads on its own.

use super::*;
use crate::trace::Kind;

#[test]
fn every_is_operations_or_a_share_of_the_trace() {
    assert_eq!(Every::parse("4000"), Ok(Every::Ops(4000)));
    assert_eq!(Every::parse("2%"), Ok(Every::Percent(2.0)));
    assert_eq!(Every::parse("2%").map(|e| e.ops(200_250)), Ok(4005));
    assert_eq!(Every::parse("0.001%").map(|e| e.ops(100)), Ok(1));
    assert!(Every::parse("0").is_err());
    assert!(Every::parse("0%").is_err());
    assert!(Every::parse("101%").is_err());
}

#[test]
fn plan_figures_sum_and_take_medians_over_the_plans() {
    let sample = |ns, movables, moves| PlanSample {
        ns,
        movables,
        moves,
        free_ns: 10 * moves as u64,
        ..PlanSample::default()
    };
    let replay = Replay {
        plans: vec![
            sample(300, 100, 0),
            sample(100, 100, 2),
            sample(900, 300, 8),
        ],
        ..Replay::default()
    };
    assert_eq!(replay.moves(), 10);
    assert_eq!(replay.plans_with_moves(), 2);
    assert_eq!(replay.plan_ns_median_max(), (300, 900));
    assert_eq!(replay.movables_median_max(), (100, 300));
    assert!((replay.plan_ns_per_movable() - 3.0).abs() < 1e-9);
    assert_eq!(replay.plan_ns_per_move(), Some(130.0));
    assert_eq!(replay.free_ns_per_move(), Some(10.0));
    assert_eq!(Replay::default().plan_ns_per_move(), None);
}

/// A scaling trace in small: a fill of 4 allocations (set-up), a churn of
/// 2 frees and 2 allocations (measured), and the free-all of 4.
fn scaling_like() -> Trace {
    use crate::trace::{Op, Req, Segment};
    let op = |slot, req| Op { slot, req };
    let segment = |alloc, start, end| Segment { alloc, start, end };
    Trace {
        name: "scaling-4".to_owned(),
        seed: 0,
        requests: vec![Req::device_local(256, 64, Kind::Buffer)],
        ops: vec![
            op(0, 0),
            op(1, 0),
            op(2, 0),
            op(3, 0),
            op(0, FREE),
            op(1, FREE),
            op(0, 0),
            op(1, 0),
            op(0, FREE),
            op(1, FREE),
            op(2, FREE),
            op(3, FREE),
        ],
        segments: vec![
            segment(true, 0, 4),
            segment(false, 4, 6),
            segment(true, 6, 8),
            segment(false, 8, 12),
        ],
        slots: 4,
        measured: 1..3,
        allocations: 6,
        frees: 6,
    }
}

/// The operation counts after which a plan runs.
fn plan_points(trace: &Trace, every: Every) -> Vec<usize> {
    let (window, every) = (plan_window(trace), plan_every(trace, every));
    (0..=trace.ops.len())
        .filter(|&done| plan_due(&window, every, done))
        .collect()
}

/// The scaling rows are "a plan over N live allocations": its plans fall
/// in the measured churn, where N are live, never in the fill (a plan at
/// 1e6 listed 546 013 allocations at the median, most plans falling in
/// the fill) nor in the free-all; and every 2 % is of the measured
/// operations.
#[test]
fn scaling_plans_fall_in_the_churn_at_n_live() {
    let trace = scaling_like();
    assert_eq!(plan_points(&trace, Every::Ops(1)), vec![5, 6, 7, 8]);
    assert_eq!(plan_points(&trace, Every::Percent(50.0)), vec![6, 8]);
}

/// The other traces measure every operation: plans every N of them from
/// the start, up to the last allocation.
#[test]
fn other_traces_plan_from_the_start_to_the_last_allocation() {
    let mut trace = scaling_like();
    trace.measured = 0..4;
    assert_eq!(plan_points(&trace, Every::Ops(3)), vec![3, 6]);
    assert_eq!(plan_every(&trace, Every::Percent(50.0)), 6);
}

/// A pool replay counts the requests its block had no room for; a request
/// refused for anything else (the block could not be made, a memory type
/// the pool's is not) is a fault that must fail the run, not a refusal.
#[test]
fn only_a_full_pool_is_a_refusal() {
    use vk_suballoc::Error;
    assert!(pool_refusal(&Error::PoolFull { max_blocks: 1 }));
    assert!(!pool_refusal(&Error::OutOfDeviceMemory));
    assert!(!pool_refusal(&Error::TooLargeForPool {
        size: 2 << 20,
        block_size: 1 << 20
    }));
}

/// The replay's correctness check finds what it exists to find: an
/// overlap (also one hidden behind a smaller range in between, and a
/// range inside another), and a buffer and an image in one granularity
/// page of a memory object; and nothing among ranges that only touch, lie
/// in other memory objects, or are of one kind in a shared page.
#[test]
fn the_check_finds_overlaps_and_shared_pages() {
    const BUFFER: bool = false;
    const IMAGE: bool = true;
    // Clean: touching ranges, the same offsets in another memory object,
    // two buffers in one page, a buffer and an image a page apart.
    let clean = vec![
        (1, 0, 100, BUFFER),
        (1, 100, 200, BUFFER),
        (2, 0, 100, IMAGE),
        (1, 1024, 2048, IMAGE),
        (2, 1024, 1100, BUFFER),
    ];
    assert_eq!(conflicts(clean, 1024), (0, 0));
    // The first range holds the next two; its overlap with the third is
    // found between neighbours all the same.
    let nested = vec![
        (1, 0, 1000, BUFFER),
        (1, 10, 20, BUFFER),
        (1, 500, 600, BUFFER),
    ];
    assert_eq!(conflicts(nested, 1).0, 1);
    let overlapping = vec![(7, 100, 300, BUFFER), (7, 299, 400, BUFFER)];
    assert_eq!(conflicts(overlapping, 1), (1, 0));
    // A buffer ending in the page an image starts in, in either order.
    let shared = vec![
        (1, 0, 1025, BUFFER),
        (1, 2048, 3000, IMAGE),
        (1, 3000, 3100, BUFFER),
    ];
    assert_eq!(conflicts(shared, 1024), (0, 1));
    let image_first = vec![(3, 0, 1, IMAGE), (3, 1023, 1024, BUFFER)];
    assert_eq!(conflicts(image_first, 1024), (0, 1));
    // A granularity of 0 (no device says it) counts as 1: no sharing.
    assert_eq!(
        conflicts(vec![(1, 0, 8, IMAGE), (1, 8, 16, BUFFER)], 0),
        (0, 0)
    );
}
