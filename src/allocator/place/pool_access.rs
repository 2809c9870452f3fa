//! How the allocator reaches its pools, and the locks it takes on the way:
//! [`lock`] carries on after a panic poisoned a mutex and, in debug
//! builds, panics where a thread would deadlock on a mutex it holds
//! already (a memory callback that calls back into the allocator),
//! [`try_lock`] does the same without waiting, and
//! [`exclusive`] takes none for the `&mut self` methods. [`PoolAccess`]
//! lets one placement code serve both ways: [`Locked`] for
//! [`Allocator::allocate`](crate::Allocator::allocate), [`Exclusive`] for
//! [`Allocator::allocate_mut`](crate::Allocator::allocate_mut). Apart from
//! the placement because every method of the allocator locks through it
//! (the allocator module's "Locks" section).

use std::sync::{Mutex, MutexGuard, RwLock, TryLockError};

use crate::allocator::pool::{
    for_each_custom_pool, with_custom_pool, with_custom_pool_mut, CustomPools, PoolTag,
};
use crate::memory::type_pool::TypePool;

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

/// The value behind a mutex we hold exclusively: no lock taken. Carries on
/// after a panic as [`lock`] does.
pub(crate) fn exclusive<T>(mutex: &mut Mutex<T>) -> &mut T {
    mutex
        .get_mut()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How the allocation path reaches the pool of a memory type.
pub(crate) trait PoolAccess {
    /// The pools' memory objects.
    type Memory;

    /// Runs `f` on the default pool of `memory_type`, with exclusive
    /// access to it.
    fn with_pool<R>(
        &mut self,
        memory_type: u32,
        f: impl FnOnce(&mut TypePool<Self::Memory>) -> R,
    ) -> R;

    /// Runs `f` on custom pool `tag`, with exclusive access to it; `None`
    /// when it was destroyed.
    fn with_custom_pool<R>(
        &mut self,
        tag: PoolTag,
        f: impl FnOnce(&mut TypePool<Self::Memory>) -> R,
    ) -> Option<R>;

    /// Runs `f` on each custom pool that is not destroyed, in turn, with
    /// exclusive access to it (for the release of kept empty blocks, a
    /// cold path: both accesses take the pools' locks, uncontended through
    /// `&mut self`).
    fn for_each_custom_pool(&mut self, f: impl FnMut(&mut TypePool<Self::Memory>));
}

/// Through each pool's lock: the `&self` methods.
pub(crate) struct Locked<'a, M> {
    pub(crate) types: &'a [Mutex<TypePool<M>>],
    pub(crate) custom: &'a RwLock<CustomPools<M>>,
}

impl<M> PoolAccess for Locked<'_, M> {
    type Memory = M;

    #[inline]
    fn with_pool<R>(&mut self, memory_type: u32, f: impl FnOnce(&mut TypePool<M>) -> R) -> R {
        f(&mut lock(&self.types[memory_type as usize]))
    }

    fn with_custom_pool<R>(
        &mut self,
        tag: PoolTag,
        f: impl FnOnce(&mut TypePool<M>) -> R,
    ) -> Option<R> {
        with_custom_pool(self.custom, tag, f)
    }

    fn for_each_custom_pool(&mut self, f: impl FnMut(&mut TypePool<M>)) {
        for_each_custom_pool(self.custom, f);
    }
}

/// Straight to the pools, no lock: the `&mut self` methods.
pub(crate) struct Exclusive<'a, M> {
    pub(crate) types: &'a mut [Mutex<TypePool<M>>],
    pub(crate) custom: &'a mut RwLock<CustomPools<M>>,
}

impl<M> PoolAccess for Exclusive<'_, M> {
    type Memory = M;

    #[inline]
    fn with_pool<R>(&mut self, memory_type: u32, f: impl FnOnce(&mut TypePool<M>) -> R) -> R {
        f(exclusive(&mut self.types[memory_type as usize]))
    }

    fn with_custom_pool<R>(
        &mut self,
        tag: PoolTag,
        f: impl FnOnce(&mut TypePool<M>) -> R,
    ) -> Option<R> {
        with_custom_pool_mut(self.custom, tag, f)
    }

    fn for_each_custom_pool(&mut self, f: impl FnMut(&mut TypePool<M>)) {
        for_each_custom_pool(self.custom, f);
    }
}
