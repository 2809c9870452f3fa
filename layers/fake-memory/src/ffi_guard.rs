//! Keeps panics from crossing into the loader.
//!
//! Unwinding out of an `extern "system"` function aborts the process, and
//! aborting the test process would hide which test broke. Every entry point
//! runs its body under [`guard`], which turns a panic into a message on
//! standard error and a fallback return value (an error code, or nothing).

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body`; if it panics, reports `entry_point` on standard error and
/// returns `on_panic`.
pub fn guard<R>(entry_point: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    // AssertUnwindSafe: after a panic the layer's state stays consistent (all
    // shared data sits behind poison-tolerant locks and is updated in single
    // steps), and the caller only sees `on_panic`.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(_) => {
            // Best effort: a failed write to stderr must not panic again.
            let _ = writeln!(
                std::io::stderr(),
                "vk-fake-memory-layer: internal panic in {entry_point}; returning a failure to the caller"
            );
            on_panic
        }
    }
}
