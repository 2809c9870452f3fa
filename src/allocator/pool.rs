//! Custom pools: blocks of one memory type set apart for some resources,
//! with a fixed block size and limits on their number (VMA's `VmaPool`).
//!
//! A custom pool is a [`TypePool`] of its own, under its own lock, with a
//! [`PoolPolicy`]. The allocator keeps them in a table of slots behind a
//! read-write lock. A call takes the pool's `Arc` under the table's read
//! lock, releases it, and then locks the pool alone: the table is never
//! held while a pool is, so threads in different pools never wait for each
//! other, even while one pool's lock is held across `vkAllocateMemory`.
//! Making and destroying pools take the write lock briefly, with no driver
//! call and no pool lock under it. Through `&mut self`
//! ([`with_custom_pool_mut`]) no lock is taken: the table is reached
//! through `RwLock::get_mut`, and the pool through `Arc::get_mut`. A pool destroyed while another thread
//! holds its `Arc` is marked so ([`TypePool::is_destroyed`]), and that
//! thread's call refuses it as stale. (Pools of one heap still make memory
//! objects one at a time: the heap's turn, `MemoryContext`.) The default pools (one per memory
//! type) are not in this table, so their paths never touch it.
//!
//! Each allocation carries a [`PoolTag`]: 0 for its memory type's default
//! pool, else the slot of its custom pool and that slot's generation, so a
//! handle of a destroyed pool is not taken for a later pool in the same
//! slot. A slot whose 16-bit generation runs out is retired rather than
//! wrapped, so no tag ever names two pools.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, RwLock};

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags;

use super::place::{lock, retry_after_releasing, Locked};
use super::Allocator;
use crate::device::{MemoryDeviceExt, DEFINED_HANDLE_TYPES};
use crate::memory::deferred_log;
use crate::memory::first_panic::FirstPanic;
use crate::memory::type_pool::{PoolPolicy, TypePool};
use crate::memory::Usage;
use crate::report::TypeStats;
use crate::Error;

/// How to make a custom pool ([`Allocator::create_pool`]).
///
/// ```
/// use vk_suballoc::PoolDesc;
/// // Four 64 MiB blocks, made at once and never more: a fixed budget for
/// // streamed textures.
/// let desc = PoolDesc::new(0)
///     .block_size(64 << 20)
///     .min_blocks(4)
///     .max_blocks(4)
///     .name("textures");
/// assert_eq!(desc.max_blocks, Some(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolDesc<'a> {
    /// The memory type of every block: [`Allocator::memory_type_for`] picks
    /// one for a usage, as for any request.
    pub memory_type: u32,
    /// The size of every block in bytes; 0 (the default): blocks grow as
    /// the default pools' do, from smaller first blocks to the memory
    /// type's preferred size (`min_blocks` are made at the preferred
    /// size). A fixed size is never retried smaller when the driver is out
    /// of memory. An optimal-tiling image in blocks shared with linear
    /// resources takes whole `bufferImageGranularity` pages, so in blocks
    /// smaller than one page each such image takes a block of its own. A
    /// request larger than a block (its size plus
    /// [`Config::debug_margin`](crate::Config::debug_margin)) is refused
    /// ([`Error::TooLargeForPool`]), unless it takes dedicated memory of
    /// its own size, which the driver or
    /// [`DedicatedPolicy::Always`](crate::DedicatedPolicy::Always)
    /// requires.
    pub block_size: u64,
    /// Blocks made with the pool: it never holds fewer, when they empty,
    /// through [`Allocator::trim`] or defragmentation. A number of blocks,
    /// not those blocks: while it holds more, any empty one may be
    /// released, one made with the pool included (VMA's `minBlockCount`).
    pub min_blocks: u32,
    /// No block is made past this many: requests then fail with
    /// [`Error::PoolFull`]. `None`: no limit.
    pub max_blocks: Option<u32>,
    /// The pool's name, in the debug names of its blocks and unnamed
    /// dedicated memory, memory maps and dumps.
    pub name: Option<&'a str>,
    /// `VK_EXT_memory_priority` priority in `[0, 1]` of its blocks, and of
    /// its dedicated allocations whose request names none; ignored when
    /// the extension is not enabled. As
    /// [`AllocationDesc::priority`](crate::AllocationDesc::priority): clamped
    /// to the range, NaN means 0.5.
    pub priority: Option<f32>,
    /// The handle types every memory object of the pool can be exported as
    /// (`VkExportMemoryAllocateInfo`, VMA's `pMemoryAllocateNext`); empty
    /// (the default): none. See [`export`](Self::export).
    pub export_handle_types: vk::ExternalMemoryHandleTypeFlags,
}

