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
//!
//! Its parts are beside it in `pool/`: [`PoolDesc`] (`pool_desc.rs`), the
//! pool handle and tags (`handle.rs`), and the table (`table.rs`); this
//! file makes and destroys pools.

mod handle;
mod pool_desc;
mod table;

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags;

use super::place::{lock, retry_after_releasing, Locked};
use super::Allocator;
use crate::device::{MemoryDeviceExt, DEDICATED_ONLY_HANDLE_TYPES, DEFINED_HANDLE_TYPES};
use crate::memory::deferred_log;
use crate::memory::first_panic::FirstPanic;
use crate::memory::type_pool::{PoolPolicy, TypePool};
use crate::memory::Usage;
use crate::report::TypeStats;
use crate::Error;
pub use handle::Pool;
pub(crate) use handle::{Home, PoolTag};
pub use pool_desc::PoolDesc;
use table::write;
pub(super) use table::{
    custom_mut, for_each_custom_pool, read, with_custom_pool, with_custom_pool_mut,
};
pub(crate) use table::{CustomPools, PoolCell};

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
    /// `VK_EXT_external_memory_host` and QNX Screen buffers are
    /// import-only), or one the backend
    /// reports the device cannot export
    /// ([`MemoryProperties::exportable_handle_types`](crate::device::MemoryProperties::exportable_handle_types);
    /// the ash backend cannot tell, so checking support per resource is
    /// the caller's, see [`PoolDesc::export`]), then, with `min_blocks`,
    /// naming those of the D3D11 texture and D3D12 resource types, whose
    /// memory is only ever dedicated to one resource (Vulkan requires every
    /// driver to report `DEDICATED_ONLY` for them;
    /// VUID-VkMemoryAllocateInfo-pNext-00639);
    /// [`Error::AlignmentNotPowerOfTwo`] for a
    /// [`PoolDesc::min_alignment`] neither 0 nor a power of two;
    /// [`Error::TooManyPools`]; the errors of making the `min_blocks`
    /// blocks ([`Error::OutOfDeviceMemory`], [`Error::TooManyObjects`], ...,
    /// after the empty blocks the pools keep were released and the
    /// blocks tried again, as for a request short of memory:
    /// [`Config::empty_block_reserve`](crate::Config::empty_block_reserve)),
    /// after which nothing is left of the pool.
    ///
    /// # Time complexity
    /// O(custom pool slots), to find a free one, and a `vkAllocateMemory` call
    /// per `min_blocks` block (with [`Config::debug_fill`](crate::Config::debug_fill),
    /// a write of each; should one fail, the release of kept empty blocks a
    /// request short of memory makes, and the blocks tried again).
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
            retry_after_releasing(
                &self.context,
                &mut pools,
                desc.memory_type,
                error,
                &mut 0,
                |_| pool.make_min_blocks(&self.context),
            )?;
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
        // Blocks of such memory would break VUID-VkMemoryAllocateInfo-pNext-00639:
        // it is only ever dedicated to a named resource.
        let dedicated_only = export & DEDICATED_ONLY_HANDLE_TYPES;
        if !dedicated_only.is_empty() && desc.min_blocks > 0 {
            return Err(Error::NotExportable {
                handle_types: dedicated_only,
            });
        }
        if desc.min_alignment != 0 && !desc.min_alignment.is_power_of_two() {
            return Err(Error::AlignmentNotPowerOfTwo(desc.min_alignment));
        }
        Ok(PoolPolicy {
            block_size: (desc.block_size != 0).then_some(desc.block_size),
            min_blocks: u64::from(desc.min_blocks),
            max_blocks,
            export_handle_types: export,
            min_alignment: desc.min_alignment,
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
    ///
    /// # Time complexity
    /// O(1), under the pool's lock.
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

    pub(super) fn check_pool_owner(&self, pool: &Pool) -> Result<(), Error> {
        if pool.allocator == self.id {
            Ok(())
        } else {
            Err(Error::ForeignPool)
        }
    }
}

/// Handle types memory can be imported from but never exported as: host
/// pointers (`VK_EXT_external_memory_host`) and QNX Screen buffers
/// (`VK_QNX_external_memory_screen_buffer`, an import extension), which
/// Vulkan has no call to get out of a `VkDeviceMemory`.
const IMPORT_ONLY: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::from_raw(
    vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT.as_raw()
        | vk::ExternalMemoryHandleTypeFlags::HOST_MAPPED_FOREIGN_MEMORY_EXT.as_raw()
        | vk::ExternalMemoryHandleTypeFlags::SCREEN_BUFFER_QNX.as_raw(),
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
