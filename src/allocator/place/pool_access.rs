//! How the allocator reaches its pools, and the locks it takes on the way:
//! [`lock`] carries on after a panic poisoned a mutex and, in debug
//! builds, panics where a thread would deadlock on a mutex it holds
//! already (a memory callback that calls back into the allocator),
//! [`try_lock`] does the same without waiting (both from
//! `memory::held_lock`, where the heaps' remainder turns take them too),
//! and [`exclusive`] takes none for the `&mut self` methods. [`PoolAccess`]
//! lets one placement code serve both ways: [`Locked`] for
//! [`Allocator::allocate`](crate::Allocator::allocate), [`Exclusive`] for
//! [`Allocator::allocate_mut`](crate::Allocator::allocate_mut). Apart from
//! the placement because every method of the allocator locks through it
//! (the allocator module's "Locks" section).

use std::sync::{Mutex, RwLock};

use crate::allocator::pool::{
    for_each_custom_pool, with_custom_pool, with_custom_pool_mut, CustomPools, PoolTag,
};
pub(crate) use crate::memory::held_lock::{lock, try_lock};
use crate::memory::type_pool::TypePool;

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
