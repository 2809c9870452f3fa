//! The memory architectures the layer can fake.
//!
//! A profile is the part of a GPU's description an allocator depends on: its
//! memory heaps (how much memory, device-local or not), its memory types (which
//! heap, which property flags, whether optimal images may live there: linear
//! ones may live wherever buffers may) and the
//! limits that govern placement: `bufferImageGranularity` (linear and optimal
//! resources must not share a page of that size), `nonCoherentAtomSize` (the
//! unit of flushes and invalidates on non-coherent memory),
//! `maxMemoryAllocationCount` and the minimum alignments of buffers and images.
//! The figures are modelled on real devices but rounded for tests.
//!
//! This file holds what a profile is and the compile-time check of every
//! profile; the profiles themselves are in `profile/architectures.rs`.

use ash::vk;

mod architectures;

pub use architectures::{ALL, AMD, APPLE, ARC, DISCRETE, INTEGRATED, MALI, MOBILE, REBAR};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// One fake memory heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeHeap {
    /// Capacity; allocations past it fail with `ERROR_OUT_OF_DEVICE_MEMORY`.
    pub size: u64,
    /// `VkMemoryHeapFlags` reported for the heap.
    pub flags: vk::MemoryHeapFlags,
}

/// One fake memory type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeType {
    /// `VkMemoryPropertyFlags` reported for the type.
    pub flags: vk::MemoryPropertyFlags,
    /// Index into the profile's heaps.
    pub heap: u32,
    /// Whether the memory requirements of optimal images offer this type.
    /// Buffers and linear images always may use it unless it is lazily
    /// allocated; a lazily allocated type is offered to transient-attachment
    /// images only (`memory_type_map.rs`).
    pub images: bool,
}

/// A complete fake memory architecture.
#[derive(Debug, PartialEq, Eq)]
pub struct Profile {
    /// Name used in the configuration string (`discrete`, `integrated`,
    /// `mobile`, `amd`, `rebar`, `arc`, `apple`, `mali`).
    pub name: &'static str,
    /// `VkPhysicalDeviceProperties::deviceType` reported by the layer.
    pub device_type: vk::PhysicalDeviceType,
    /// Heaps, at most `VK_MAX_MEMORY_HEAPS`.
    pub heaps: &'static [FakeHeap],
    /// Types, at most `VK_MAX_MEMORY_TYPES`.
    pub types: &'static [FakeType],
    /// `VkPhysicalDeviceLimits::bufferImageGranularity`.
    pub buffer_image_granularity: u64,
    /// `VkPhysicalDeviceLimits::nonCoherentAtomSize`.
    pub non_coherent_atom_size: u64,
    /// `VkPhysicalDeviceLimits::maxMemoryAllocationCount`.
    pub max_memory_allocation_count: u32,
    /// Lowest alignment reported in buffer memory requirements (lavapipe's
    /// own 64 is the floor: the layer raises alignments, never lowers them).
    /// The driver's figure, as the crate's `FakeLayout` of the same name has
    /// it (`BufferRequirements` in `src/device/fake/layout/requirements.rs`
    /// lists the drivers' figures and their sources; `profile_mirrors.rs`
    /// compares).
    pub min_buffer_alignment: u64,
    /// Buffer requirement sizes are rounded up to a multiple of this, as
    /// real drivers do (NVIDIA: 16 bytes, RADV and Turnip: the alignment,
    /// ANV: 4 for uniform and storage buffers under robust buffer access;
    /// lavapipe reports the buffer's own size). An allocation can then be longer than its buffer, and code
    /// that copies or checks an allocation's size worth of a buffer's bytes
    /// is caught (`VUID-vkCmdCopyBuffer-size-00115`).
    pub buffer_size_granule: u64,
    /// The alignment image memory requirements report, by tiling, size and
    /// depth/stencil format, as the driver the profile models answers it
    /// (the crate's `ImageRequirements` in
    /// `src/device/fake/layout/requirements.rs` lists the drivers' figures
    /// and their sources; `profile_mirrors.rs` compares).
    /// Lavapipe's own answer (16 on Mesa 22.3, 64 on later Mesa) is the
    /// floor: the layer raises alignments, never lowers them.
    pub image_alignment: ImageAlignment,
    /// Whether the device offers `VK_EXT_memory_budget` (with the layer's
    /// own figures), as the GPU it models does; without it the layer
    /// hides the extension, the driver's too, so an allocator falls back
    /// to its own accounting. The `budget=on|off` option overrides it.
    pub memory_budget: bool,
    /// Whether the device offers `VK_EXT_memory_priority` and its
    /// `memoryPriority` feature (emulated by the layer, `memory_priority.rs`),
    /// as the GPU it models does (NVIDIA's and AMD's drivers). The
    /// `priority=on|off` option overrides it.
    pub memory_priority: bool,
}

