//! [`Block`]: one `VkDeviceMemory` shared by many allocations, and
//! [`DedicatedMemory`]: one `VkDeviceMemory` for a single resource.

use std::collections::HashMap;

use ash::vk;

use super::mapping::MappedPtr;
use crate::device::DedicatedTarget;
use crate::offset::OffsetAllocator;

/// A `VkDeviceMemory` governed by an [`OffsetAllocator`].
#[derive(Debug)]
pub(crate) struct Block<M> {
    pub(crate) memory: M,
    pub(crate) raw: vk::DeviceMemory,
    pub(crate) size: u64,
    pub(crate) ranges: OffsetAllocator,
    /// Base pointer of the persistent mapping of host-visible blocks.
    pub(crate) mapped: Option<MappedPtr>,
    /// Granularity class: 0 linear resources, 1 optimal images.
    pub(crate) class: usize,
    /// Names of named allocations, by offset-allocator slot: kept only for
    /// allocations that have one, for leak reports and dumps.
    pub(crate) names: HashMap<u32, Box<str>>,
    /// The `n` of its debug name `vk-suballoc block <type>/<n>`.
    pub(crate) serial: u32,
}

/// A `VkDeviceMemory` that holds exactly one allocation.
#[derive(Debug)]
pub(crate) struct DedicatedMemory<M> {
    pub(crate) memory: M,
    pub(crate) raw: vk::DeviceMemory,
    pub(crate) size: u64,
    pub(crate) mapped: Option<MappedPtr>,
    pub(crate) name: Option<Box<str>>,
    /// Granularity class of the request (0 linear, 1 optimal images) and the
    /// resource the memory was made for: the memory map reads the kind of
    /// the allocation from them.
    pub(crate) class: usize,
    pub(crate) target: Option<DedicatedTarget>,
}