impl<'a> PoolDesc<'a> {
    /// A pool of `memory_type` with default blocks and no limit.
    pub const fn new(memory_type: u32) -> Self {
        Self {
            memory_type,
            block_size: 0,
            min_blocks: 0,
            max_blocks: None,
            name: None,
            priority: None,
            export_handle_types: vk::ExternalMemoryHandleTypeFlags::empty(),
        }
    }

    /// Sets a fixed block size.
    pub const fn block_size(mut self, bytes: u64) -> Self {
        self.block_size = bytes;
        self
    }

    /// Sets the blocks made at once and kept.
    pub const fn min_blocks(mut self, blocks: u32) -> Self {
        self.min_blocks = blocks;
        self
    }

    /// Sets the most blocks the pool may hold.
    pub const fn max_blocks(mut self, blocks: u32) -> Self {
        self.max_blocks = Some(blocks);
        self
    }

    /// Sets the name.
    pub const fn name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }

    /// Sets the memory priority of its memory objects.
    pub const fn priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Makes every memory object of the pool exportable as `handle_types`,
    /// for interop with CUDA, OpenGL, a video API or another process: its
    /// blocks (`min_blocks` included) and its dedicated memory are
    /// allocated with `VkExportMemoryAllocateInfo { handleTypes }` chained,
    /// as VMA's `VmaPoolCreateInfo::pMemoryAllocateNext` does. The default
    /// pools never export. Empty `handle_types` (the default): none.
    /// Each bit must be a handle type Vulkan defines:
    /// [`Allocator::create_pool`] refuses a pool with any other (as with
    /// `from_raw` on a bit from a newer header than ash 0.38's) with
    /// [`Error::NotExportable`] naming those bits, and makes nothing.
    ///
    /// An allocation's [`memory`](crate::Allocation::memory) is its
    /// block's (or its dedicated) `VkDeviceMemory`: export that
    /// (`vkGetMemoryFdKHR`, `vkGetMemoryWin32HandleKHR`), and the resource
    /// lives at [`offset`](crate::Allocation::offset) in it. The importer
    /// imports the whole memory object, of
    /// [`Allocator::memory_size`](crate::Allocator::memory_size) bytes (for
    /// an opaque handle, import with that size and the pool's memory
    /// type), and so sees every other allocation in that block as well:
    /// give data another process must not read a pool of its own, or
    /// dedicated memory.
    ///
    /// Vulkan's rules, the caller's to keep:
    /// - Every buffer or image bound to the pool's memory is created with
    ///   `VkExternalMemoryBufferCreateInfo` / `VkExternalMemoryImageCreateInfo`
    ///   naming a handle type the memory was allocated with
    ///   (VUID-vkBindBufferMemory-memory-02726,
    ///   VUID-vkBindImageMemory-memory-02728), aliases included
    ///   ([`create_aliasing_buffer`](crate::Allocator::create_aliasing_buffer)
    ///   takes the caller's create info, so chain it there too).
    /// - The handle types are supported and compatible for those resources
    ///   (VUID-VkExportMemoryAllocateInfo-handleTypes-00656): check
    ///   `vkGetPhysicalDeviceExternalBufferProperties` or
    ///   `vkGetPhysicalDeviceImageFormatProperties2` with
    ///   `VkPhysicalDeviceExternalImageFormatInfo` for `EXPORTABLE`.
    ///   [`Allocator::create_pool`] refuses only what it can tell without a
    ///   resource (see there).
    /// - A handle type those queries report `DEDICATED_ONLY` for needs
    ///   memory of its own per resource: allocate in such a pool with
    ///   [`DedicatedPolicy::Always`](crate::DedicatedPolicy::Always) and a
    ///   dedicated target (the create-and-bind helpers name it), so that
    ///   the memory carries `VkMemoryDedicatedAllocateInfo`.
    /// - The importer names the same `allocationSize` and memory type for
    ///   an opaque handle, and imports with `VkMemoryDedicatedAllocateInfo`
    ///   only memory the pool dedicated to an identical resource
    ///   (VUID-VkMemoryDedicatedAllocateInfo-buffer-01879, -image-01878 for
    ///   `OPAQUE_FD`): a block is imported without it.
    /// - The extension of the handle type is enabled where exporting needs
    ///   one (`VK_KHR_external_memory_fd` for `vkGetMemoryFdKHR`).
    ///
    /// A [defragmentation plan](crate::Allocator::plan_defragmentation)
    /// moves what the engine lists, exporting pools' allocations too:
    /// **an importer keeps seeing the old block**, not the moved contents.
    /// List an exported allocation as [`Movable`](crate::Movable) only
    /// when the importer imports it again. Likewise, a block the pool
    /// releases (when it empties, or through [`trim`](crate::Allocator::trim))
    /// lives on in an importer that holds it, but new allocations never
    /// land there again: export and import per allocation, not once per
    /// pool (the pool keeps `min_blocks` blocks, but not necessarily those
    /// it was made with: see the `min_blocks` field).
    ///
    /// ```
    /// use ash::vk;
    /// use vk_suballoc::PoolDesc;
    /// let desc = PoolDesc::new(0)
    ///     .block_size(64 << 20)
    ///     .export(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
    /// assert_eq!(desc.export_handle_types, vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
    /// ```
    pub const fn export(mut self, handle_types: vk::ExternalMemoryHandleTypeFlags) -> Self {
        self.export_handle_types = handle_types;
        self
    }
}