/// How a driver aligns images: optimal-tiling images by their size (the
/// driver's tiled layouts grow with the image), linear ones alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageAlignment {
    /// Optimal images smaller than [`large_from`](Self::large_from) bytes.
    pub optimal: u64,
    /// Optimal images of at least [`large_from`](Self::large_from) bytes.
    pub large: u64,
    /// The size (the driver's) from which optimal images take
    /// [`large`](Self::large); `u64::MAX`: none do.
    pub large_from: u64,
    /// Optimal depth/stencil images (a format with a depth or stencil
    /// aspect) at any size, where the driver lays them out apart from
    /// colour images; `None`: as colour images of their size.
    pub depth_stencil: Option<u64>,
    /// Linear-tiling images.
    pub linear: u64,
}

impl ImageAlignment {
    /// Every image aligned to `alignment` (the `image-alignment=N`
    /// option's).
    pub const fn flat(alignment: u64) -> Self {
        Self {
            optimal: alignment,
            large: alignment,
            large_from: u64::MAX,
            depth_stencil: None,
            linear: alignment,
        }
    }

    /// Optimal images aligned to `optimal`, linear ones to `linear`.
    pub const fn tiled(optimal: u64, linear: u64) -> Self {
        Self {
            optimal,
            large: optimal,
            large_from: u64::MAX,
            depth_stencil: None,
            linear,
        }
    }

    /// The same alignments with optimal images of at least `from` bytes
    /// aligned to `large`.
    pub const fn large(mut self, large: u64, from: u64) -> Self {
        self.large = large;
        self.large_from = from;
        self
    }

    /// The same alignments with optimal depth/stencil images aligned to
    /// `alignment` at any size.
    pub const fn depth_stencil(mut self, alignment: u64) -> Self {
        self.depth_stencil = Some(alignment);
        self
    }

    /// The alignment of an image of `size` bytes (the driver's size),
    /// linear or not, of a depth/stencil format or not.
    pub fn of(&self, size: u64, linear: bool, depth_stencil: bool) -> u64 {
        if linear {
            self.linear
        } else if let (Some(alignment), true) = (self.depth_stencil, depth_stencil) {
            alignment
        } else if size >= self.large_from {
            self.large.max(self.optimal)
        } else {
            self.optimal
        }
    }
}

const DEVICE_LOCAL: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
const HOST_VISIBLE: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_VISIBLE;
const HOST_COHERENT: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_COHERENT;
const HOST_CACHED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_CACHED;
const LAZILY_ALLOCATED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
const HEAP_DEVICE_LOCAL: vk::MemoryHeapFlags = vk::MemoryHeapFlags::DEVICE_LOCAL;

/// The union of property flags, usable in constants (ash's `|` is not `const`).
const fn all(flags: &[vk::MemoryPropertyFlags]) -> vk::MemoryPropertyFlags {
    let mut bits = 0;
    let mut i = 0;
    while i < flags.len() {
        bits |= flags[i].as_raw();
        i += 1;
    }
    vk::MemoryPropertyFlags::from_raw(bits)
}

/// Checked at compile time: every profile fits Vulkan's fixed-size arrays,
/// points its types at existing heaps, follows the specification's rules for
/// memory types ([`valid_memory_types`]) and uses power-of-two limits.
const _VALID_PROFILES: () = {
    let mut p = 0;
    while p < ALL.len() {
        let profile = ALL[p];
        assert!(profile.heaps.len() <= vk::MAX_MEMORY_HEAPS);
        assert!(profile.types.len() <= vk::MAX_MEMORY_TYPES);
        let mut t = 0;
        while t < profile.types.len() {
            assert!((profile.types[t].heap as usize) < profile.heaps.len());
            t += 1;
        }
        if let Err(rule) = valid_memory_types(profile.heaps, profile.types) {
            panic!("{}", rule);
        }
        assert!(profile.buffer_image_granularity.is_power_of_two());
        assert!(profile.non_coherent_atom_size.is_power_of_two());
        assert!(profile.min_buffer_alignment.is_power_of_two());
        let images = profile.image_alignment;
        assert!(images.optimal.is_power_of_two());
        assert!(images.large.is_power_of_two() && images.large >= images.optimal);
        assert!(images.linear.is_power_of_two());
        if let Some(depth_stencil) = images.depth_stencil {
            assert!(depth_stencil.is_power_of_two());
        }
        p += 1;
    }
};

