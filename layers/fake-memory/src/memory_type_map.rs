//! How fake memory types stand on the real device's types.
//!
//! Every fake type is backed by one real type: the first real type that has
//! the host-visibility and coherence the fake one promises (so a mapped fake
//! type is really mappable), preferring the one that shares most of its other
//! flags. On lavapipe every fake type lands on its single type.
//!
//! Memory requirements come back from the driver in real type indices; the
//! layer rewrites `memoryTypeBits` to the fake types whose backing real type
//! the driver allowed (and, for optimal images, that the profile lets hold
//! them: a linear image may take any type a buffer may, as on the GPUs the
//! profiles model, whose drivers offer system memory to linear images), and
//! raises `alignment` to the profile's minimum.
//!
//! A lazily allocated fake type (`VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT`)
//! is offered as the spec allows it and no wider: never to a buffer, and to
//! an image only if it was created with
//! `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT` (the `memoryTypeBits` rules of
//! `VkMemoryRequirements`). The validation layer checks every bind against
//! these bits, so an allocator that puts anything else in such a type is
//! reported.

use ash::vk;

use crate::profile::{FakeType, ImageAlignment, Profile};

/// The kind of resource a memory requirement is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// A `VkBuffer`.
    Buffer,
    /// A `VkImage` created without `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`
    /// and not `VK_IMAGE_TILING_LINEAR` (optimal, or a DRM format modifier,
    /// which may name a tiled layout).
    Image,
    /// As [`Image`](Self::Image), created with
    /// `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`: the only resource a lazily
    /// allocated type may hold.
    TransientImage,
    /// A `VkImage` created with `VK_IMAGE_TILING_LINEAR` and without
    /// `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`: any type a buffer may take.
    LinearImage,
    /// A `VkImage` created with `VK_IMAGE_TILING_LINEAR` and
    /// `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`.
    TransientLinearImage,
}

impl ResourceKind {
    /// The kind of an image created with `usage` and `tiling`.
    pub fn of_image(usage: vk::ImageUsageFlags, tiling: vk::ImageTiling) -> Self {
        let transient = usage.contains(vk::ImageUsageFlags::TRANSIENT_ATTACHMENT);
        match (transient, tiling == vk::ImageTiling::LINEAR) {
            (false, false) => ResourceKind::Image,
            (true, false) => ResourceKind::TransientImage,
            (false, true) => ResourceKind::LinearImage,
            (true, true) => ResourceKind::TransientLinearImage,
        }
    }
}

/// Fake-to-real memory type mapping of one physical device.
#[derive(Debug, Clone)]
pub struct MemoryTypeMap {
    profile: &'static Profile,
    /// The alignment of image requirements: the profile's, or the
    /// configuration's `image-alignment` (every image alike).
    image_alignment: ImageAlignment,
    /// Real type backing each fake type; `None` when the device has no type
    /// that can back it (such a type is never offered).
    real_type: Vec<Option<u32>>,
    /// Per fake type: lazily allocated, backed by a real type that is not.
    emulated_lazy: Vec<bool>,
}

