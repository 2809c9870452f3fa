//! How a resource will be used, in the words an engine developer uses.
//!
//! A Vulkan device offers memory types that differ by property flags
//! (`DEVICE_LOCAL`, `HOST_VISIBLE`, `HOST_COHERENT`, `HOST_CACHED`,
//! `LAZILY_ALLOCATED`), and which one suits a resource depends on who
//! touches its bytes. [`Usage`] says that (only the GPU, the host writing,
//! the host reading, a transient attachment); the ranking of memory types
//! (`memory_type_choice.rs`) turns it into flags a type must have, should
//! have and should not have.
//!
//! [`ResourceKind`] says what is bound to the memory, for
//! `bufferImageGranularity`: Vulkan forbids a linear resource (a buffer, a
//! linear-tiling image) and an optimal-tiling image from sharing a page of
//! that many bytes in one `VkDeviceMemory`, so the allocator must know
//! which of the two each allocation holds, or treat it as either.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use ash::vk;

/// What the memory is for. Combine with `|`.
///
/// | usage | typical resource | memory chosen first |
/// |---|---|---|
/// | [`DEVICE_LOCAL`](Self::DEVICE_LOCAL) | textures, vertex buffers, render targets | device-local, not host-visible |
/// | [`UPLOAD`](Self::UPLOAD) | staging buffers | host-visible coherent, outside VRAM |
/// | `UPLOAD \| DEVICE_LOCAL` | per-frame uniforms, dynamic vertices | device-local host-visible (integrated, ReBAR, the BAR), else host-visible |
/// | [`READBACK`](Self::READBACK) | query results, screenshots | host-visible *cached* |
/// | [`TRANSIENT`](Self::TRANSIENT) | transient attachments | lazily allocated, device-local |
/// | `UPLOAD \| `[`ALLOW_TRANSFER_INSTEAD`](Self::ALLOW_TRANSFER_INSTEAD) | vertex, index and storage buffers written once or now and then | device-local host-visible (integrated, ReBAR, the BAR), else device-local *unmapped*: upload through a staging buffer |
/// | `DEVICE_LOCAL \| `[`PREFER_HOST`](Self::PREFER_HOST) | data the GPU reads rarely; a copy parked out of VRAM | system memory, else device-local |
///
/// [`DEVICE_ADDRESS`](Self::DEVICE_ADDRESS) adds that the buffer's device
/// address will be taken (`vkGetBufferDeviceAddress`); it needs buffer device
/// address enabled on the device and
/// [`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address)
/// set, else a request with it fails with
/// [`Error::DeviceAddressNotEnabled`](crate::Error::DeviceAddressNotEnabled).
/// It restricts no memory type.
///
/// For a property the code relies on that no usage says (coherent memory
/// where it never flushes, cached memory for staging it also reads), add
/// it to the request's description:
/// [`AllocationDesc::required_flags`](crate::AllocationDesc::required_flags)
/// and [`preferred_flags`](crate::AllocationDesc::preferred_flags) narrow
/// and reorder the types the usage ranks.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Usage(u32);

