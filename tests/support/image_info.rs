//! The image the tests create: 2D, RGBA8, optimal tiling, one mip, one
//! layer, one sample; only its size and usage vary.

use ash::vk;

/// The format of [`rgba8_image_info`] images.
pub const IMAGE_FORMAT: vk::Format = vk::Format::R8G8B8A8_UNORM;

/// A 2D RGBA8 optimal-tiling image of `width` × `height` with `usage`,
/// starting in `UNDEFINED` layout.
pub fn rgba8_image_info(
    width: u32,
    height: u32,
    usage: vk::ImageUsageFlags,
) -> vk::ImageCreateInfo<'static> {
    vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(IMAGE_FORMAT)
        .extent(vk::Extent3D {
            width,
            height,
            depth: 1,
        })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(usage)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}