/// A custom pool: name it in [`AllocationDesc::pool`](crate::AllocationDesc::pool)
/// to allocate from it. A copyable handle; [`Allocator::destroy_pool`]
/// ends it, after which requests naming it fail with [`Error::StalePool`].
///
/// Eight bytes, and `Option<Pool>` too: a request carries one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pool {
    pub(crate) allocator: u32,
    /// Its memory type and tag as a [`Home`]: never 0, as the tag is a
    /// custom pool's.
    home: NonZeroU32,
}

impl Pool {
    fn new(allocator: u32, memory_type: u32, tag: PoolTag) -> Self {
        debug_assert!(tag.slot().is_some());
        // A custom pool's tag is never 0, so neither is its home. Were it,
        // MIN (memory type 1, tag 0: a default pool's) names no custom
        // pool, so the handle would only ever be refused as stale.
        let home = NonZeroU32::new(Home::new(memory_type, tag).0).unwrap_or(NonZeroU32::MIN);
        Self { allocator, home }
    }

    /// The memory type of its blocks.
    pub fn memory_type(&self) -> u32 {
        Home(self.home.get()).memory_type()
    }

    /// Its slot and generation in the allocator's table.
    pub(crate) fn tag(&self) -> PoolTag {
        Home(self.home.get()).pool()
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = self.tag();
        f.debug_struct("Pool")
            .field("memory_type", &self.memory_type())
            .field("slot", &tag.slot())
            .field("generation", &tag.generation())
            .field("allocator", &self.allocator)
            .finish()
    }
}