impl Usage {
    /// Only the GPU touches it.
    ///
    /// Where the memory type it takes is host-visible too (integrated
    /// GPUs, lavapipe), the allocation is mapped all the same, as all
    /// host-visible memory is, and
    /// [`Allocator::mapped_slice_mut`](crate::Allocator::mapped_slice_mut)
    /// works: code tried on such a device that writes a `DEVICE_LOCAL`
    /// allocation through its mapping fails on a discrete GPU with
    /// [`Error::NotHostVisible`](crate::Error::NotHostVisible). Memory the
    /// host writes asks for [`UPLOAD`](Self::UPLOAD) (or `UPLOAD |
    /// ALLOW_TRANSFER_INSTEAD`, checking `mapped_ptr`).
    /// [`Config::strict_host_access`](crate::Config::strict_host_access)
    /// withholds the mapping on every device, so that tests catch such
    /// code.
    pub const DEVICE_LOCAL: Self = Self(1);
    /// The host writes it (sequentially), the GPU reads it.
    pub const UPLOAD: Self = Self(1 << 1);
    /// The GPU writes it, the host reads it.
    pub const READBACK: Self = Self(1 << 2);
    /// Transient attachment: may never need real memory on tilers. Lazily
    /// allocated memory, where the device has it, is always dedicated.
    pub const TRANSIENT: Self = Self(1 << 3);
    /// A buffer whose device address is taken.
    pub const DEVICE_ADDRESS: Self = Self(1 << 4);
    /// With [`UPLOAD`](Self::UPLOAD): the host would write the memory
    /// directly, but may copy through a staging buffer and a transfer
    /// instead (VMA's `HOST_ACCESS_ALLOW_TRANSFER_INSTEAD`). Host-visible
    /// memory is then preferred, not required, and device-local memory comes
    /// first: device-local host-visible memory (an integrated GPU, ReBAR, a
    /// discrete GPU's BAR while it has room; coherent before non-coherent,
    /// whose writes need a flush), else device-local memory that is not
    /// mapped. Check [`Allocation::mapped_ptr`](crate::Allocation::mapped_ptr):
    /// `None` means "upload with a transfer". For buffers: the host cannot
    /// write an optimal-tiling image through a mapping, so a texture takes a
    /// transfer anyway, and `DEVICE_LOCAL` alone keeps it out of the BAR
    /// (while VRAM has room and budget: then the BAR is GPU-only data's
    /// next choice, before system memory).
    ///
    /// ```
    /// use vk_suballoc::Usage;
    /// let vertices = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    /// assert!(!vertices.needs_host_access());
    /// ```
    ///
    /// Without `UPLOAD`, and with [`READBACK`](Self::READBACK) (host reads
    /// need host-visible memory), it changes nothing.
    pub const ALLOW_TRANSFER_INSTEAD: Self = Self(1 << 5);
    /// System memory rather than VRAM (VMA's `AUTO_PREFER_HOST`): for data
    /// the GPU reads rarely or not at all, such as a copy parked out of
    /// VRAM while VRAM is short, or a large buffer touched once a frame
    /// whose VRAM is better spent on textures. Device-local memory comes
    /// last then, not first (on an integrated or mobile GPU, whose memory
    /// is all device-local, it changes little).
    ///
    /// - GPU only ([`DEVICE_LOCAL`](Self::DEVICE_LOCAL), or no other
    ///   flag): the types outside VRAM first, uncached before cached;
    ///   device-local memory when those are refused (their heap full or
    ///   over budget).
    /// - With [`UPLOAD`](Self::UPLOAD), also with `DEVICE_LOCAL`: as
    ///   `UPLOAD` alone, staging memory outside VRAM, not the BAR.
    /// - With `UPLOAD | ALLOW_TRANSFER_INSTEAD`: host-visible memory first,
    ///   as `UPLOAD` ranks it (outside VRAM, then the BAR), then memory the
    ///   host cannot map, outside VRAM first (check
    ///   [`Allocation::mapped_ptr`](crate::Allocation::mapped_ptr)).
    /// - With [`READBACK`](Self::READBACK) or
    ///   [`TRANSIENT`](Self::TRANSIENT): no change (cached host memory and
    ///   lazily allocated memory are what those ask for).
    ///
    /// ```
    /// use vk_suballoc::Usage;
    /// let parked = Usage::DEVICE_LOCAL | Usage::PREFER_HOST;
    /// assert!(!parked.needs_host_access());
    /// ```
    pub const PREFER_HOST: Self = Self(1 << 6);

