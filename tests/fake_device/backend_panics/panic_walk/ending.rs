//! The end of a walk of `panic_walk.rs`: everything held freed and
//! nothing left allocated, or the allocator dropped holding it all, a
//! panic armed; either way the device is clean after the drop.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use vk_suballoc::device::fake::FakeCall;

use super::{arm_logger, disarm_logger, Walk};
use crate::leak_log::{record_thread_lines, take_thread_lines};
use crate::panic_message;

impl Walk {
    /// Frees everything held, releases what is queued, checks that no
    /// allocation is left, and drops the allocator. A backend panic still
    /// armed may go off on the way: each call goes on past it.
    pub(super) fn free_everything(mut self) {
        self.countdown.store(0, Ordering::SeqCst);
        self.hooks
            .iter()
            .for_each(|left| left.store(0, Ordering::SeqCst));
        disarm_logger();
        while let Some(ring) = self.rings.pop() {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                self.allocator.destroy_upload_ring(ring)
            }));
        }
        while let Some(held) = self.held.pop() {
            // SAFETY: the fake device runs no GPU work.
            let freed = catch_unwind(AssertUnwindSafe(|| unsafe {
                self.allocator.free(held.allocation)
            }));
            if let Ok(freed) = freed {
                assert_eq!(freed, Ok(()), "a free at the end, {}", self.where_());
            }
        }
        for _ in 0..3 {
            // SAFETY: as above.
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
                self.allocator.collect_idle()
            }));
        }
        let stats = self.allocator.stats();
        let left = (stats.allocations(), stats.live_bytes());
        assert_eq!(left, (0, 0), "allocations left, {}", self.where_());
        for pool in std::mem::take(&mut self.pools) {
            let _ = catch_unwind(AssertUnwindSafe(|| self.allocator.destroy_pool(pool)));
        }
        self.drop_and_check(None);
    }

    /// Drops the allocator with everything still held, a logger, the
    /// callback or the backend panicking on the way; each allocation held
    /// is named as a leak.
    pub(super) fn drop_holding_everything(mut self) {
        let armed = match self.rng.below(3) {
            0 => {
                let k = 1 + self.rng.below(8);
                arm_logger(k);
                format!("logger panics on line {k}")
            }
            1 => {
                let k = 1 + self.rng.below(4) as i64;
                self.countdown.store(k, Ordering::SeqCst);
                format!("callback panics on event {k}")
            }
            _ => {
                let call = [FakeCall::Unmap, FakeCall::Free][self.below(2)];
                let nth = 1 + self.rng.below(3);
                self.device.panic_on(call, nth);
                format!("backend panics in {call:?} {nth}")
            }
        };
        self.history.push(format!("dropped, {armed}"));
        record_thread_lines();
        let held = std::mem::take(&mut self.held).len();
        self.drop_and_check(Some(held));
    }

    /// Drops the allocator (its panic caught) and checks that the device
    /// holds nothing, the callback was told of every free, and, given the
    /// allocations held, that each was named as a leak.
    fn drop_and_check(self, held: Option<usize>) {
        let Self {
            allocator,
            device,
            balance,
            context,
            history,
            ..
        } = self;
        let dropped = catch_unwind(AssertUnwindSafe(|| drop(allocator)));
        disarm_logger();
        let where_ = || {
            let panicked = dropped.as_ref().err().map(|p| panic_message(&**p));
            format!(
                "{context}, drop panicked: {panicked:?}, after\n{}",
                history.join("\n")
            )
        };
        if let Some(held) = held {
            let leaks = take_thread_lines()
                .iter()
                .filter(|line| {
                    line.contains("leaked allocation")
                        || line.contains("leaked dedicated allocation")
                })
                .count();
            assert_eq!(leaks, held, "leak lines, {}", where_());
        }
        // Rules broken, memory objects and resources left, and memory
        // objects the callback was not told are freed.
        let left = (
            device.violations(),
            device.live_allocations().len(),
            device.live_resources(),
            balance.load(Ordering::SeqCst),
        );
        assert_eq!(left, (vec![], 0, 0, 0), "left at the drop, {}", where_());
    }
}
