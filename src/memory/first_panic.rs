//! [`FirstPanic`]: the steps of a call that must all run, say every memory
//! object of a pool freed, even when one panics (the memory callback, a
//! logger): each runs, and the first panic goes on once they all have.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};

/// The first panic of the steps run so far.
#[derive(Default)]
pub(crate) struct FirstPanic(Option<Box<dyn Any + Send>>);

impl FirstPanic {
    /// Runs `step`, keeping its panic when it is the first.
    ///
    /// Unwind safety: each caller's steps leave what they change consistent
    /// before anything that can panic (a pool counts a block out before
    /// freeing it, a free updates its pool before the driver call).
    pub(crate) fn run(&mut self, step: impl FnOnce()) {
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(step)) {
            self.0.get_or_insert(payload);
        }
    }

    /// Keeps the panic a step caught itself (`MemoryContext::tell`'s),
    /// when it is the first.
    pub(crate) fn keep(&mut self, caught: std::thread::Result<()>) {
        if let Err(payload) = caught {
            self.0.get_or_insert(payload);
        }
    }

    /// Goes on with the first panic, if a step panicked.
    pub(crate) fn resume(self) {
        if let Some(payload) = self.0 {
            panic::resume_unwind(payload);
        }
    }
}
