//! The allocator's table of custom pools ([`CustomPools`]): slots of
//! [`PoolCell`]s behind a read-write lock, whose generations retire a slot
//! rather than let a tag name two pools, and the ways into a pool through
//! it: under the pool's own lock, once the table's is released
//! ([`with_custom_pool`]), or with none through `&mut self`
//! ([`with_custom_pool_mut`]). Apart from the making and destruction of
//! pools, which change the table through a few methods.

use std::sync::{Arc, Mutex, RwLock};

use super::handle::{PoolTag, MAX_POOLS};
use crate::allocator::place::lock;
use crate::memory::type_pool::{PoolShape, TypePool};

/// A custom pool under its own lock. Calls take an `Arc` of it from the
/// table under the table's read lock, release that, and only then lock the
/// pool: the table is never held while a pool is (a pool's lock can be held
/// across `vkAllocateMemory`, and a writer waiting for the table would then
/// hold up every other pool's calls).
pub(crate) type PoolCell<M> = Arc<Mutex<TypePool<M>>>;

/// The custom pools of an allocator, by slot.
#[derive(Debug)]
pub(crate) struct CustomPools<M> {
    slots: Vec<Slot<M>>,
}

#[derive(Debug)]
struct Slot<M> {
    /// Bumped when the slot's pool is destroyed. A slot whose generation
    /// reached `u16::MAX` is retired for good, so that no tag repeats.
    generation: u16,
    pool: Option<PoolCell<M>>,
    /// The pool's [`TypePool::shape`], read here without the pool's lock
    /// (`Allocator::allocate_many`'s checks).
    shape: PoolShape,
}

impl<M> Slot<M> {
    fn is_vacant(&self) -> bool {
        self.pool.is_none() && self.generation < u16::MAX
    }
}

impl<M> Default for CustomPools<M> {
    fn default() -> Self {
        Self { slots: Vec::new() }
    }
}

impl<M> CustomPools<M> {
    /// The slot `tag` names, when it is still of `tag`'s generation.
    #[inline]
    fn index_of(&self, tag: PoolTag) -> Option<usize> {
        let index = tag.slot()?;
        (self.slots.get(index)?.generation == tag.generation()).then_some(index)
    }

    /// The pool `tag` names, when its slot still holds it. (It may be
    /// destroyed by the time it is locked: check [`TypePool::is_destroyed`].)
    #[inline]
    pub(crate) fn get(&self, tag: PoolTag) -> Option<PoolCell<M>> {
        self.slots[self.index_of(tag)?].pool.clone()
    }

    /// The [`TypePool::shape`] of pool `tag`, when its slot still holds it.
    #[inline]
    pub(crate) fn shape(&self, tag: PoolTag) -> Option<PoolShape> {
        let slot = &self.slots[self.index_of(tag)?];
        slot.pool.as_ref().map(|_| slot.shape)
    }

    /// [`get`](Self::get) through `&mut`, without cloning.
    #[inline]
    pub(crate) fn get_mut(&mut self, tag: PoolTag) -> Option<&mut PoolCell<M>> {
        let index = self.index_of(tag)?;
        self.slots[index].pool.as_mut()
    }

    /// Every custom pool in the table, with its tag: a snapshot to lock one
    /// by one after the table's lock is released.
    pub(crate) fn snapshot(&self) -> Vec<(PoolTag, PoolCell<M>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let pool = slot.pool.clone()?;
                Some((PoolTag::custom(index, slot.generation), pool))
            })
            .collect()
    }

    /// Takes every pool out of the table, for drop.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = PoolCell<M>> + '_ {
        self.slots.iter_mut().filter_map(|slot| slot.pool.take())
    }

    /// Whether a slot is free (or can be made).
    pub(super) fn has_room(&self) -> bool {
        self.slots.len() < MAX_POOLS || self.slots.iter().any(Slot::is_vacant)
    }

    /// The first free slot, made when none is; `None` when all
    /// [`MAX_POOLS`] are taken or retired.
    pub(super) fn vacant_slot(&mut self) -> Option<usize> {
        if let Some(index) = self.slots.iter().position(Slot::is_vacant) {
            return Some(index);
        }
        if self.slots.len() >= MAX_POOLS {
            return None;
        }
        self.slots.push(Slot {
            generation: 0,
            pool: None,
            shape: PoolShape::default(),
        });
        Some(self.slots.len() - 1)
    }

    /// Puts `pool` in slot `index` (from [`vacant_slot`](Self::vacant_slot)),
    /// returning its tag.
    pub(super) fn fill(&mut self, index: usize, pool: TypePool<M>) -> PoolTag {
        let slot = &mut self.slots[index];
        slot.shape = pool.shape();
        slot.pool = Some(Arc::new(Mutex::new(pool)));
        PoolTag::custom(index, slot.generation)
    }

    /// Empties the slot of `tag` when it still holds that pool; the slot's
    /// next pool gets a new tag, and a slot out of generations retires.
    pub(super) fn remove(&mut self, tag: PoolTag) {
        let Some(index) = self.index_of(tag) else {
            return;
        };
        let slot = &mut self.slots[index];
        if slot.pool.take().is_some() {
            slot.generation = slot.generation.saturating_add(1);
        }
    }
}

/// Runs `f` on custom pool `tag` of `custom` under the pool's lock (the
/// table's read lock is released first); `None` when it was destroyed.
pub(crate) fn with_custom_pool<M, R>(
    custom: &RwLock<CustomPools<M>>,
    tag: PoolTag,
    f: impl FnOnce(&mut TypePool<M>) -> R,
) -> Option<R> {
    let cell = read(custom).get(tag)?;
    let mut pool = lock(&cell);
    (!pool.is_destroyed()).then(|| f(&mut pool))
}

/// Runs `f` on each custom pool of `custom` that is not destroyed, in
/// turn, under its lock: the pools are listed under the table's read lock,
/// which is released before the first pool's lock is taken, so no two
/// locks are held together. A pool made meanwhile may be left out.
pub(crate) fn for_each_custom_pool<M>(
    custom: &RwLock<CustomPools<M>>,
    mut f: impl FnMut(&mut TypePool<M>),
) {
    let cells = read(custom).snapshot();
    for (_, cell) in cells {
        let mut pool = lock(&cell);
        if !pool.is_destroyed() {
            f(&mut pool);
        }
    }
}

/// [`with_custom_pool`] through `&mut`: no other thread is inside the
/// allocator, so none holds the pool (its `Arc` is shared only for the
/// length of a call), and no lock is taken. Were one to, its lock would be.
pub(crate) fn with_custom_pool_mut<M, R>(
    custom: &mut RwLock<CustomPools<M>>,
    tag: PoolTag,
    f: impl FnOnce(&mut TypePool<M>) -> R,
) -> Option<R> {
    let cell = custom_mut(custom).get_mut(tag)?;
    let mut guard;
    let pool = match Arc::get_mut(cell) {
        Some(mutex) => mutex
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
        None => {
            guard = lock(cell);
            &mut *guard
        }
    };
    (!pool.is_destroyed()).then(|| f(pool))
}

/// Reads through a read-write lock, carrying on after a panic elsewhere as
/// [`lock`] does.
pub(crate) fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The value behind a read-write lock we hold exclusively: no lock taken.
pub(crate) fn custom_mut<T>(lock: &mut RwLock<T>) -> &mut T {
    lock.get_mut()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(super) fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
