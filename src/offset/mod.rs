//! The pure core: offset allocators that know nothing about Vulkan.
//!
//! [`OffsetAllocator`] hands out ranges of an abstract address space
//! `[0, capacity)` in O(1) with power-of-two alignment, generational ids and
//! exact reports. It is what governs each `VkDeviceMemory` block of the Vulkan
//! allocator, and it is public on its own, like VMA's virtual blocks: use it
//! for descriptor heaps, bindless tables or any buffer you carve up yourself.
//!
//! [`LinearAllocator`] is a ring for per-frame transient data, reclaimed a
//! whole frame at a time when that frame's fence has signalled.
//!
//! Neither contains `unsafe` code. Neither touches the heap after
//! construction, except [`OffsetAllocator::reserve_slots`], which exists to
//! add slots outside hot paths. Both keep their metadata outside the range
//! they manage, so that range may be device memory the host cannot access.

#![forbid(unsafe_code)]

mod allocation;
mod bin_mask;
mod error;
mod inspect;
mod linear;
mod node;
mod packed;
mod report;
mod size_class;
mod strategy;
mod tlsf;

pub use allocation::{AllocationId, FreeRange, OffsetAllocation};
pub use error::OffsetError;
pub use linear::{LinearAllocation, LinearAllocator};
pub(crate) use packed::PackedAllocation;
pub use report::{Counters, SearchStats, StorageReport};
pub use strategy::Strategy;
pub use tlsf::{OffsetAllocator, MAX_CAPACITY, MAX_SLOTS};

#[cfg(test)]
mod tests;