impl MemoryTypeMap {
    /// Maps `profile`'s types onto the real device's `real` memory properties.
    pub fn new(profile: &'static Profile, real: &vk::PhysicalDeviceMemoryProperties) -> Self {
        let count = (real.memory_type_count as usize).min(vk::MAX_MEMORY_TYPES);
        let real_types = &real.memory_types[..count];
        let must_match =
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let real_type = profile
            .types
            .iter()
            .map(|fake| {
                let needed = fake.flags & must_match;
                real_types
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| {
                        t.property_flags.contains(needed)
                            && !t
                                .property_flags
                                .contains(vk::MemoryPropertyFlags::PROTECTED)
                    })
                    .max_by_key(|(index, t)| {
                        // Most shared flags first, then the lowest index.
                        let shared = (t.property_flags & fake.flags).as_raw().count_ones();
                        (shared, usize::MAX - index)
                    })
                    .and_then(|(index, _)| u32::try_from(index).ok())
            })
            .collect::<Vec<_>>();
        let lazy = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
        let emulated_lazy = profile
            .types
            .iter()
            .zip(&real_type)
            .map(|(fake, real)| {
                let real_lazy = real
                    .and_then(|real| real_types.get(real as usize))
                    .is_some_and(|t| t.property_flags.contains(lazy));
                fake.flags.contains(lazy) && !real_lazy
            })
            .collect();
        Self {
            profile,
            image_alignment: profile.image_alignment,
            real_type,
            emulated_lazy,
        }
    }

    /// The real type index behind fake type `fake_index`, if it exists.
    pub fn real_type(&self, fake_index: u32) -> Option<u32> {
        self.real_type.get(fake_index as usize).copied().flatten()
    }

    /// Whether fake type `fake_index` is lazily allocated but backed by a
    /// real type that is not: its memory is committed whole from the start.
    pub fn emulates_lazy_allocation(&self, fake_index: u32) -> bool {
        self.emulated_lazy
            .get(fake_index as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Fake `memoryTypeBits` for a resource whose real bits are `real_bits`.
    pub fn fake_type_bits(&self, real_bits: u32, kind: ResourceKind) -> u32 {
        let mut bits = 0;
        for (index, (fake, real)) in self.profile.types.iter().zip(&self.real_type).enumerate() {
            let backed = real.is_some_and(|real| real < 32 && real_bits & (1 << real) != 0);
            let lazy = fake
                .flags
                .contains(vk::MemoryPropertyFlags::LAZILY_ALLOCATED);
            let allowed = match kind {
                ResourceKind::Buffer | ResourceKind::LinearImage => !lazy,
                ResourceKind::Image => fake.images && !lazy,
                ResourceKind::TransientImage => fake.images,
                ResourceKind::TransientLinearImage => true,
            };
            if backed && allowed && index < 32 {
                bits |= 1 << index;
            }
        }
        bits
    }

    /// Fake `memoryTypeBits` for memory imported from a handle or a host
    /// pointer that the driver can import as the real types `real_bits`:
    /// as for a buffer, the types backed by those, none lazily allocated
    /// (imported memory comes with its contents).
    pub fn fake_import_type_bits(&self, real_bits: u32) -> u32 {
        self.fake_type_bits(real_bits, ResourceKind::Buffer)
    }

    /// Fake `memoryTypeBits` for a host pointer that the driver can import
    /// as the real types `real_bits`: of the types an import may take
    /// ([`fake_import_type_bits`](Self::fake_import_type_bits)), the
    /// host-visible ones in system memory (a heap that is not
    /// device-local), or, on a profile with no host-visible type there (a
    /// unified-memory GPU, all of whose heaps are device-local), every
    /// host-visible one. The specification asks for host-visible types
    /// only (`VkMemoryHostPointerPropertiesEXT`: "should", once "must"),
    /// and a host pointer's pages are system memory: RADV offers one
    /// cached system-memory type, never VRAM (ANV offers every type, as
    /// the relaxed wording allows).
    pub fn fake_host_pointer_type_bits(&self, real_bits: u32) -> u32 {
        let types = self.profile.types;
        let host_visible = |t: &FakeType| t.flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
        let in_system_memory = |t: &FakeType| {
            self.profile
                .heaps
                .get(t.heap as usize)
                .is_some_and(|heap| !heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        };
        let has_system_memory = types.iter().any(|t| host_visible(t) && in_system_memory(t));
        let offered = types
            .iter()
            .enumerate()
            .filter(|(_, t)| host_visible(t) && (in_system_memory(t) || !has_system_memory))
            .filter(|&(index, _)| index < 32)
            .fold(0u32, |bits, (index, _)| bits | 1 << index);
        self.fake_import_type_bits(real_bits) & offered
    }

    /// The same map with image requirements aligned to at least
    /// `alignment`'s figures (powers of two) instead of the profile's.
    #[must_use]
    pub fn with_image_alignment(mut self, alignment: ImageAlignment) -> Self {
        self.image_alignment = alignment;
        self
    }

    /// Rewrites driver-reported requirements into the profile's terms;
    /// `depth_stencil`: an image of a depth/stencil format (the profile's
    /// driver may align those apart).
    pub fn patch_requirements(
        &self,
        requirements: &mut vk::MemoryRequirements,
        kind: ResourceKind,
        depth_stencil: bool,
    ) {
        requirements.memory_type_bits = self.fake_type_bits(requirements.memory_type_bits, kind);
        // An image's by the driver's size of it, as the modelled driver's
        // layouts grow with the image (RADV's 64 KiB swizzle blocks).
        let minimum = match kind {
            ResourceKind::Buffer => self.profile.min_buffer_alignment,
            ResourceKind::Image | ResourceKind::TransientImage => {
                self.image_alignment
                    .of(requirements.size, false, depth_stencil)
            }
            ResourceKind::LinearImage | ResourceKind::TransientLinearImage => self
                .image_alignment
                .of(requirements.size, true, depth_stencil),
        };
        requirements.alignment = requirements.alignment.max(minimum);
        if kind == ResourceKind::Buffer {
            let granule = self.profile.buffer_size_granule.max(1);
            requirements.size = requirements.size.next_multiple_of(granule);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{AMD, DISCRETE, MOBILE};

    fn lavapipe_like() -> vk::PhysicalDeviceMemoryProperties {
        let mut properties = vk::PhysicalDeviceMemoryProperties {
            memory_type_count: 1,
            memory_heap_count: 1,
            ..Default::default()
        };
        properties.memory_types[0] = vk::MemoryType {
            property_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL
                | vk::MemoryPropertyFlags::HOST_VISIBLE
                | vk::MemoryPropertyFlags::HOST_COHERENT
                | vk::MemoryPropertyFlags::HOST_CACHED,
            heap_index: 0,
        };
        properties
    }

    #[test]
    fn every_fake_type_lands_on_lavapipes_single_type() {
        let map = MemoryTypeMap::new(&DISCRETE, &lavapipe_like());
        for index in 0..DISCRETE.types.len() as u32 {
            assert_eq!(map.real_type(index), Some(0));
        }
        assert_eq!(map.real_type(DISCRETE.types.len() as u32), None);
    }

    #[test]
    fn images_skip_host_only_types() {
        let map = MemoryTypeMap::new(&DISCRETE, &lavapipe_like());
        assert_eq!(map.fake_type_bits(1, ResourceKind::Buffer), 0b1111);
        assert_eq!(map.fake_type_bits(1, ResourceKind::Image), 0b1001);
        assert_eq!(map.fake_type_bits(0, ResourceKind::Buffer), 0);
    }

    #[test]
    fn alignment_is_raised_never_lowered() {
        let map = MemoryTypeMap::new(&MOBILE, &lavapipe_like());
        let mut requirements = vk::MemoryRequirements {
            size: 100,
            alignment: 16,
            memory_type_bits: 1,
        };
        map.patch_requirements(&mut requirements, ResourceKind::Image, false);
        assert_eq!(requirements.alignment, MOBILE.image_alignment.optimal);
        requirements.alignment = 1 << 20;
        map.patch_requirements(&mut requirements, ResourceKind::Buffer, false);
        assert_eq!(requirements.alignment, 1 << 20);
    }

    /// Optimal images take the profile's alignment for their size (the
    /// driver's size, lavapipe's here): on `amd` RADV's 4 KiB below 32 KiB
    /// and its 64 KiB swizzle blocks from there; linear images RADV's 256;
    /// lavapipe's own larger alignment stays.
    #[test]
    fn image_alignment_follows_the_size_as_the_driver_has_it() {
        let map = MemoryTypeMap::new(&AMD, &lavapipe_like());
        let aligned = |size: u64, alignment: u64, kind| {
            let mut requirements = vk::MemoryRequirements {
                size,
                alignment,
                memory_type_bits: 1,
            };
            map.patch_requirements(&mut requirements, kind, false);
            (requirements.size, requirements.alignment)
        };
        // 64x64 RGBA8, just under and at the threshold, 2048x2048 with mips.
        assert_eq!(aligned(16 << 10, 64, ResourceKind::Image), (16 << 10, 4096));
        assert_eq!(aligned((32 << 10) - 1, 64, ResourceKind::Image).1, 4096);
        assert_eq!(aligned(32 << 10, 64, ResourceKind::Image).1, 64 << 10);
        let mipped = 2048 * 2048 * 4 * 4 / 3;
        assert_eq!(aligned(mipped, 64, ResourceKind::Image), (mipped, 64 << 10));
        assert_eq!(
            aligned(mipped, 64, ResourceKind::TransientImage).1,
            64 << 10
        );
        assert_eq!(aligned(mipped, 64, ResourceKind::LinearImage).1, 256);
        assert_eq!(aligned(1000, 1 << 20, ResourceKind::LinearImage).1, 1 << 20);
        // Depth/stencil images take RADV's 64 KiB Z blocks at any size.
        let mut depth = vk::MemoryRequirements {
            size: 16 << 10,
            alignment: 64,
            memory_type_bits: 1,
        };
        map.patch_requirements(&mut depth, ResourceKind::Image, true);
        assert_eq!(depth.alignment, 64 << 10);
        // The override aligns every image alike.
        let map = map.with_image_alignment(ImageAlignment::flat(512));
        let mut requirements = vk::MemoryRequirements {
            size: mipped,
            alignment: 64,
            memory_type_bits: 1,
        };
        map.patch_requirements(&mut requirements, ResourceKind::Image, false);
        assert_eq!(requirements.alignment, 512);
    }

    #[test]
    fn buffer_sizes_are_rounded_like_a_real_driver() {
        let map = MemoryTypeMap::new(&DISCRETE, &lavapipe_like());
        let mut requirements = vk::MemoryRequirements {
            size: 1000,
            alignment: 64,
            memory_type_bits: 1,
        };
        map.patch_requirements(&mut requirements, ResourceKind::Buffer, false);
        assert_eq!(requirements.size, 1008);
        let mut image = vk::MemoryRequirements {
            size: 1000,
            alignment: 64,
            memory_type_bits: 1,
        };
        map.patch_requirements(&mut image, ResourceKind::Image, false);
        assert_eq!(image.size, 1000, "image sizes are the driver's");
    }

    #[test]
    fn a_type_without_a_host_visible_backing_is_never_offered() {
        let mut device_local_only = lavapipe_like();
        device_local_only.memory_types[0].property_flags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        let map = MemoryTypeMap::new(&DISCRETE, &device_local_only);
        assert_eq!(map.real_type(1), None);
        assert_eq!(map.fake_type_bits(1, ResourceKind::Buffer), 0b0001);
    }

    /// The mobile profile's types plus a lazily allocated one (index 3) and
    /// one that holds buffers only (index 4).
    const WITH_LAZY: Profile = Profile {
        name: "with-lazy",
        types: &[
            MOBILE.types[0],
            MOBILE.types[1],
            MOBILE.types[2],
            FakeType {
                flags: vk::MemoryPropertyFlags::from_raw(
                    vk::MemoryPropertyFlags::DEVICE_LOCAL.as_raw()
                        | vk::MemoryPropertyFlags::LAZILY_ALLOCATED.as_raw(),
                ),
                heap: 0,
                images: true,
            },
            FakeType {
                flags: vk::MemoryPropertyFlags::HOST_VISIBLE,
                heap: 0,
                images: false,
            },
        ],
        ..MOBILE
    };

    #[test]
    fn lazily_allocated_types_hold_transient_images_only() {
        let map = MemoryTypeMap::new(&WITH_LAZY, &lavapipe_like());
        assert_eq!(map.fake_type_bits(1, ResourceKind::Buffer), 0b10111);
        assert_eq!(map.fake_type_bits(1, ResourceKind::Image), 0b00111);
        assert_eq!(map.fake_type_bits(1, ResourceKind::TransientImage), 0b01111);
        assert_eq!(map.fake_type_bits(0, ResourceKind::TransientImage), 0);
    }

    #[test]
    fn mobile_offers_its_lazily_allocated_type_to_transient_images_only() {
        let map = MemoryTypeMap::new(&MOBILE, &lavapipe_like());
        assert_eq!(map.real_type(3), Some(0));
        assert_eq!(map.fake_type_bits(1, ResourceKind::Buffer), 0b0111);
        assert_eq!(map.fake_type_bits(1, ResourceKind::Image), 0b0111);
        assert_eq!(map.fake_type_bits(1, ResourceKind::TransientImage), 0b1111);
    }

    /// An import (a handle's or a host pointer's memory) may take the types
    /// backed by the real ones the driver names, in fake indices, but never
    /// a lazily allocated one.
    #[test]
    fn imports_get_fake_indices_and_no_lazily_allocated_type() {
        let map = MemoryTypeMap::new(&MOBILE, &lavapipe_like());
        assert_eq!(map.fake_import_type_bits(1), 0b0111);
        assert_eq!(map.fake_import_type_bits(0), 0);
        let map = MemoryTypeMap::new(&DISCRETE, &lavapipe_like());
        assert_eq!(map.fake_import_type_bits(1), 0b1111);
    }

    /// A host pointer may be imported only as a host-visible type in system
    /// memory (a heap that is not device-local), or, on a profile without
    /// one, as any host-visible type, and only where the driver allows the
    /// backing type: never device-only memory, a lazily allocated type or
    /// a BAR window.
    #[test]
    fn host_pointers_take_host_visible_system_memory_types_only() {
        use crate::profile::{AMD, ARC, INTEGRATED, MALI, REBAR};
        let lavapipe = lavapipe_like();
        let bits = |profile: &'static Profile| {
            MemoryTypeMap::new(profile, &lavapipe).fake_host_pointer_type_bits(1)
        };
        assert_eq!(bits(&DISCRETE), 0b0110, "system memory, not the BAR");
        assert_eq!(bits(&AMD), 0b1010_1010);
        assert_eq!(bits(&REBAR), 0b0110, "not device-local host-visible VRAM");
        assert_eq!(bits(&ARC), 0b010);
        assert_eq!(
            bits(&INTEGRATED),
            0b110,
            "unified memory: every mappable type"
        );
        assert_eq!(bits(&MOBILE), 0b0110, "not the lazily allocated type");
        assert_eq!(bits(&MALI), 0b011);
        assert_eq!(bits(&WITH_LAZY), 0b10110);
        let map = MemoryTypeMap::new(&DISCRETE, &lavapipe);
        assert_eq!(
            map.fake_host_pointer_type_bits(0),
            0,
            "nothing the driver refused"
        );
    }

    #[test]
    fn a_lazy_type_is_emulated_unless_its_real_type_is_lazy_too() {
        let map = MemoryTypeMap::new(&MOBILE, &lavapipe_like());
        let emulated: Vec<bool> = (0..5).map(|i| map.emulates_lazy_allocation(i)).collect();
        assert_eq!(emulated, [false, false, false, true, false]);

        // A real tile-based GPU: its own lazily allocated type backs the
        // fake one, whose commitment the driver then reports.
        let mut tiler = lavapipe_like();
        tiler.memory_type_count = 2;
        tiler.memory_types[1] = vk::MemoryType {
            property_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL
                | vk::MemoryPropertyFlags::LAZILY_ALLOCATED,
            heap_index: 0,
        };
        let map = MemoryTypeMap::new(&MOBILE, &tiler);
        assert_eq!(map.real_type(3), Some(1));
        assert!(!map.emulates_lazy_allocation(3));
    }

    #[test]
    fn transient_images_are_aligned_as_images() {
        let map = MemoryTypeMap::new(&WITH_LAZY, &lavapipe_like())
            .with_image_alignment(ImageAlignment::flat(256));
        let mut requirements = vk::MemoryRequirements {
            size: 100,
            alignment: 16,
            memory_type_bits: 1,
        };
        map.patch_requirements(&mut requirements, ResourceKind::TransientImage, false);
        assert_eq!((requirements.size, requirements.alignment), (100, 256));
    }

    #[test]
    fn image_kind_follows_the_transient_attachment_bit_and_the_tiling() {
        let transient =
            vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSIENT_ATTACHMENT;
        let plain = vk::ImageUsageFlags::COLOR_ATTACHMENT;
        let (optimal, linear) = (vk::ImageTiling::OPTIMAL, vk::ImageTiling::LINEAR);
        let modifier = vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT;
        assert_eq!(
            ResourceKind::of_image(transient, optimal),
            ResourceKind::TransientImage
        );
        assert_eq!(ResourceKind::of_image(plain, optimal), ResourceKind::Image);
        assert_eq!(ResourceKind::of_image(plain, modifier), ResourceKind::Image);
        assert_eq!(
            ResourceKind::of_image(plain, linear),
            ResourceKind::LinearImage
        );
        assert_eq!(
            ResourceKind::of_image(transient, linear),
            ResourceKind::TransientLinearImage
        );
    }

    /// A linear image may take the host types that hold no optimal images,
    /// as a buffer may; lazily allocated types only if it is transient.
    #[test]
    fn linear_images_take_what_buffers_take() {
        let map = MemoryTypeMap::new(&DISCRETE, &lavapipe_like());
        assert_eq!(map.fake_type_bits(1, ResourceKind::Image), 0b1001);
        assert_eq!(map.fake_type_bits(1, ResourceKind::LinearImage), 0b1111);
        let map = MemoryTypeMap::new(&WITH_LAZY, &lavapipe_like());
        assert_eq!(map.fake_type_bits(1, ResourceKind::LinearImage), 0b10111);
        assert_eq!(
            map.fake_type_bits(1, ResourceKind::TransientLinearImage),
            0b11111
        );
        let mut requirements = vk::MemoryRequirements {
            size: 1000,
            alignment: 16,
            memory_type_bits: 1,
        };
        map.patch_requirements(&mut requirements, ResourceKind::LinearImage, false);
        assert_eq!(
            (requirements.size, requirements.alignment),
            (1000, MOBILE.image_alignment.linear),
            "aligned as an image, its size the driver's"
        );
    }
}
