//! When the replays plan: [`Every`] (`--defragment-every`), a trace's
//! operations between plans, and the window of operations its plans fall
//! in.

use std::ops::Range;

use crate::trace::{Trace, FREE};

/// How often to plan: `N` operations, or `P%` of each trace's operations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Every {
    Ops(usize),
    Percent(f64),
}

impl Every {
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_suffix('%') {
            match p.parse::<f64>() {
                Ok(p) if p > 0.0 && p <= 100.0 => Ok(Self::Percent(p)),
                _ => Err(format!("not a percentage in (0, 100]: {s}")),
            }
        } else {
            match s.replace('_', "").parse::<usize>() {
                Ok(n) if n > 0 => Ok(Self::Ops(n)),
                _ => Err(format!("not a positive number of operations: {s}")),
            }
        }
    }

    /// Operations between plans on a trace of `ops` operations.
    pub fn ops(self, ops: usize) -> usize {
        match self {
            Self::Ops(n) => n,
            Self::Percent(p) => ((ops as f64 * p / 100.0).round() as usize).max(1),
        }
    }
}

/// A trace's measured operations: all of them, but for the scaling
/// traces, whose fill and final free-all are set-up.
fn measured_ops(trace: &Trace) -> Range<usize> {
    let segments = &trace.segments[trace.measured.clone()];
    match (segments.first(), segments.last()) {
        (Some(first), Some(last)) => first.start as usize..last.end as usize,
        _ => 0..trace.ops.len(),
    }
}

/// The operations a trace's plans fall among (a plan may follow each of
/// `window.start + 1..=window.end`): its measured ones, up to its last
/// allocation. A scaling trace's plans so fall in its churn, where its N
/// allocations are live: not in its fill, where they listed fewer (at
/// 1e6, 546 013 at the median plan), nor in its free-all.
pub(super) fn plan_window(trace: &Trace) -> Range<usize> {
    let last_alloc = trace
        .ops
        .iter()
        .rposition(|op| op.req != FREE)
        .map_or(0, |i| i + 1);
    let start = measured_ops(trace).start.min(last_alloc);
    start..last_alloc
}

/// The operations between plans on `trace`: `every` of its measured
/// operations ([`measured_ops`]).
pub(super) fn plan_every(trace: &Trace, every: Every) -> usize {
    every.ops(measured_ops(trace).len())
}

/// Whether a plan follows the first `done` operations of a trace whose
/// plans fall in `window`, one every `every` operations.
pub(super) fn plan_due(window: &Range<usize>, every: usize, done: usize) -> bool {
    done > window.start && done <= window.end && (done - window.start) % every == 0
}
