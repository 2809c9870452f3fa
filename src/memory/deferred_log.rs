//! Log lines found under the allocator's locks, logged once they are
//! released.
//!
//! The debug work (`Config::debug_fill`, `Config::detect_corruption`) finds
//! writes after free and damaged margins while it holds the lock of the
//! pool it checks: as an empty block is released, as an allocation is
//! freed, as `check_corruption` reads free memory (there, also under the
//! upload rings' lock); and as a destroyed ring's chunk is freed, under
//! `collect`'s `releasing`. It warns there too of a flush or invalidate
//! the driver failed. A logger that calls back into the allocator on such
//! a line (to read [`stats`](crate::Allocator::stats), say, or to dump
//! the memory map) would then wait for that lock forever. So each `&self`
//! call that can reach that work runs it inside [`deferring`] (when some
//! memory type has debug work: [`deferring_if`], which without touches
//! no thread-local): the lines are kept, per thread, until the outermost
//! such call has released every lock it took, and logged then. The
//! `&mut self` twins ([`Allocator::allocate_mut`](crate::Allocator::allocate_mut),
//! [`Allocator::free_mut`](crate::Allocator::free_mut)) hold no lock, but
//! keep their lines the same way, so that a logger that panics on one
//! stops them where it stops the `&self` calls: once the work is done.
//! Outside of one (the allocator's drop: `&mut self` leaves no other
//! caller, and no lock is held), a line is logged at once, where it is
//! found. (The fills and
//! checks of ring space that `ring_allocate`, `collect` and `end_frame`
//! make under the rings' lock keep their lines in their own `RingFill`,
//! logged the same way.)
//!
//! In another thread-local's destructor, once the thread has dropped the
//! kept lines' store, a line is logged at once as well (the lock is held
//! then: a logger that calls back in waits for it, as before this module).
//!
//! A line is found, and kept, only once the pool is consistent again
//! (the block released, the allocation freed): a logger that panics on it
//! leaks nothing, and the panic goes on from the call that found it.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};

use super::first_panic::FirstPanic;

thread_local! {
    /// How many [`deferring`] calls this thread is inside. With no
    /// destructor, it is never destroyed: readable from another
    /// thread-local's destructor.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The lines kept for the outermost [`deferring`] call.
    static KEPT: RefCell<Vec<(log::Level, String)>> = const { RefCell::new(Vec::new()) };
}

/// Logs `line` at `level`: at once outside [`deferring`], else once the
/// outermost `deferring` call returns.
pub(crate) fn log(level: log::Level, line: String) {
    let mut line = Some(line);
    if DEPTH.with(Cell::get) != 0 {
        // Gone once the thread's destructors have dropped it (a call from
        // another thread-local's destructor): the line is logged at once.
        let _ = KEPT.try_with(|kept| {
            if let Some(line) = line.take() {
                kept.borrow_mut().push((level, line));
            }
        });
    }
    if let Some(line) = line {
        log::log!(level, "{line}");
    }
}

/// The lines kept while an outermost [`deferring`] call ran, to log once
/// its caller holds no lock; none for a nested call (its lines wait for
/// the outermost).
#[must_use = "the lines are logged by `log` or `log_quietly`"]
#[derive(Default)]
pub(crate) struct Kept(Vec<(log::Level, String)>);

impl Kept {
    /// Adds `line`, to be logged after the kept ones.
    pub(crate) fn push(&mut self, level: log::Level, line: String) {
        self.0.push((level, line));
    }

    /// Logs every line. A logger that panics on one does not stop the
    /// others: its first panic goes on once all are logged.
    pub(crate) fn log(self) {
        if self.0.is_empty() {
            return;
        }
        let mut panics = FirstPanic::default();
        for (level, line) in self.0 {
            panics.run(|| log::log!(level, "{line}"));
        }
        panics.resume();
    }

    /// Logs every line, dropping a logger's panics: while another panic
    /// goes on.
    pub(crate) fn log_quietly(self) {
        let _ = panic::catch_unwind(AssertUnwindSafe(|| self.log()));
    }

    /// Hands every line to [`log()`]: kept for the outermost [`deferring`]
    /// call on this thread, or logged at once outside one.
    pub(crate) fn defer(self) {
        for (level, line) in self.0 {
            log(level, line);
        }
    }
}

