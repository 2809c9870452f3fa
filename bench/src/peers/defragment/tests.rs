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