/// The specification's rules for `VkPhysicalDeviceMemoryProperties` that a
/// profile's heaps and types could break (chapter "Device Memory"), or the
/// first one broken. `types` point at existing heaps (checked before).
///
/// - A type is `DEVICE_LOCAL` if and only if its heap is
///   (`VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT`'s description).
/// - Its flags are one of the combinations the specification lists: host
///   visible with coherent and/or cached, never coherent or cached without
///   host visible; lazily allocated or protected never host-visible (nor
///   lazily allocated without device-local); AMD's device-uncached only with
///   device-coherent.
/// - Order: a type whose flags are a strict subset of another's, or that
///   lacks AMD's device-coherent or device-uncached bits another has, comes
///   first.
/// - Some type is host-visible and host-coherent, and some is device-local.
// Used by `_VALID_PROFILES`, which the dead-code lint does not count.
#[allow(dead_code)]
const fn valid_memory_types(heaps: &[FakeHeap], types: &[FakeType]) -> Result<(), &'static str> {
    const fn has(flags: u32, bit: vk::MemoryPropertyFlags) -> bool {
        flags & bit.as_raw() != 0
    }
    let amd = vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD.as_raw()
        | vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD.as_raw();
    let host_access = HOST_VISIBLE.as_raw() | HOST_COHERENT.as_raw() | HOST_CACHED.as_raw();
    let device_only = LAZILY_ALLOCATED.as_raw() | vk::MemoryPropertyFlags::PROTECTED.as_raw();
    let mut host_coherent = false;
    let mut device_local = false;
    let mut x = 0;
    while x < types.len() {
        let flags = types[x].flags.as_raw();
        let heap_flags = heaps[types[x].heap as usize].flags.as_raw();
        if has(flags, DEVICE_LOCAL) != (heap_flags & HEAP_DEVICE_LOCAL.as_raw() != 0) {
            return Err("a type is DEVICE_LOCAL if and only if its heap is");
        }
        if has(flags, HOST_VISIBLE) != (has(flags, HOST_COHERENT) || has(flags, HOST_CACHED)) {
            return Err("host-visible types are coherent or cached, and only they");
        }
        if flags & device_only != 0 && flags & host_access != 0 {
            return Err("a lazily allocated or protected type is not host-visible");
        }
        if has(flags, LAZILY_ALLOCATED) && !has(flags, DEVICE_LOCAL) {
            return Err("a lazily allocated type is device-local");
        }
        if has(flags, vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD)
            && !has(flags, vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD)
        {
            return Err("a device-uncached type is device-coherent");
        }
        host_coherent |= has(flags, HOST_VISIBLE) && has(flags, HOST_COHERENT);
        device_local |= has(flags, DEVICE_LOCAL);
        let mut y = 0;
        while y < x {
            // `y` comes before `x`: wrong if `x`'s flags are a strict subset
            // of `y`'s, or `y` has AMD bits `x` lacks.
            let earlier = types[y].flags.as_raw();
            if (flags & earlier == flags && flags != earlier)
                || (earlier & amd != 0 && flags & amd == 0)
            {
                return Err(
                    "types are ordered: subsets of flags first, AMD's device-coherent last",
                );
            }
            y += 1;
        }
        x += 1;
    }
    if !host_coherent {
        return Err("some type is host-visible and host-coherent");
    }
    if !device_local {
        return Err("some type is device-local");
    }
    Ok(())
}

impl Profile {
    /// Looks a profile up by its configuration name.
    pub fn by_name(name: &str) -> Option<&'static Profile> {
        ALL.into_iter().find(|profile| profile.name == name)
    }

    /// The fake `VkPhysicalDeviceMemoryProperties`.
    pub fn memory_properties(&self) -> vk::PhysicalDeviceMemoryProperties {
        let mut properties = vk::PhysicalDeviceMemoryProperties::default();
        for (slot, heap) in properties.memory_heaps.iter_mut().zip(self.heaps) {
            *slot = vk::MemoryHeap {
                size: heap.size,
                flags: heap.flags,
            };
        }
        for (slot, memory_type) in properties.memory_types.iter_mut().zip(self.types) {
            *slot = vk::MemoryType {
                property_flags: memory_type.flags,
                heap_index: memory_type.heap,
            };
        }
        // Both lengths are checked against the array sizes at compile time.
        properties.memory_heap_count = self.heaps.len() as u32;
        properties.memory_type_count = self.types.len() as u32;
        properties
    }
}

#[cfg(test)]
mod tests;