/// Which pool of its memory type an allocation lives in, in 27 bits: 0 for
/// the default pool, else a custom pool's slot plus one (low 11 bits) and
/// that slot's generation (16 bits above).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct PoolTag(u32);

impl PoolTag {
    /// The memory type's default pool.
    pub(crate) const DEFAULT: Self = Self(0);

    fn custom(slot: usize, generation: u16) -> Self {
        debug_assert!(slot < MAX_POOLS);
        Self((u32::from(generation) << SLOT_BITS) | (slot as u32 + 1))
    }

    /// The custom pool's slot; `None` for a default pool.
    #[inline]
    pub(crate) fn slot(self) -> Option<usize> {
        ((self.0 & MAX_POOLS as u32) as usize).checked_sub(1)
    }

    fn generation(self) -> u16 {
        (self.0 >> SLOT_BITS) as u16
    }
}

/// Bits of a [`PoolTag`] naming the slot.
const SLOT_BITS: u32 = 11;

/// Custom pools at once: slots 0..2046, named by an 11-bit tag minus one.
const MAX_POOLS: usize = (1 << SLOT_BITS) - 1;

/// An allocation's memory type (low 5 bits: Vulkan has at most 32) and
/// [`PoolTag`] (the 27 bits above), in the one word the handle has room
/// for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Home(u32);

impl Home {
    /// The home of an allocation of `memory_type` (below 32) in `pool`.
    #[inline]
    pub(crate) fn new(memory_type: u32, pool: PoolTag) -> Self {
        debug_assert!(memory_type < 32);
        Self(memory_type | (pool.0 << 5))
    }

    #[inline]
    pub(crate) fn memory_type(self) -> u32 {
        self.0 & 31
    }

