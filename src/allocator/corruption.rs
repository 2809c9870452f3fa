//! Corruption detection: [`Allocator::check_corruption`], and
//! [`Allocator::check_pool_corruption`] for one custom pool. The pattern,
//! which bytes it covers, and the check of a margin when its allocation is
//! freed (`TypePool::free`) are the memory layer's (`type_pool/corruption.rs`),
//! as are the debug fills and their checks (`type_pool/debug_fill.rs`).

use ash::vk;

use super::pool::{type_bit, with_custom_pool};
use super::{Allocator, Pool};
use crate::device::MemoryDeviceExt;
use crate::memory::deferred_log;

use crate::memory::type_pool::{Guarded, TypePool, WrittenFree};
use crate::Error;

/// What [`Allocator::check_corruption`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CorruptionReport {
    /// The live allocations whose margins were checked.
    pub checked: u64,
    /// Those whose margins were written over, by memory type, memory
    /// object and offset.
    pub damaged: Vec<DamagedMargin>,
    /// The free ranges, free run slots and spans of upload rings' free
    /// space checked, with [`Config::debug_fill`](crate::Config::debug_fill):
    /// 0 without.
    pub free_checked: u64,
    /// Those written after they were freed, by memory type, memory object
    /// and offset.
    pub written_after_free: Vec<DamagedFree>,
}

impl CorruptionReport {
    /// Whether every margin and every free range checked was intact.
    pub fn is_clean(&self) -> bool {
        self.damaged.is_empty() && self.written_after_free.is_empty()
    }

    /// Puts both lists in order of memory type, memory object and offset.
    fn sort(&mut self) {
        self.damaged
            .sort_by_key(|damaged| (damaged.memory_type, damaged.memory, damaged.offset));
        self.written_after_free
            .sort_by_key(|written| (written.memory_type, written.memory, written.offset));
    }
}

/// Free memory of a block, one free range or one free run slot, or a span
/// of an upload ring's free space, written after it was freed: a byte of
/// it no longer holds the `0xEF` that
/// [`Config::debug_fill`](crate::Config::debug_fill) filled it with. The
/// host wrote through a pointer kept from a freed allocation (or a ring
/// allocation of a collected frame), or the GPU wrote into a freed
/// resource's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedFree {
    /// Its memory type.
    pub memory_type: u32,
    /// Its block.
    pub memory: vk::DeviceMemory,
    /// The offset in the block of the free range (or slot, or span of
    /// ring space).
    pub offset: u64,
    /// Its size.
    pub size: u64,
    /// The offset in the block of its first byte written.
    pub first_changed: u64,
}

impl DamagedFree {
    fn new(memory_type: u32, written: &WrittenFree) -> Self {
        Self {
            memory_type,
            memory: written.memory,
            offset: written.offset,
            size: written.size,
            first_changed: written.first_changed,
        }
    }
}

/// A live allocation whose margin was written over: something wrote past
/// its end (or before the start of the allocation after it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedMargin {
    /// Its memory type.
    pub memory_type: u32,
    /// Its block.
    pub memory: vk::DeviceMemory,
    /// Its offset in the block.
    pub offset: u64,
    /// Its size, as [`Allocation::size`](crate::Allocation::size) reports it: the margin starts
    /// there.
    pub size: u64,
    /// The bytes after it that held the pattern: the margin, and the
    /// rounding of its size to its alignment or size class.
    pub margin: u64,
    /// Its name ([`AllocationDesc::name`](crate::AllocationDesc::name)), if
    /// it has one.
    pub name: Option<String>,
}