    const NAMES: [(Self, &'static str); 7] = [
        (Self::DEVICE_LOCAL, "DEVICE_LOCAL"),
        (Self::UPLOAD, "UPLOAD"),
        (Self::READBACK, "READBACK"),
        (Self::TRANSIENT, "TRANSIENT"),
        (Self::DEVICE_ADDRESS, "DEVICE_ADDRESS"),
        (Self::ALLOW_TRANSFER_INSTEAD, "ALLOW_TRANSFER_INSTEAD"),
        (Self::PREFER_HOST, "PREFER_HOST"),
    ];

    /// Both sets of flags; `a | b` in `const` context.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags' bits: the index of the memory type rankings
    /// (`memory_type_choice.rs`, `RankTable`).
    pub(crate) const fn bits(self) -> u32 {
        self.0
    }

    /// The usage of `bits` ([`bits`](Self::bits)), for the ranking
    /// table's construction.
    pub(crate) const fn from_bits(bits: u32) -> Self {
        Self(bits)
    }

    /// Whether the memory must be host-visible: the host reads it, or writes
    /// it without [`ALLOW_TRANSFER_INSTEAD`](Self::ALLOW_TRANSFER_INSTEAD).
    pub const fn needs_host_access(self) -> bool {
        self.contains(Self::READBACK)
            || (self.contains(Self::UPLOAD) && !self.contains(Self::ALLOW_TRANSFER_INSTEAD))
    }
}

impl BitOr for Usage {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitOrAssign for Usage {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("(none)")?;
        }
        Ok(())
    }
}

/// The kind of resource bound to the memory, for `bufferImageGranularity`.
///
/// Vulkan forbids a linear resource (buffer, linear-tiling image) and an
/// optimal-tiling image from sharing a "page" of `bufferImageGranularity`
/// bytes in one `VkDeviceMemory` (Vulkan spec, "Buffer-Image Granularity").
/// The allocator gives optimal images whole pages (or, for a granularity above
/// [`Config::max_padded_granularity`](crate::Config::max_padded_granularity)
/// or not a power of two, blocks of their own), so they never do.
///
/// The default is [`Unknown`](Self::Unknown), which is safe for any
/// resource and costs memory: say the kind whenever you know it (the
/// create-and-bind helpers do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ResourceKind {
    /// A resource the request does not describe (VMA's
    /// `VMA_SUBALLOCATION_TYPE_UNKNOWN`): it may be linear or optimal, so
    /// it shares a page with no other allocation. It takes whole
    /// `bufferImageGranularity` pages (start and size rounded to the
    /// page), however large the page; on a device whose granularity is
    /// not a power of two (none known) it takes dedicated memory. It never
    /// takes a small-buffer run's slot. The default, so that a request
    /// built with `..Default::default()` is never placed wrongly.
    #[default]
    Unknown,
    /// A `VkBuffer`.
    Buffer,
    /// A `VkImage` with `VK_IMAGE_TILING_LINEAR`.
    LinearImage,
    /// A `VkImage` with `VK_IMAGE_TILING_OPTIMAL`. (An image with a DRM
    /// format modifier is linear or not by its modifier:
    /// [`of_image`](Self::of_image) takes it as unknown.)
    OptimalImage,
}

impl ResourceKind {
    /// Whether the resource is known to be linear in the granularity
    /// sense: a buffer or a linear image. `false` for an optimal image and
    /// for [`Unknown`](Self::Unknown).
    pub const fn is_linear(self) -> bool {
        matches!(self, Self::Buffer | Self::LinearImage)
    }

    /// Whether two resources of these kinds may share a
    /// `bufferImageGranularity` page: when both are known and both linear
    /// or both optimal.
    pub const fn may_share_page_with(self, other: Self) -> bool {
        match (self, other) {
            (Self::Unknown, _) | (_, Self::Unknown) => false,
            _ => self.is_linear() == other.is_linear(),
        }
    }

