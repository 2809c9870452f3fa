//! One test thread at a time on the Vulkan stack.
//!
//! The validation layer installed with Debian 12 (1.3.239) keeps its
//! per-instance and per-device state in a process-wide hash map that it
//! reads, unlocked, on every call and changes on `vkCreateInstance`,
//! `vkCreateDevice`, `vkDestroyDevice` and `vkDestroyInstance`
//! (Vulkan-ValidationLayers issue 4391). The test binary runs its tests on
//! parallel threads, each with an instance and a device of its own, so one
//! test's create or destroy could free a map node while another test's call
//! walked to it: a SIGSEGV inside the layer, seen in `vkGetFenceStatus`
//! from `Allocator::collect` while another test destroyed its instance
//! (2 in 236 runs of two copies of `frames_suite` at once; once in a
//! `.ci/run`).
//! The Vulkan loader has a like race between concurrent device creation
//! and destruction (Vulkan-Loader issue 2018).
//!
//! Both are legal uses of Vulkan that the tools get wrong, so the harness
//! works around them: a [`StackTurn`] is taken before a context makes its
//! first Vulkan call and given back after its last, and only the thread
//! holding the turn (any number of contexts, any number of threads it
//! starts) uses the stack. Tests of the allocator's own threads run their
//! threads inside one turn as before. The Vulkan binary then runs its tests
//! one after another: about 28 s instead of 12 s on two cores (2026-12-05).

use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

/// Who holds the turn, and for how many contexts; and who waits for it.
struct Holder {
    thread: Option<ThreadId>,
    contexts: usize,
    /// The threads waiting in [`StackTurn::take`] ([`StackTurn::is_waiting`]).
    waiting: Vec<ThreadId>,
}

static HOLDER: Mutex<Holder> = Mutex::new(Holder {
    thread: None,
    contexts: 0,
    waiting: Vec::new(),
});
static GIVEN_BACK: Condvar = Condvar::new();

/// How long a test waits for the turn before failing: far longer than the
/// whole binary runs, so only a context that is never dropped (held by a
/// thread a failed test left hanging) makes a test wait that long.
const PATIENCE: Duration = Duration::from_secs(300);

/// The right of the current thread to use the Vulkan stack, held by one
/// context; the thread keeps the turn until its last context gives its own
/// back.
#[derive(Debug)]
pub struct StackTurn(());

impl StackTurn {
    /// Waits until no other thread holds the turn, and takes it (again, when
    /// this thread holds it already for another context).
    ///
    /// # Panics
    /// When another thread has held the turn for [`PATIENCE`].
    pub fn take() -> Self {
        let me = thread::current().id();
        let start = Instant::now();
        let mut holder = HOLDER.lock().unwrap_or_else(PoisonError::into_inner);
        while holder.thread.is_some_and(|thread| thread != me) {
            let left = PATIENCE.saturating_sub(start.elapsed());
            if left.is_zero() {
                holder.waiting.retain(|&thread| thread != me);
                drop(holder);
                panic!(
                    "another test has held the Vulkan stack for {PATIENCE:?}: \
                     a context never dropped (see tests/support/stack_turn.rs)"
                );
            }
            if !holder.waiting.contains(&me) {
                holder.waiting.push(me);
            }
            holder = GIVEN_BACK
                .wait_timeout(holder, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        holder.waiting.retain(|&thread| thread != me);
        holder.thread = Some(me);
        holder.contexts += 1;
        Self(())
    }

    /// Whether `thread` is waiting in [`take`](Self::take) for another
    /// thread to give the turn back (the harness's own test sees the turn
    /// hold a thread back, rather than sleep and hope it tried).
    pub fn is_waiting(thread: ThreadId) -> bool {
        HOLDER
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waiting
            .contains(&thread)
    }
}

impl Drop for StackTurn {
    /// Gives the turn back once the holder's last context has (whichever
    /// thread drops it: a context shared through an `Arc` may end on
    /// another).
    fn drop(&mut self) {
        let mut holder = HOLDER.lock().unwrap_or_else(PoisonError::into_inner);
        holder.contexts -= 1;
        if holder.contexts == 0 {
            holder.thread = None;
            GIVEN_BACK.notify_all();
        }
    }
}
