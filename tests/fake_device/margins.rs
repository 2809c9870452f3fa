//! Debug margins (`Config::debug_margin`) and corruption detection in them
//! (`Config::detect_corruption`, `Allocator::check_corruption`).
//!
//! The tests sit in the files below by what they check. This file holds
//! the helpers they share: the config with a margin, the discrete layout's
//! two types, a GPU write past an allocation, and the check that live
//! allocations stay a margin apart.

use std::collections::HashMap;

use ash::vk;
use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{Allocation, Config};

#[path = "margins/long_workloads.rs"]
mod long_workloads;
#[path = "margins/moved_allocations.rs"]
mod moved_allocations;
#[path = "margins/overrun_checks.rs"]
mod overrun_checks;
#[path = "margins/placement.rs"]
mod placement;

const MIB: u64 = 1 << 20;

/// The discrete layout's types: device-local, and host-visible coherent
/// (where `UPLOAD` lands).
const VRAM: u32 = 1;
const HOST: u32 = 2;

fn with_margin(margin: u64, detect: bool) -> Config {
    Config {
        debug_margin: margin,
        detect_corruption: detect,
        ..Config::default()
    }
}

/// Writes `bytes` at `offset` bytes past the start of `allocation`, as a
/// GPU overrun would.
fn gpu_write(device: &FakeDevice, allocation: &Allocation, offset: u64, bytes: &[u8]) {
    // SAFETY: no slice of the allocation is alive across the call.
    let written = unsafe { device.write(allocation.memory(), allocation.offset() + offset, bytes) };
    assert!(written);
}

/// Every live allocation of one memory object starts at least `margin`
/// bytes after the end of the one before it.
fn assert_apart(live: &[Allocation], margin: u64, context: &str) {
    let mut by_memory: HashMap<vk::DeviceMemory, Vec<(u64, u64)>> = HashMap::new();
    for a in live.iter().filter(|a| !a.is_dedicated()) {
        by_memory
            .entry(a.memory())
            .or_default()
            .push((a.offset(), a.size()));
    }
    for ranges in by_memory.values_mut() {
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            let ((offset, size), (next, _)) = (pair[0], pair[1]);
            assert!(
                offset + size + margin <= next,
                "{context}: {next} is within {margin} bytes of {offset}+{size}"
            );
        }
    }
}
