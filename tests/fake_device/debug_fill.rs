//! Debug fills (`Config::debug_fill`): new allocations read `0xDC`, freed
//! memory `0xEF`, and a write into freed memory is caught when the memory
//! is allocated again, or by `check_corruption`.
//!
//! Blocks are kept small (`large_heap_block_size`): a fill touches every
//! byte of a block, and the fake device's host memory is otherwise only
//! allocated when touched.
//!
//! The tests sit in the files below by what they check: the bytes the
//! fills leave, writes after free caught, and long or threaded workloads
//! that must report nothing. This file holds the helpers they share, some
//! of which other files use too (`ring_fill.rs`, `debug_fill_walk.rs`,
//! ...): the fill bytes, the config with fills, the views of an
//! allocation's bytes, writes through a kept pointer, the kept third of a
//! set of allocations and a compacting plan's limits.

use std::ptr::NonNull;

use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, CorruptionReport, DefragmentationLimits, Request,
    ResourceKind, Usage,
};

use super::{free, requirements, FakeAllocator};

#[path = "debug_fill/false_positives.rs"]
mod false_positives;
#[path = "debug_fill/filled_bytes.rs"]
mod filled_bytes;
#[path = "debug_fill/writes_after_free.rs"]
mod writes_after_free;

const MIB: u64 = 1 << 20;

/// The discrete layout's device-local type, which the host cannot see.
const VRAM: u32 = 1;
/// The discrete layout's host-visible coherent type, where `UPLOAD` lands.
const HOST: u32 = 2;

pub(super) const NEW: u8 = 0xDC;
pub(super) const FREED: u8 = 0xEF;

/// Debug fills on, with 4 MiB blocks (the first ones smaller).
fn with_fill() -> Config {
    Config {
        debug_fill: true,
        large_heap_block_size: 4 * MIB,
        ..Config::default()
    }
}

/// `len` bytes of `memory` from `offset`, as the GPU sees them.
pub(super) fn device_bytes(
    device: &FakeDevice,
    memory: ash::vk::DeviceMemory,
    offset: u64,
    len: u64,
) -> Vec<u8> {
    // SAFETY: the tests hold no mapped slice across the call.
    unsafe { device.read(memory, offset, len as usize) }.unwrap()
}

/// An allocation's bytes, as the GPU sees them.
fn bytes_of(device: &FakeDevice, a: &Allocation) -> Vec<u8> {
    device_bytes(device, a.memory(), a.offset(), a.size())
}

/// Makes 24 allocations of `request`, keeps every third and frees the
/// others, calling `freed(memory, offset)` after each free: blocks two
/// thirds free, whose kept allocations a compacting plan
/// ([`compacting`]) moves. Returns the kept ones.
pub(super) fn keep_every_third(
    allocator: &FakeAllocator,
    request: &Request<'_>,
    mut freed: impl FnMut(ash::vk::DeviceMemory, u64),
) -> Vec<Allocation> {
    let made: Vec<Allocation> = (0..24)
        .map(|_| allocator.allocate(request).unwrap())
        .collect();
    let mut kept = Vec::new();
    for (i, a) in made.into_iter().enumerate() {
        if i % 3 == 0 {
            kept.push(a);
            continue;
        }
        let (memory, offset) = (a.memory(), a.offset());
        free(allocator, a);
        freed(memory, offset);
    }
    kept
}

/// Limits under which a plan empties blocks and compacts the rest.
pub(super) fn compacting() -> DefragmentationLimits {
    DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true)
}

/// `len` bytes through `pointer`, kept from an allocation that may be
/// freed: its block must still be alive.
pub(super) fn bytes_at(pointer: NonNull<u8>, len: u64) -> Vec<u8> {
    // SAFETY: the caller keeps the block mapped; the tests hold no other
    // reference to these bytes, and nothing writes them meanwhile.
    unsafe { std::slice::from_raw_parts(pointer.as_ptr(), len as usize) }.to_vec()
}

/// Writes `bytes` through `pointer`, kept from a freed allocation whose
/// block is still alive: the bug the fills catch.
pub(super) fn write_at(pointer: NonNull<u8>, at: u64, bytes: &[u8]) {
    // SAFETY: the block is mapped still (the test keeps it), and no
    // reference to these bytes is alive.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            pointer.as_ptr().add(at as usize),
            bytes.len(),
        );
    }
}

/// Where a `check_corruption` report found writes after free: each one's
/// memory and first changed byte, in the report's order.
pub(super) fn written_after_free(report: &CorruptionReport) -> Vec<(ash::vk::DeviceMemory, u64)> {
    report
        .written_after_free
        .iter()
        .map(|written| (written.memory, written.first_changed))
        .collect()
}

pub(super) fn all(bytes: &[u8], byte: u8) -> bool {
    bytes.iter().all(|&b| b == byte)
}

/// The request `size` bytes of `kind` in custom pool `pool`, or in the
/// default pools.
fn request(size: u64, kind: ResourceKind, pool: Option<vk_suballoc::Pool>) -> Request<'static> {
    let mut desc = AllocationDesc::new(Usage::UPLOAD);
    if let Some(pool) = pool {
        desc = desc.pool(pool);
    }
    Request::with_desc(requirements(size, 256), kind, desc)
}