impl DamagedMargin {
    fn new(memory_type: u32, guarded: &Guarded, name: Option<&str>) -> Self {
        Self {
            memory_type,
            memory: guarded.memory,
            offset: guarded.offset,
            size: guarded.size,
            margin: guarded.tail,
            name: name.map(Into::into),
        }
    }
}

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Checks the margin of every live allocation in blocks of the memory
    /// types of `memory_type_bits` that have corruption detection on
    /// ([`Config::detect_corruption`](crate::Config::detect_corruption)),
    /// as VMA's `vmaCheckCorruption`: custom pools' included, and
    /// allocations whose frees wait for their frame; and, in those that
    /// have debug fills ([`Config::debug_fill`](crate::Config::debug_fill)),
    /// every free range and free run slot of their blocks, and the free
    /// space of the upload rings' chunks there (for a destroyed ring's
    /// chunk not freed yet, the space that was free when the ring went),
    /// which must still hold `0xEF` ([`CorruptionReport::written_after_free`]): in
    /// non-coherent types, as the host sees them and, when clean there, once
    /// their whole atoms are invalidated, as the GPU left them. Other
    /// memory types in the mask are skipped. What is found is returned, not
    /// logged, and not counted in
    /// [`corruptions_detected`](Self::corruptions_detected); an
    /// invalidate the driver fails is logged with `log::warn!` once the
    /// call has released its locks (a logger may call back into the
    /// allocator).
    ///
    /// Call it when the GPU is not writing the memory checked (after a
    /// fence wait, for instance): a write in flight may not be seen yet.
    ///
    /// # Errors
    /// [`Error::CorruptionDetectionOff`] when no memory type of
    /// `memory_type_bits` has detection or debug fills on: both are off in
    /// the config (or detection has no margin), the types are not
    /// `HOST_VISIBLE | HOST_COHERENT` (detection) or `HOST_VISIBLE` (debug
    /// fills), or they are types the allocator may
    /// not use (AMD's device-coherent ones without
    /// [`DeviceFeatures::amd_device_coherent_memory`](crate::device::DeviceFeatures::amd_device_coherent_memory),
    /// past the device's, or 0) (VMA returns `VK_ERROR_FEATURE_NOT_PRESENT`).
    ///
    /// # Time complexity
    /// O(live allocations in those types, times each one's tail: the
    /// margin plus the rounding of its size, up to 4 KiB or a granularity
    /// page, read byte by byte); with debug fills, O(free bytes in those
    /// types' blocks and ring chunks), up to their whole size for empty
    /// ones; in
    /// non-coherent types with debug fills, at most one
    /// `vkInvalidateMappedMemoryRanges` per free range and free run slot
    /// (and two per ring chunk); with debug fills, also a pass over every
    /// item queued in the frames ([`free_after_frame`](Self::free_after_frame)
    /// and the `destroy_*_after_frame` calls), for destroyed rings' chunks,
    /// each found looked up among those not freed yet. Under each pool's
    /// lock in turn, then the frame queue's and the upload rings' locks.
    pub fn check_corruption(&self, memory_type_bits: u32) -> Result<CorruptionReport, Error> {
        let types = memory_type_bits & self.context.checked_types();
        if types == 0 {
            return Err(Error::CorruptionDetectionOff { memory_type_bits });
        }
        // A failed invalidate of the debug fills' checks is found under a
        // pool's (or the rings') lock: its warning is logged once the call
        // has released them all.
        Ok(deferred_log::log_after(|| self.corruption_report(types)))
    }

    /// Checks the margins and free ranges of one custom pool, as
    /// [`check_corruption`](Self::check_corruption) checks those of every
    /// pool of a memory type (VMA's `vmaCheckPoolCorruption`): the pool's
    /// blocks and dedicated memory alone, not the default blocks of its
    /// memory type nor other pools', and no upload ring's space.
    ///
    /// # Errors
    /// [`Error::ForeignPool`], [`Error::StalePool`];
    /// [`Error::CorruptionDetectionOff`] (naming the pool's memory type's
    /// bit) when its memory type has neither detection nor debug fills on,
    /// as `check_corruption` of that type.
    ///
    /// # Time complexity
    /// As [`check_corruption`](Self::check_corruption), over the pool's
    /// allocations and free ranges, under its lock.
    pub fn check_pool_corruption(&self, pool: &Pool) -> Result<CorruptionReport, Error> {
        self.check_pool_owner(pool)?;
        let memory_type_bits = type_bit(pool.memory_type());
        let detects = memory_type_bits & self.context.checked_types() != 0;
        deferred_log::log_after(|| {
            let mut report = CorruptionReport::default();
            with_custom_pool(&self.custom, pool.tag(), |custom| {
                if !detects {
                    return Err(Error::CorruptionDetectionOff { memory_type_bits });
                }
                self.check_pool(custom, memory_type_bits, &mut report);
                Ok(())
            })
            .ok_or(Error::StalePool)??;
            report.sort();
            Ok(report)
        })
    }

    /// [`check_corruption`](Self::check_corruption)'s report over the
    /// memory types of `types`, which have corruption detection or debug
    /// fills on.
    fn corruption_report(&self, types: u32) -> CorruptionReport {
        let mut report = CorruptionReport::default();
        for pool in self.pools.iter() {
            self.check_pool(&mut super::lock(pool), types, &mut report);
        }
        self.for_each_custom_pool(|pool| self.check_pool(pool, types, &mut report));
        if types & self.context.fill_types() != 0 {
            let (checked, written) = self.damaged_ring_space(types);
            report.free_checked += checked;
            report.written_after_free.extend(
                written
                    .iter()
                    .map(|(memory_type, written)| DamagedFree::new(*memory_type, written)),
            );
        }
        report.sort();
        report
    }

    /// Adds to `report` what `pool` holds, when its memory type is one of
    /// `types`: its damaged margins where detection is on, its free ranges
    /// written after free where debug fills are.
    fn check_pool(&self, pool: &mut TypePool<M>, types: u32, report: &mut CorruptionReport) {
        let memory_type = pool.memory_type();
        if types & type_bit(memory_type) == 0 {
            return;
        }
        if self.context.detects_corruption(memory_type) {
            let (checked, damaged) = pool.damaged_margins();
            report.checked += checked;
            report.damaged.extend(
                damaged
                    .into_iter()
                    .map(|(guarded, name)| DamagedMargin::new(memory_type, &guarded, name)),
            );
        }
        if self.context.fills(memory_type) {
            let (checked, written) = pool.damaged_free_ranges(&self.context);
            report.free_checked += checked;
            report.written_after_free.extend(
                written
                    .iter()
                    .map(|written| DamagedFree::new(memory_type, written)),
            );
        }
    }

    /// Damaged margins found when their allocations were freed, directly
    /// or through the frame queue, and memory written after it was freed
    /// found when an allocation (or ring allocation, or a defragmentation
    /// plan's destination, kept or given up in the plan) took it again or
    /// when its empty block (or upload-ring chunk) was released, since the
    /// allocator was made: each was logged with `log::error!`. 0 without
    /// [`Config::detect_corruption`](crate::Config::detect_corruption) or
    /// [`Config::debug_fill`](crate::Config::debug_fill).
    pub fn corruptions_detected(&self) -> u64 {
        self.context.corruptions()
    }
}