/// Runs `op`, keeping the lines [`log()`] is given meanwhile on this thread;
/// returns `op`'s outcome (its panic caught) and, for the outermost call,
/// the lines, which the caller logs once it holds no lock ([`Kept::log`],
/// or [`Kept::log_quietly`] on the way out of `op`'s panic).
pub(crate) fn deferring<R>(op: impl FnOnce() -> R) -> (std::thread::Result<R>, Kept) {
    let depth = DEPTH.with(|depth| {
        let outer = depth.get();
        depth.set(outer + 1);
        outer
    });
    let outcome = panic::catch_unwind(AssertUnwindSafe(op));
    DEPTH.with(|d| d.set(depth));
    let kept = if depth == 0 {
        // `try_with`: in another thread-local's destructor, once this one
        // is dropped, `log` kept nothing (it logged at once).
        Kept(
            KEPT.try_with(|kept| std::mem::take(&mut *kept.borrow_mut()))
                .unwrap_or_default(),
        )
    } else {
        Kept::default()
    };
    (outcome, kept)
}

/// [`deferring`] where `on` (the allocator has debug work in some memory
/// type: `MemoryContext::debug_types`, the only types whose work finds
/// lines); else `op`'s outcome with no lines, and no thread-local touched:
/// the one test a call pays without debug work.
pub(crate) fn deferring_if<R>(on: bool, op: impl FnOnce() -> R) -> (std::thread::Result<R>, Kept) {
    if on {
        return deferring(op);
    }
    (panic::catch_unwind(AssertUnwindSafe(op)), Kept::default())
}

/// [`log_after`] where `on`, else `op` alone (as [`deferring_if`]).
pub(crate) fn log_after_if<R>(on: bool, op: impl FnOnce() -> R) -> R {
    if on {
        return log_after(op);
    }
    op()
}

/// [`deferring`] for a call whose value holds nothing to free on a
/// logger's panic (a count, `Result<(), Error>`): runs `op`, then logs the
/// lines kept. `op`'s panic goes on once they are logged (a logger's own
/// panic dropped then); else a logger's panic goes on once every line is.
pub(crate) fn log_after<R>(op: impl FnOnce() -> R) -> R {
    let (outcome, kept) = deferring(op);
    finish(outcome, kept)
}

/// The end of [`log_after`], for a caller that released a lock between
/// [`deferring`] and this: logs `kept`, then returns `outcome`'s value or
/// goes on with its panic (a logger's own panic dropped then).
pub(crate) fn finish<R>(outcome: std::thread::Result<R>, kept: Kept) -> R {
    match outcome {
        Ok(value) => {
            kept.log();
            value
        }
        Err(payload) => {
            kept.log_quietly();
            panic::resume_unwind(payload)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{deferring, log, log_after};

    fn kept_lines() -> usize {
        super::KEPT.with(|kept| kept.borrow().len())
    }

    /// Inside `deferring`, lines wait for the outermost call, which returns
    /// them all (a nested call returns none); a panic of the work still
    /// returns them.
    #[test]
    fn lines_wait_for_the_outermost_call() {
        let (outcome, kept) = deferring(|| {
            log(log::Level::Error, "outer".into());
            let (inner, nested) = deferring(|| log(log::Level::Error, "inner".into()));
            assert!(inner.is_ok());
            assert!(nested.0.is_empty());
            assert_eq!(kept_lines(), 2);
            7
        });
        assert_eq!(outcome.ok(), Some(7));
        let lines: Vec<&str> = kept.0.iter().map(|(_, line)| line.as_str()).collect();
        assert_eq!(lines, ["outer", "inner"]);
        assert_eq!(kept_lines(), 0);

        let (outcome, kept) = deferring(|| {
            log(log::Level::Warn, "before the panic".into());
            panic!("the work panics");
        });
        assert!(outcome.is_err());
        assert_eq!(kept.0.len(), 1);
        assert_eq!(kept_lines(), 0);
        // Outside, a line is logged at once: nothing is kept.
        log(log::Level::Error, "at once".into());
        assert_eq!(kept_lines(), 0);
        assert_eq!(log_after(|| 3), 3);
    }
}