    /// The kind of an image created with `tiling`, as the create-and-bind
    /// helpers take it: [`LinearImage`](Self::LinearImage) for `LINEAR`,
    /// [`OptimalImage`](Self::OptimalImage) for `OPTIMAL`, and
    /// [`Unknown`](Self::Unknown) for any other tiling. An image with
    /// `DRM_FORMAT_MODIFIER_EXT` tiling is a linear resource when its
    /// modifier is `DRM_FORMAT_MOD_LINEAR` and a non-linear one otherwise
    /// (the Vulkan glossary's "Linear Resource"), and the driver may pick
    /// the modifier from a list at creation: taken as optimal, a linear
    /// one could share a granularity page with an optimal image.
    pub const fn of_image(tiling: vk::ImageTiling) -> Self {
        match tiling {
            vk::ImageTiling::LINEAR => Self::LinearImage,
            vk::ImageTiling::OPTIMAL => Self::OptimalImage,
            _ => Self::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_print() {
        let usage = Usage::UPLOAD | Usage::DEVICE_LOCAL;
        assert!(usage.contains(Usage::UPLOAD));
        assert!(!usage.contains(Usage::READBACK));
        assert!(usage.needs_host_access());
        assert_eq!(format!("{usage:?}"), "DEVICE_LOCAL | UPLOAD");
        let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
        assert!(!optional.needs_host_access());
        assert!((optional | Usage::READBACK).needs_host_access());
        assert!(!(Usage::DEVICE_LOCAL | Usage::ALLOW_TRANSFER_INSTEAD).needs_host_access());
        assert_eq!(format!("{optional:?}"), "UPLOAD | ALLOW_TRANSFER_INSTEAD");
        assert_eq!(format!("{:?}", Usage::default()), "(none)");
    }

    /// `|`, `|=` and `union` add flags, and a flag given twice stays set.
    #[test]
    fn flags_set_twice_stay_set() {
        let both = Usage::UPLOAD | Usage::DEVICE_LOCAL;
        assert_eq!(Usage::UPLOAD.union(Usage::DEVICE_LOCAL), both);
        assert_eq!(Usage::UPLOAD.union(Usage::UPLOAD), Usage::UPLOAD);
        assert_eq!(Usage::UPLOAD | Usage::UPLOAD, Usage::UPLOAD);
        assert_eq!(both | Usage::UPLOAD, both);
        let mut usage = Usage::UPLOAD;
        usage |= Usage::DEVICE_LOCAL;
        assert_eq!(usage, both);
        usage |= Usage::UPLOAD;
        assert_eq!(usage, both);
    }

    /// Buffers and linear images are linear; optimal images are not, nor is
    /// an unknown kind. Two kinds share a page when both are known and of
    /// one side; an unknown kind shares with none, itself included.
    #[test]
    fn kinds_share_pages_by_linearity() {
        use ResourceKind::{Buffer, LinearImage, OptimalImage, Unknown};
        let kinds = [Unknown, Buffer, LinearImage, OptimalImage];
        let linear: Vec<bool> = kinds.iter().map(|kind| kind.is_linear()).collect();
        assert_eq!(linear, [false, true, true, false]);
        for a in kinds {
            for b in kinds {
                let expected =
                    a != Unknown && b != Unknown && ((a == OptimalImage) == (b == OptimalImage));
                assert_eq!(a.may_share_page_with(b), expected, "{a:?} with {b:?}");
            }
        }
    }

    /// An image's kind follows its tiling; one whose layout the tiling
    /// leaves open (a DRM format modifier, linear or not, which the
    /// driver may pick from a list) is unknown, so that it shares no
    /// `bufferImageGranularity` page with either kind.
    #[test]
    fn image_kinds_follow_the_tiling() {
        use vk::ImageTiling as T;
        assert_eq!(ResourceKind::of_image(T::LINEAR), ResourceKind::LinearImage);
        assert_eq!(
            ResourceKind::of_image(T::OPTIMAL),
            ResourceKind::OptimalImage
        );
        assert_eq!(
            ResourceKind::of_image(T::DRM_FORMAT_MODIFIER_EXT),
            ResourceKind::Unknown
        );
        assert_eq!(
            ResourceKind::of_image(T::from_raw(7)),
            ResourceKind::Unknown
        );
    }
}
