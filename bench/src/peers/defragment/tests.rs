//! Unit tests of the `--defragment` measurement that need its internals:
//! the parsing of `--defragment-every` and a replay's figures over its
//! plans (sums, medians, per-move costs). They are apart from
//! `defragment.rs` so that the measurement itself, which replays the traces
//! with plans, reads on its own.

use super::*;

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
