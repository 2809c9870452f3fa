//! Memory layouts of real kinds of GPU, for the fake device.
//!
//! This file holds [`FakeLayout`] itself and its builder methods, which
//! change one figure of a layout for a test; the presets (the kinds of GPU,
//! with the drivers' figures) are in `layout/presets.rs`, and the drivers'
//! answers to a buffer's or an image's memory requirements
//! ([`BufferRequirements`], [`ImageRequirements`]) in
//! `layout/requirements.rs`.

use ash::vk;
use gpu_alloc_types::{MemoryHeap, MemoryPropertyFlags as Props, MemoryType};

mod presets;
mod requirements;

pub use requirements::{BufferRequirements, ImageRequirements};

/// A device's memory types, heaps and memory limits.
///
/// The presets follow what drivers of each kind of GPU report; the builder
/// methods change one figure for a test (a small heap, a large granularity).
#[derive(Clone, Debug)]
pub struct FakeLayout {
    /// A short name for messages.
    pub name: &'static str,
    /// `VkPhysicalDeviceMemoryProperties::memoryTypes`.
    pub memory_types: Vec<MemoryType>,
    /// `VkPhysicalDeviceMemoryProperties::memoryHeaps`.
    pub memory_heaps: Vec<MemoryHeap>,
    /// `bufferImageGranularity`.
    pub buffer_image_granularity: u64,
    /// `nonCoherentAtomSize`.
    pub non_coherent_atom_size: u64,
    /// `maxMemoryAllocationCount`.
    pub max_memory_allocation_count: u32,
    /// `maxMemoryAllocationSize`.
    pub max_memory_allocation_size: u64,
    /// `VkPhysicalDeviceMaintenance4Properties::maxBufferSize`; creating a
    /// larger buffer is a rule violation (VUID-VkBufferCreateInfo-size-06409).
    /// `u64::MAX` stands for a device that does not say (no Vulkan 1.3 nor
    /// `VK_KHR_maintenance4`): no limit.
    pub max_buffer_size: u64,
    /// Whether `VK_EXT_memory_budget` is reported as enabled.
    pub memory_budget: bool,
    /// Whether buffer device address is reported as enabled.
    pub buffer_device_address: bool,
    /// The types an AMD driver marks `DEVICE_COHERENT_BIT_AMD` (one bit per
    /// type index); allocating from one without
    /// [`amd_device_coherent_memory`](Self::amd_device_coherent_memory) is a
    /// rule violation here, as in Vulkan.
    pub amd_device_coherent_types: u32,
    /// Whether `deviceCoherentMemory` is reported as enabled.
    pub amd_device_coherent_memory: bool,
    /// Whether `protectedMemory` is reported as enabled; allocating from a
    /// memory type with `PROTECTED` without it is a rule violation here, as
    /// in Vulkan. No preset has a protected type.
    pub protected_memory: bool,
    /// The handle types memory may be exported as, reported in
    /// [`MemoryProperties::exportable_handle_types`](crate::device::MemoryProperties::exportable_handle_types);
    /// allocating memory exportable as others is then a rule violation
    /// (VUID-VkExportMemoryAllocateInfo-handleTypes-00656). `None` in every
    /// preset: the device does not tell, as [`AshMemoryDevice`](crate::device::AshMemoryDevice)
    /// does not, and any handle type is taken.
    pub exportable_handle_types: Option<vk::ExternalMemoryHandleTypeFlags>,
    /// How the driver answers a buffer's `VkMemoryRequirements`
    /// (`FakeDevice`'s `create_buffer`): its alignment and size rounding,
    /// by usage where the driver's answer depends on it. See
    /// [`BufferRequirements`] for the drivers' figures and where they come
    /// from.
    pub buffer_requirements: BufferRequirements,
    /// How the driver aligns an image's memory
    /// ([`image_requirements`](Self::image_requirements)): by tiling, and
    /// by size where the driver's tiled layouts grow with the image. See
    /// [`ImageRequirements`] for the drivers' figures and where they come
    /// from.
    pub image_requirements: ImageRequirements,
}

impl FakeLayout {
    /// The same layout with `deviceCoherentMemory` reported as enabled (or
    /// not).
    pub fn with_amd_device_coherent_memory(mut self, enabled: bool) -> Self {
        self.amd_device_coherent_memory = enabled;
        self
    }

    /// The same layout with `protectedMemory` reported as enabled (or not).
    pub fn with_protected_memory(mut self, enabled: bool) -> Self {
        self.protected_memory = enabled;
        self
    }

