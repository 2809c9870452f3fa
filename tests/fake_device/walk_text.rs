//! What the differential walks share: each runs two allocators over two
//! identical fake devices and compares what they report as text
//! (`mut_parity`, `allocation_paths::entry_points`), so the text is cut to
//! what both devices agree on, and their requests draw from the same
//! usages and resource kinds.

use ash::vk::{self, Handle};
use vk_suballoc::{ResourceKind, Usage};

/// The usages a walk's requests draw from.
pub const USAGES: [Usage; 6] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
    Usage::READBACK,
    Usage::TRANSIENT,
    Usage::DEVICE_ADDRESS,
];

/// The resource kinds a walk's requests draw from.
pub const KINDS: [ResourceKind; 4] = [
    ResourceKind::Buffer,
    ResourceKind::LinearImage,
    ResourceKind::OptimalImage,
    ResourceKind::Unknown,
];

/// A memory handle without its device's range (each fake device hands out
/// handles from a range of its own).
pub fn low(memory: vk::DeviceMemory) -> u64 {
    memory.as_raw() & 0xFFFF_FFFF
}

/// `text` with every hexadecimal number (`0x...`) cut to its low 32 bits,
/// as [`low`].
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let digits = rest[at + 2..]
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(rest.len() - at - 2);
        let hex = &rest[at + 2..at + 2 + digits];
        match u128::from_str_radix(hex, 16) {
            Ok(value) if !hex.is_empty() => out.push_str(&format!("0x{:x}", value & 0xFFFF_FFFF)),
            _ => out.push_str(&rest[at..at + 2 + digits]),
        }
        rest = &rest[at + 2 + digits..];
    }
    out.push_str(rest);
    out
}
