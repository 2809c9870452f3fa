//! Statistics and dumps: what the allocator holds, per heap, memory type and
//! block.
//!
//! - [`Stats`], from [`Allocator::stats`](crate::Allocator::stats): running
//!   counters per memory type and heap, cheap enough for every frame.
//! - [`MemoryMap`], from [`Allocator::memory_map`](crate::Allocator::memory_map):
//!   every block with its allocations and free ranges in address order, and
//!   every dedicated allocation, custom pools' ([`PoolMap`]) beside their
//!   memory type's default pool. It walks all allocations, so take it when
//!   you need it (a debug key, an out-of-memory report), not every frame.
//! - [`Allocator::stats_json`](crate::Allocator::stats_json) /
//!   [`MemoryMap::to_vma_json`]: the map as JSON in the format of VMA's
//!   `vmaBuildStatsString`, so VMA's `GpuMemDumpVis.py` draws it and tools
//!   written for VMA dumps read it.
//! - [`Allocator::memory_map_svg`](crate::Allocator::memory_map_svg) /
//!   [`MemoryMap::to_svg`]: the map as an SVG picture with no tool needed: one
//!   row per block (and per dedicated allocation) spanning the full width,
//!   free space light grey, allocations coloured by kind with
//!   GpuMemDumpVis's palette, and each allocation's name, kind, size and
//!   offset in a tooltip.
//!
//! # Allocation kinds
//! Every allocation's [`ResourceKind`](crate::ResourceKind) (buffer, linear
//! or optimal image, or unknown) is recorded when it is made (two bits per
//! slot of its block), so the map shows each as [`RangeKind::Buffer`],
//! [`RangeKind::ImageLinear`], [`RangeKind::ImageOptimal`] or
//! [`RangeKind::Unknown`], in blocks and in dedicated memory alike. It is the kind the request named. (A block
//! that only ever held buffers stores nothing: the record starts with its
//! first image or resource of unknown kind, so buffer-only work pays no
//! store.)
//!
//! # Differences from a VMA dump
//! The JSON follows VMA 3.x key for key; where this allocator knows less, it
//! says so in VMA's terms:
//! - `General.GPU` is `"unknown"`, `apiVersion` `"0.0.0"` and `deviceType` 0
//!   when the backend does not know the GPU
//!   ([`MemoryProperties::gpu`](crate::device::MemoryProperties::gpu) is
//!   `None`; [`AshMemoryDevice`](crate::device::AshMemoryDevice) fills it)
//!   and [`MemoryMap::with_gpu`] does not supply it;
//! - a heap's `Flags` has `DEVICE_LOCAL` when one of its memory types is
//!   device-local (exact: the spec ties the two), never `MULTI_INSTANCE`;
//! - a memory type's `Flags` never has `DEVICE_UNCACHED_AMD`, nor VMA's
//!   number for the bits it has no name for (NVIDIA's `RDMA_CAPABLE`, say):
//!   the device layer's flags do not carry them, and a type with either of
//!   AMD's bits shows `DEVICE_COHERENT_AMD` ([`MemoryTypeMap::flag_names`]);
//! - `DefaultPools` has an entry for every memory type, where VMA leaves
//!   out the types it never allocates from (AMD's device-coherent types
//!   on a device without `VK_AMD_device_coherent_memory` enabled): there
//!   such an entry has no blocks and no dedicated allocations, as this
//!   allocator does not use those types either (`MemoryInfo` lists every
//!   type in both);
//! - `Usage` is 0, as VMA writes for memory allocated without a resource;
//! - a block's `MapRefCount` is 1 when it is persistently mapped, else 0;
//! - `CustomPools` lists a memory type's custom pools in the order of their
//!   slots in the allocator: creation order, but that a pool made after
//!   one was destroyed may take its slot (VMA lists them in creation
//!   order); each `Name` is VMA's, the pool's index in that list, then
//!   ` - ` and its name when it has one;
//! - an allocation's `Size`, and the byte figures of blocks, pools and
//!   heaps, count the bytes it holds in its block: its requested size
//!   rounded up to its alignment (at most to a multiple of 4 KiB), or to
//!   whole `bufferImageGranularity` pages for an optimal image sharing a
//!   block with buffers and for a resource of unknown kind (a request whose
//!   rounding alone passes the end of a custom pool's fixed-size block
//!   holds the whole block); a small buffer
//!   in a run holds its whole slot, the size of its class
//!   ([`Config::small_buffer_limit`](crate::Config::small_buffer_limit)),
//!   and the free slots of a run show as `FREE`. VMA's `Size` is the
//!   requested size (rounded up to the granularity only for an optimal
//!   image or a resource of unknown kind, where the granularity is at most
//!   256), and the bytes from its end to the next allocation's aligned
//!   offset are a `FREE` range (or part of one): for the same allocations
//!   a VMA dump has more and smaller `FREE` ranges and lower
//!   `AllocationBytes`; in both, the ranges tile the block. [`Stats`]
//!   count requested sizes, so the two differ by that rounding. Leak
//!   reports give the bytes held, too;
//! - with a [`Config::debug_margin`](crate::Config::debug_margin), the
//!   bytes an allocation holds include its margin: its `Size` does, where
//!   VMA shows the margin as a `FREE` range after it.

mod detailed_stats;
mod json_writer;
mod memory_map;
mod stats;
mod svg;
mod vma_json;

pub use crate::device::GpuInfo;
pub use detailed_stats::DetailedStats;
pub use memory_map::{
    BlockMap, DedicatedMap, HeapMap, MemoryMap, MemoryTypeMap, PoolMap, RangeKind, RangeMap,
};
pub use stats::{HeapStats, Stats, TypeStats};