    #[inline]
    pub(crate) fn pool(self) -> PoolTag {
        PoolTag(self.0 >> 5)
    }
}

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
    fn has_room(&self) -> bool {
        self.slots.len() < MAX_POOLS || self.slots.iter().any(Slot::is_vacant)
    }

    /// The first free slot, made when none is; `None` when all
    /// [`MAX_POOLS`] are taken or retired.
    fn vacant_slot(&mut self) -> Option<usize> {
        if let Some(index) = self.slots.iter().position(Slot::is_vacant) {
            return Some(index);
        }
        if self.slots.len() >= MAX_POOLS {
            return None;
        }
        self.slots.push(Slot {
            generation: 0,
            pool: None,
        });
        Some(self.slots.len() - 1)
    }

    /// Puts `pool` in slot `index` (from [`vacant_slot`](Self::vacant_slot)),
    /// returning its tag.
    fn fill(&mut self, index: usize, pool: TypePool<M>) -> PoolTag {
        let slot = &mut self.slots[index];
        slot.pool = Some(Arc::new(Mutex::new(pool)));
        PoolTag::custom(index, slot.generation)
    }

    /// Empties the slot of `tag` when it still holds that pool; the slot's
    /// next pool gets a new tag, and a slot out of generations retires.
    fn remove(&mut self, tag: PoolTag) {
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
pub(super) fn with_custom_pool<M, R>(
    custom: &RwLock<CustomPools<M>>,
    tag: PoolTag,
    f: impl FnOnce(&mut TypePool<M>) -> R,
) -> Option<R> {
    let cell = read(custom).get(tag)?;
    let mut pool = lock(&cell);
    (!pool.is_destroyed()).then(|| f(&mut pool))
}

/// [`with_custom_pool`] through `&mut`: no other thread is inside the
/// allocator, so none holds the pool (its `Arc` is shared only for the
/// length of a call), and no lock is taken. Were one to, its lock would be.
pub(super) fn with_custom_pool_mut<M, R>(
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
pub(super) fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The value behind a read-write lock we hold exclusively: no lock taken.
pub(super) fn custom_mut<T>(lock: &mut RwLock<T>) -> &mut T {
    lock.get_mut()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Makes a custom pool: blocks of one memory type set apart for the
    /// requests that name it ([`AllocationDesc::pool`](crate::AllocationDesc::pool)),
    /// with an optional fixed block size and limits on the number of blocks
    /// (VMA's `vmaCreatePool`). Makes its `min_blocks` blocks now.
    ///
    /// What a pool is for: capping a subsystem's memory (`max_blocks`),
    /// keeping memory for it whatever else is allocated (`min_blocks`), or
    /// blocks of a size chosen for its resources. Its blocks count in
    /// [`stats`](Self::stats) and the budgets like any other; its own
    /// figures are [`pool_stats`](Self::pool_stats).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a memory type the device does not have
    /// or the allocator may not use (AMD's device-coherent types without
    /// [`DeviceFeatures::amd_device_coherent_memory`](crate::device::DeviceFeatures::amd_device_coherent_memory),
    /// protected types without
    /// [`DeviceFeatures::protected_memory`](crate::device::DeviceFeatures::protected_memory):
    /// VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872), a block size
    /// larger than the heap or `maxMemoryAllocationSize`, `max_blocks`
    /// below `min_blocks` or 0, or `min_blocks` or `block_size` on a lazily
    /// allocated memory type (whose requests all take dedicated memory);
    /// [`Error::NotExportable`] when [`PoolDesc::export`] has a bit that
    /// is no handle type Vulkan defines (as ash 0.38 knows them;
    /// VUID-VkExportMemoryAllocateInfo-handleTypes-parameter), names a
    /// handle type memory is never exported as (the host-pointer types of
    /// `VK_EXT_external_memory_host` are import-only), or one the backend
    /// reports the device cannot export
    /// ([`MemoryProperties::exportable_handle_types`](crate::device::MemoryProperties::exportable_handle_types);
    /// the ash backend cannot tell, so checking support per resource is
    /// the caller's, see [`PoolDesc::export`]);
    /// [`Error::TooManyPools`]; the errors of making the `min_blocks`
    /// blocks ([`Error::OutOfDeviceMemory`], [`Error::TooManyObjects`], ...,
    /// after the empty blocks the default pools keep were released and the
    /// blocks tried again, as for a request short of memory:
    /// [`Config::empty_block_reserve`](crate::Config::empty_block_reserve)),
    /// after which nothing is left of the pool.
    pub fn create_pool(&self, desc: &PoolDesc<'_>) -> Result<Pool, Error> {
        let policy = self.pool_policy(desc)?;
        if !read(&self.custom).has_room() {
            return Err(Error::TooManyPools);
        }
        let mut pool = TypePool::with_policy(desc.memory_type, policy, desc.name, desc.priority);
        if let Err(error) = pool.make_min_blocks(&self.context) {
            // Kept empty blocks give way to the pool's blocks as they do to
            // a request's (Config::empty_block_reserve): VMA's rule, which
            // keeps one per type, would have left room for them.
            let mut pools = Locked {
                types: &self.pools,
                custom: &self.custom,
            };
            retry_after_releasing(&self.context, &mut pools, desc.memory_type, error, |_| {
                pool.make_min_blocks(&self.context)
            })?;
        }
        // The blocks are made before the table is locked for writing, so
        // that other pools' requests do not wait for vkAllocateMemory.
        let mut custom = write(&self.custom);
        let Some(index) = custom.vacant_slot() else {
            // Another thread took the last slot meanwhile.
            drop(custom);
            pool.release_all(&self.context);
            return Err(Error::TooManyPools);
        };
        let tag = custom.fill(index, pool);
        Ok(Pool::new(self.id, desc.memory_type, tag))
    }

    /// Checks `desc` and turns it into a pool policy.
    fn pool_policy(&self, desc: &PoolDesc<'_>) -> Result<PoolPolicy, Error> {
        let memory_type = desc.memory_type;
        if self.context.usable_types() & type_bit(memory_type) == 0 {
            return Err(Error::InvalidConfig(
                "PoolDesc::memory_type is not a memory type this allocator uses",
            ));
        }
        let heap = self.context.heap_size(memory_type);
        let max = self.context.properties.device.max_memory_allocation_size;
        if desc.block_size > heap.min(max) {
            return Err(Error::InvalidConfig(
                "PoolDesc::block_size exceeds the heap or maxMemoryAllocationSize",
            ));
        }
        if self.context.is_lazily_allocated(memory_type)
            && (desc.min_blocks > 0 || desc.block_size != 0)
        {
            // Its requests all take dedicated memory: blocks would stay empty.
            return Err(Error::InvalidConfig(
                "PoolDesc::min_blocks and block_size must be 0 for a lazily allocated memory type",
            ));
        }
        let max_blocks = desc.max_blocks.map_or(u64::MAX, u64::from);
        if max_blocks == 0 || max_blocks < u64::from(desc.min_blocks) {
            return Err(Error::InvalidConfig(
                "PoolDesc::max_blocks must be at least 1 and at least min_blocks",
            ));
        }
        let export = desc.export_handle_types;
        let exportable = self
            .context
            .properties
            .exportable_handle_types
            .unwrap_or(vk::ExternalMemoryHandleTypeFlags::from_raw(!0));
        // Undefined bits first: a backend that does not tell (`None`) takes
        // every bit, and the driver must never see them.
        let refused = export & (!DEFINED_HANDLE_TYPES | IMPORT_ONLY | !exportable);
        if !refused.is_empty() {
            return Err(Error::NotExportable {
                handle_types: refused,
            });
        }
        Ok(PoolPolicy {
            block_size: (desc.block_size != 0).then_some(desc.block_size),
            min_blocks: u64::from(desc.min_blocks),
            max_blocks,
            export_handle_types: export,
        })
    }

    /// Destroys a custom pool that holds no allocation, releasing its
    /// blocks (`min_blocks` included).
    ///
    /// # Errors
    /// [`Error::PoolNotEmpty`] while it holds allocations, frees waiting for
    /// their frame included: free them and release those (seal the frame
    /// with [`end_frame`](Self::end_frame), then
    /// [`wait_and_collect`](Self::wait_and_collect), or
    /// [`collect_idle`](Self::collect_idle) after `vkDeviceWaitIdle`);
    /// [`Error::ForeignPool`], [`Error::StalePool`]. Nothing changes then.
    ///
    /// # Time complexity
    /// O(the pool's blocks), and a `vkFreeMemory` call per block (with
    /// [`Config::debug_fill`](crate::Config::debug_fill), a read of every
    /// byte of each mapped block, for writes after free).
    pub fn destroy_pool(&self, pool: Pool) -> Result<(), Error> {
        // A write after free found as its blocks are released (debug
        // fills) is logged once the pool's lock is released.
        deferred_log::log_after_if(self.context.debug_types() != 0, || {
            self.destroy_pool_now(pool)
        })
    }

    /// [`destroy_pool`](Self::destroy_pool), its lines left to its caller.
    fn destroy_pool_now(&self, pool: Pool) -> Result<(), Error> {
        self.check_pool_owner(&pool)?;
        let cell = read(&self.custom).get(pool.tag()).ok_or(Error::StalePool)?;
        let mut destroyed = FirstPanic::default();
        {
            let mut pool = lock(&cell);
            if pool.is_destroyed() {
                return Err(Error::StalePool);
            }
            if !pool.is_unused() {
                return Err(Error::PoolNotEmpty {
                    allocations: pool.counters.block_allocations + pool.counters.dedicated,
                });
            }
            // From here on a call that still finds the pool refuses it.
            // A memory callback or logger panicking in its release leaves
            // it released (TypePool::release_all goes on) and still frees
            // its slot below before the panic goes on.
            destroyed.run(|| pool.destroy(&self.context));
        }
        write(&self.custom).remove(pool.tag());
        destroyed.resume();
        Ok(())
    }

    /// The figures of one custom pool, as [`stats`](Self::stats) gives them
    /// per memory type.
    ///
    /// # Errors
    /// [`Error::ForeignPool`], [`Error::StalePool`].
    pub fn pool_stats(&self, pool: &Pool) -> Result<TypeStats, Error> {
        self.check_pool_owner(pool)?;
        let heap = self.context.properties.device.memory_types[pool.memory_type() as usize].heap;
        let cell = read(&self.custom).get(pool.tag()).ok_or(Error::StalePool)?;
        let pool_lock = lock(&cell);
        if pool_lock.is_destroyed() {
            return Err(Error::StalePool);
        }
        let counters = pool_lock.counters;
        Ok(TypeStats::from_counters(
            pool.memory_type(),
            heap,
            &counters,
        ))
    }

    /// The property flags of memory type `memory_type` (VMA's
    /// `vmaGetMemoryTypeProperties`), or `None` past the device's types.
    /// With [`Allocation::memory_type`](crate::Allocation::memory_type) it
    /// answers VMA's `vmaGetAllocationMemoryProperties`: whether an
    /// `UPLOAD | ALLOW_TRANSFER_INSTEAD` allocation landed in device-local
    /// memory the host writes directly, whether its writes need a
    /// [`flush`](Self::flush). AMD's `DEVICE_COHERENT` and
    /// `DEVICE_UNCACHED` bits are not reported (the device layer's flags do
    /// not carry them).
    ///
    /// ```
    /// use ash::vk;
    /// use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
    /// use vk_suballoc::{Allocator, Config, Request, ResourceKind, Usage};
    ///
    /// let allocator = Allocator::new(FakeDevice::new(FakeLayout::rebar()), Config::default())?;
    /// let requirements = vk::MemoryRequirements { size: 4096, alignment: 256, memory_type_bits: !0 };
    /// let usage = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    /// let vertices = allocator.allocate(&Request::new(requirements, usage, ResourceKind::Buffer))?;
    /// let flags = allocator.memory_type_properties(vertices.memory_type()).unwrap();
    /// // Resizable BAR: the GPU reads it in place, no staging copy needed.
    /// assert!(flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE));
    /// // SAFETY: the fake device runs no GPU work.
    /// unsafe { allocator.free(vertices)? };
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    pub fn memory_type_properties(&self, memory_type: u32) -> Option<vk::MemoryPropertyFlags> {
        let ty = self.context.memory_types().get(memory_type as usize)?;
        // gpu-alloc-types' flags have Vulkan's bit values.
        Some(vk::MemoryPropertyFlags::from_raw(u32::from(
            ty.props.bits(),
        )))
    }

    /// The memory type a request with `memory_type_bits` and `usage` would
    /// be placed in first (VMA's `vmaFindMemoryTypeIndex`): the type to
    /// make a custom pool of. Requests fall back to the next type when that
    /// one fails; a pool does not.
    ///
    /// # Errors
    /// [`Error::NoMemoryTypeBits`] when `memory_type_bits` names no usable
    /// type; [`Error::NoSuitableMemoryType`] when none of them suits `usage`.
    pub fn memory_type_for(&self, memory_type_bits: u32, usage: Usage) -> Result<u32, Error> {
        let bits = memory_type_bits & self.context.usable_types();
        if bits == 0 {
            return Err(Error::NoMemoryTypeBits(memory_type_bits));
        }
        let no_type = Error::NoSuitableMemoryType {
            memory_type_bits,
            usage,
        };
        if self.context.lacks_device_address(usage) {
            return Err(no_type);
        }
        self.context
            .ranked_types(usage)
            .iter()
            .map(|&t| u32::from(t))
            .find(|&t| bits & (1 << t) != 0)
            .ok_or(no_type)
    }

    fn check_pool_owner(&self, pool: &Pool) -> Result<(), Error> {
        if pool.allocator == self.id {
            Ok(())
        } else {
            Err(Error::ForeignPool)
        }
    }
}

/// Handle types memory can be imported from but never exported as: host
/// pointers (`VK_EXT_external_memory_host`), which Vulkan has no call to
/// get out of a `VkDeviceMemory`.
const IMPORT_ONLY: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::from_raw(
    vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT.as_raw()
        | vk::ExternalMemoryHandleTypeFlags::HOST_MAPPED_FOREIGN_MEMORY_EXT.as_raw(),
);

/// Whether memory type `props` can serve `usage` in a custom pool: host
/// access needs host-visible memory (the pool's type is not ranked, but a
/// request whose bytes the host must reach cannot live where it cannot).
pub(super) fn pool_type_serves(props: MemoryPropertyFlags, usage: Usage) -> bool {
    !usage.needs_host_access() || props.contains(MemoryPropertyFlags::HOST_VISIBLE)
}

/// The bit of `memory_type` in a `memoryTypeBits` mask; 0 for an index no
/// mask can name (32 or more).
pub(super) fn type_bit(memory_type: u32) -> u32 {
    1u32.checked_shl(memory_type).unwrap_or(0)
}

#[cfg(all(test, feature = "fake-device"))]
mod tests {
    use ash::vk;

    use super::Home;
    use crate::device::fake::{FakeDevice, FakeLayout};
    use crate::{Allocation, AllocationDesc, Allocator, Config, Error, PoolDesc, Request};
    use crate::{ResourceKind, Usage};

    /// A handle from a destroyed pool is refused, even once a new pool
    /// took the same slot and holds an allocation the handle would name
    /// (only the handle's pool generation tells them apart: the offset
    /// allocator's owner tag is forged to match here), and nothing changes.
    #[test]
    fn handles_of_a_destroyed_pool_are_stale_in_its_successor() {
        let device = FakeDevice::new(FakeLayout::discrete());
        let allocator = Allocator::new(device.clone(), Config::default()).unwrap();
        let request = |pool| {
            let requirements = vk::MemoryRequirements {
                size: 1 << 20,
                alignment: 256,
                memory_type_bits: !0,
            };
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
            Request::with_desc(requirements, ResourceKind::Buffer, desc)
        };
        let desc = PoolDesc::new(1).block_size(4 << 20);
        let first = allocator.create_pool(&desc).unwrap();
        let old = allocator.allocate(&request(first)).unwrap();
        let old_tag = old.home.pool();
        // SAFETY: the fake device runs no GPU work.
        unsafe { allocator.free(old) }.unwrap();
        allocator.destroy_pool(first).unwrap();

        let second = allocator.create_pool(&desc).unwrap();
        assert_eq!(second.tag().slot(), first.tag().slot());
        assert_ne!(second.tag(), old_tag);
        let new = allocator.allocate(&request(second)).unwrap();
        let stale = Allocation {
            memory: new.memory,
            offset: new.offset,
            size: new.size,
            home: Home::new(new.memory_type(), old_tag),
            location: new.location,
            allocator: new.allocator,
            mapped: new.mapped,
        };
        assert!(!allocator.owns(&stale));
        // SAFETY: as above.
        let refused = unsafe { allocator.free(stale) };
        assert_eq!(refused, Err(Error::StaleAllocation));
        assert!(allocator.owns(&new));
        assert_eq!(allocator.pool_stats(&second).unwrap().block_allocations, 1);
        // SAFETY: as above.
        unsafe { allocator.free(new) }.unwrap();
        allocator.destroy_pool(second).unwrap();
        drop(allocator);
        device.assert_clean();
    }
}