    /// The same layout reporting that memory may be exported as
    /// `handle_types` only.
    pub fn with_exportable_handle_types(
        mut self,
        handle_types: vk::ExternalMemoryHandleTypeFlags,
    ) -> Self {
        self.exportable_handle_types = Some(handle_types);
        self
    }

    /// The same layout with every heap resized to `bytes`.
    pub fn with_heap_sizes(mut self, bytes: u64) -> Self {
        for heap in &mut self.memory_heaps {
            heap.size = bytes;
        }
        self
    }

    /// The same layout with one heap resized.
    pub fn with_heap_size(mut self, heap: usize, bytes: u64) -> Self {
        if let Some(h) = self.memory_heaps.get_mut(heap) {
            h.size = bytes;
        }
        self
    }

    /// The same layout with another `bufferImageGranularity`.
    pub fn with_granularity(mut self, granularity: u64) -> Self {
        self.buffer_image_granularity = granularity;
        self
    }

    /// The same layout answering buffers' memory requirements with
    /// `requirements` (a test's own alignment or size rounding).
    pub fn with_buffer_requirements(mut self, requirements: BufferRequirements) -> Self {
        self.buffer_requirements = requirements;
        self
    }

    /// The same layout with memory type `index` left out of buffers'
    /// `memoryTypeBits` (as AMDVLK leaves the BAR type out over
    /// Thunderbolt), unless that would leave buffers no type both
    /// host-visible and host-coherent, which Vulkan promises them (of the
    /// types they may still use: others may be left out already), or the
    /// index is past the 32 a mask can name: then unchanged.
    pub fn with_buffer_type_left_out(mut self, index: usize) -> Self {
        let host = Props::HOST_VISIBLE | Props::HOST_COHERENT;
        let allowed = self.buffer_memory_type_bits();
        let keeps_host = (self.memory_types.iter().enumerate().take(32))
            .any(|(i, t)| i != index && allowed & (1 << i) != 0 && t.props.contains(host));
        if keeps_host && index < 32 {
            self.buffer_requirements.memory_type_bits &= !(1 << index);
        }
        self
    }

    /// The same layout answering images' memory requirements with
    /// `requirements` (a test's own alignments).
    pub fn with_image_requirements(mut self, requirements: ImageRequirements) -> Self {
        self.image_requirements = requirements;
        self
    }

    /// What the driver would answer for an image of `size` bytes (its own
    /// size of the image's texels, padding and metadata) of `format` made
    /// with `tiling` ([`ImageRequirements`]): its alignment, `size` rounded up
    /// to it (tiled layouts are made of whole tiles), and every memory type
    /// but lazily allocated ones (those hold transient attachments only)
    /// of the 32 a mask can name. `None` past `u64::MAX`.
    pub fn image_requirements(
        &self,
        size: u64,
        format: vk::Format,
        tiling: vk::ImageTiling,
    ) -> Option<vk::MemoryRequirements> {
        let alignment = self.image_requirements.alignment(size, format, tiling);
        let memory_type_bits = self.non_lazy_types();
        Some(vk::MemoryRequirements {
            size: size.checked_next_multiple_of(alignment)?,
            alignment,
            memory_type_bits,
        })
    }

    /// The memory types a buffer may use (`memoryTypeBits` of its
    /// requirements): those [`BufferRequirements::memory_type_bits`] lets
    /// it, but lazily allocated ones, of the 32 a mask can name (a layout
    /// may list more; Vulkan does not).
    pub fn buffer_memory_type_bits(&self) -> u32 {
        self.non_lazy_types() & self.buffer_requirements.memory_type_bits
    }

    /// The memory types but lazily allocated ones (they hold transient
    /// attachments only), of the 32 a mask can name.
    fn non_lazy_types(&self) -> u32 {
        (self.memory_types.iter().take(32).enumerate())
            .filter(|(_, t)| !t.props.contains(Props::LAZILY_ALLOCATED))
            .fold(0u32, |bits, (i, _)| bits | (1 << i))
    }

    /// The same layout with another `maxMemoryAllocationCount`.
    pub fn with_max_allocation_count(mut self, count: u32) -> Self {
        self.max_memory_allocation_count = count;
        self
    }

    /// The same layout with another `maxBufferSize` (`u64::MAX`: the
    /// device does not say).
    pub fn with_max_buffer_size(mut self, bytes: u64) -> Self {
        self.max_buffer_size = bytes;
        self
    }

    /// The same layout with or without `VK_EXT_memory_budget`.
    pub fn with_memory_budget(mut self, enabled: bool) -> Self {
        self.memory_budget = enabled;
        self
    }
}
