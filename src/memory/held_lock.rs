//! Locks that carry on after a panic poisoned them and, in debug builds,
//! panic where a thread would deadlock on a mutex it holds already: a
//! memory callback ([`Allocator::set_memory_callback`](crate::Allocator::set_memory_callback))
//! or a logger that calls back into the allocator running it. Every pool
//! lock of the allocator is taken through [`lock`] or [`try_lock`] (the
//! allocator module's "Locks" section), and so is each heap's remainder
//! turn ([`MemoryContext::remainder_turn`](crate::memory::context::MemoryContext::remainder_turn)),
//! under which lines are logged too.

use std::sync::{Mutex, MutexGuard, TryLockError};

/// Locks a mutex, carrying on after a panic elsewhere: every critical section
/// leaves its pool consistent before anything that can panic.
///
/// Debug builds panic instead of deadlocking when this thread holds the
/// mutex already, as it does when a memory callback
/// ([`Allocator::set_memory_callback`](crate::Allocator::set_memory_callback)),
/// which runs under a pool's lock, calls back into the allocator running it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> Held<'_, T> {
    #[cfg(debug_assertions)]
    let key = held::enter(mutex as *const Mutex<T> as usize);
    Held {
        guard: mutex
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
        #[cfg(debug_assertions)]
        key,
    }
}

/// [`lock`] without waiting: `None` when the mutex is held (by another
/// thread, or by this one: that cannot deadlock). Recorded as [`lock`]
/// records it, so that a memory callback run under it that calls back
/// into the allocator panics in debug builds rather than deadlock there.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<Held<'_, T>> {
    let guard = match mutex.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    Some(Held {
        guard,
        // Taken, so not held by this thread before: no panic here.
        #[cfg(debug_assertions)]
        key: held::enter(mutex as *const Mutex<T> as usize),
    })
}

/// A mutex held through [`lock`] or [`try_lock`]: its guard, and in
/// debug builds the record that this thread holds it (dropped with the
/// guard).
pub(crate) struct Held<'a, T> {
    guard: MutexGuard<'a, T>,
    #[cfg(debug_assertions)]
    key: usize,
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Held<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(debug_assertions)]
impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        held::leave(self.key);
    }
}

/// Debug builds' record of the mutexes each thread holds through [`lock`].
#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    }

    /// Records that this thread is about to lock the mutex at `key`, and
    /// panics when it holds it already: the lock would never be granted.
    pub(super) fn enter(key: usize) -> usize {
        // No record during the thread's teardown (the allocator dropped
        // by another thread-local's destructor): nothing is checked then.
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            let again = held.contains(&key);
            if !again {
                held.push(key);
            }
            drop(held);
            assert!(
                !again,
                "vk-suballoc: this thread already holds this lock of the allocator, which \
                 would deadlock: a memory callback (Allocator::set_memory_callback), or a \
                 logger given a line logged under the lock, called into the allocator \
                 running it"
            );
        });
        key
    }

    /// The mutex at `key` was unlocked.
    pub(super) fn leave(key: usize) {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(index) = held.iter().rposition(|&k| k == key) {
                held.swap_remove(index);
            }
        });
    }
}
