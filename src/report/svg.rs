//! The memory map as an SVG picture: open it in a browser.
//!
//! One row per block and per dedicated allocation, grouped by memory type:
//! the default pool's first, then each custom pool's under a heading that
//! names the pool.
//! Each row spans the full width whatever the block's size (its label gives
//! the size), so fragmentation is visible in small blocks as in large ones.
//! Free space is the light grey background; allocations are rectangles
//! coloured by kind with GpuMemDumpVis's palette, and hovering one shows its
//! name, kind, size and offset (an SVG `<title>`). An allocation narrower than
//! a pixel is drawn one pixel wide, so none disappears; zoom in for detail.

use std::fmt::Write;

use super::memory_map::{
    BlockMap, DedicatedMap, MemoryMap, MemoryTypeMap, PoolMap, RangeKind, RangeMap,
};

const WIDTH: f64 = 1200.0;
const MARGIN: f64 = 8.0;
const ROW: f64 = 24.0;
const LABEL: f64 = 16.0;
const GAP: f64 = 8.0;
const FREE_FILL: &str = "#dcdcdc";

/// Fill colour and CSS class of each kind (GpuMemDumpVis's colours for
/// allocations whose usage flags are unknown).
const fn style(kind: RangeKind) -> (&'static str, &'static str) {
    match kind {
        RangeKind::Free => (FREE_FILL, "free"),
        RangeKind::Unknown => ("#afafaf", "unknown"),
        RangeKind::Buffer => ("#ffffa5", "buffer"),
        RangeKind::ImageUnknown => ("#00ffa4", "image-unknown"),
        RangeKind::ImageLinear => ("#00ff00", "image-linear"),
        RangeKind::ImageOptimal => ("#b7ffff", "image-optimal"),
    }
}

impl MemoryMap {
    /// The map as an SVG document (see the [`report`](crate::report) module
    /// docs for what it shows). Every allocation is one `<rect>` of class
    /// `alloc`, with a `<title>` naming it.
    ///
    /// # Time complexity
    /// O(blocks + allocations).
    pub fn to_svg(&self) -> String {
        let mut body = String::new();
        let mut y = MARGIN;
        y = legend(&mut body, y);
        let mut empty = true;
        for memory_type in &self.memory_types {
            let pools_empty = memory_type.custom_pools.iter().all(pool_is_empty);
            if memory_type.blocks.is_empty() && memory_type.dedicated.is_empty() && pools_empty {
                continue;
            }
            empty = false;
            y = memory_type_rows(&mut body, memory_type, y);
        }
        if empty {
            y += LABEL;
            text(&mut body, MARGIN, y, "No device memory is held.");
        }
        let height = y + MARGIN;
        let mut svg = String::with_capacity(body.len() + 512);
        let _ = write!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
             viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n\
             <title>vk-suballoc memory map</title>\n\
             <rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
        );
        svg.push_str(&body);
        svg.push_str("</svg>\n");
        svg
    }
}

fn legend(out: &mut String, mut y: f64) -> f64 {
    let kinds = [
        RangeKind::Buffer,
        RangeKind::ImageOptimal,
        RangeKind::ImageLinear,
        RangeKind::ImageUnknown,
        RangeKind::Unknown,
        RangeKind::Free,
    ];
    out.push_str("<g class=\"legend\">\n");
    let mut x = MARGIN;
    for kind in kinds {
        let (fill, class) = style(kind);
        let _ = writeln!(
            out,
            "<rect class=\"legend {class}\" x=\"{x}\" y=\"{y}\" width=\"12\" height=\"12\" fill=\"{fill}\" stroke=\"#9b9b9b\"/>"
        );
        text(out, x + 16.0, y + 10.0, kind.vma_name());
        x += 130.0;
    }
    out.push_str("</g>\n");
    y += 12.0 + GAP;
    y
}

fn memory_type_rows(out: &mut String, memory_type: &MemoryTypeMap, mut y: f64) -> f64 {
    let stats = memory_type.detailed_stats();
    y += LABEL;
    let mut flags = memory_type.flag_names().collect::<Vec<_>>().join(" | ");
    if flags.is_empty() {
        flags.push_str("no flags");
    }
    let heading = format!(
        "Memory type {} ({flags}), heap {}: {} in {}, {} of {}",
        memory_type.memory_type,
        memory_type.heap,
        bytes(stats.block_bytes),
        count(stats.block_count, "memory object"),
        count(stats.allocation_count, "allocation"),
        bytes(stats.allocation_bytes),
    );
    bold_text(out, MARGIN, y, &heading);
    y += GAP;
    let memory_type_index = memory_type.memory_type;
    for block in &memory_type.blocks {
        y = block_row(out, memory_type_index, None, block, y);
    }
    for (index, dedicated) in memory_type.dedicated.iter().enumerate() {
        y = dedicated_row(out, memory_type_index, None, index, dedicated, y);
    }
    for (index, pool) in memory_type.custom_pools.iter().enumerate() {
        if !pool_is_empty(pool) {
            y = custom_pool_rows(out, index, pool, y);
        }
    }
    y
}

/// Whether a custom pool holds no memory: it gets no rows.
fn pool_is_empty(pool: &PoolMap) -> bool {
    pool.blocks.is_empty() && pool.dedicated.is_empty()
}

/// The `index`th custom pool of its memory type, under a heading with its
/// name, what it fixes about its blocks, and its figures.
fn custom_pool_rows(out: &mut String, index: usize, pool: &PoolMap, mut y: f64) -> f64 {
    let stats = pool.detailed_stats();
    let id = pool_id(index, pool);
    let mut policy = Vec::new();
    if let Some(size) = pool.block_size {
        policy.push(format!("blocks of {}", bytes(size)));
    }
    match (pool.min_blocks, pool.max_blocks) {
        (0, None) => {}
        (min, None) => policy.push(format!("at least {}", count(min.into(), "block"))),
        (0, Some(max)) => policy.push(format!("at most {}", count(max.into(), "block"))),
        (min, Some(max)) => policy.push(format!("{min} to {}", count(max.into(), "block"))),
    }
    let policy = if policy.is_empty() {
        String::new()
    } else {
        format!(" ({})", policy.join(", "))
    };
    y += LABEL;
    let heading = format!(
        "Custom pool {id}{policy}: {} in {}, {} of {}",
        bytes(stats.block_bytes),
        count(stats.block_count, "memory object"),
        count(stats.allocation_count, "allocation"),
        bytes(stats.allocation_bytes),
    );
    text_with(out, MARGIN, y, " font-style=\"italic\"", &heading);
    y += GAP;
    for block in &pool.blocks {
        y = block_row(out, pool.memory_type, Some(&id), block, y);
    }
    for (index, dedicated) in pool.dedicated.iter().enumerate() {
        y = dedicated_row(out, pool.memory_type, Some(&id), index, dedicated, y);
    }
    y
}

/// What names a custom pool in the picture: its index among its memory
/// type's custom pools, as in the JSON dump's `Name`, and its name:
/// `0 "textures"`, or `1` for an unnamed pool.
fn pool_id(index: usize, pool: &PoolMap) -> String {
    match &pool.name {
        Some(name) => format!("{index} \"{name}\""),
        None => index.to_string(),
    }
}

/// A row's label: `Block 3` (`row`) in a default pool, `Custom pool 0
/// "textures", block 3` in the custom pool `pool` names ([`pool_id`]).
fn row_label(pool: Option<&str>, row: &str) -> String {
    match pool {
        Some(pool) => format!("Custom pool {pool}, {}", row.to_lowercase()),
        None => row.to_owned(),
    }
}

/// ` in custom pool 0 "textures"` for a tooltip, or nothing in a default
/// pool.
fn in_pool(pool: Option<&str>) -> String {
    pool.map_or_else(String::new, |pool| format!(" in custom pool {pool}"))
}

fn block_row(
    out: &mut String,
    memory_type: u32,
    pool: Option<&str>,
    block: &BlockMap,
    mut y: f64,
) -> f64 {
    let stats = block.detailed_stats();
    y += LABEL;
    let largest_free = if stats.unused_range_count == 0 {
        0
    } else {
        stats.unused_range_size_max
    };
    let label = format!(
        "{}: {}, {}, {} free in {} (largest {})",
        row_label(pool, &format!("Block {}", block.id)),
        bytes(block.size),
        count(stats.allocation_count, "allocation"),
        bytes(stats.unused_bytes()),
        count(stats.unused_range_count, "range"),
        bytes(largest_free),
    );
    text(out, MARGIN, y - 4.0, &label);
    out.push_str("<g class=\"block\">\n");
    let title = format!(
        "block {memory_type}/{}{}: VkDeviceMemory {:#x}, {} bytes{}",
        block.id,
        in_pool(pool),
        ash::vk::Handle::as_raw(block.memory),
        block.size,
        if block.mapped { ", mapped" } else { "" }
    );
    rect(
        out,
        "block",
        MARGIN,
        y,
        WIDTH - 2.0 * MARGIN,
        FREE_FILL,
        &title,
    );
    let scale = (WIDTH - 2.0 * MARGIN) / block.size.max(1) as f64;
    for range in block.allocations() {
        allocation_rect(
            out,
            range,
            MARGIN + range.offset as f64 * scale,
            y,
            range.size as f64 * scale,
        );
    }
    out.push_str("</g>\n");
    y + ROW + GAP
}

fn dedicated_row(
    out: &mut String,
    memory_type: u32,
    pool: Option<&str>,
    index: usize,
    dedicated: &DedicatedMap,
    mut y: f64,
) -> f64 {
    y += LABEL;
    let label = format!(
        "{}: {}, {}, {}",
        row_label(pool, &format!("Dedicated allocation {index}")),
        bytes(dedicated.size),
        dedicated.kind.vma_name(),
        quoted_name(dedicated.name.as_deref()),
    );
    text(out, MARGIN, y - 4.0, &label);
    let (fill, class) = style(dedicated.kind);
    let title = format!(
        "{} ({}): dedicated VkDeviceMemory {:#x} of memory type {memory_type}{}, {} bytes{}",
        quoted_name(dedicated.name.as_deref()),
        dedicated.kind.vma_name(),
        ash::vk::Handle::as_raw(dedicated.memory),
        in_pool(pool),
        dedicated.size,
        if dedicated.mapped { ", mapped" } else { "" }
    );
    rect(
        out,
        &format!("alloc dedicated {class}"),
        MARGIN,
        y,
        WIDTH - 2.0 * MARGIN,
        fill,
        &title,
    );
    y + ROW + GAP
}

fn allocation_rect(out: &mut String, range: &RangeMap, x: f64, y: f64, width: f64) {
    let (fill, class) = style(range.kind);
    let title = format!(
        "{} ({}): {} bytes at offset {}",
        quoted_name(range.name.as_deref()),
        range.kind.vma_name(),
        range.size,
        range.offset
    );
    rect(
        out,
        &format!("alloc {class}"),
        x,
        y,
        width.max(1.0),
        fill,
        &title,
    );
}

fn quoted_name(name: Option<&str>) -> String {
    name.map_or_else(|| "unnamed".to_owned(), |n| format!("\"{n}\""))
}

fn rect(out: &mut String, class: &str, x: f64, y: f64, width: f64, fill: &str, title: &str) {
    let _ = write!(
        out,
        "<rect class=\"{class}\" x=\"{x:.2}\" y=\"{y}\" width=\"{width:.2}\" height=\"{ROW}\" \
         fill=\"{fill}\" stroke=\"#9b9b9b\" stroke-width=\"0.5\"><title>"
    );
    escape_xml_into(out, title);
    out.push_str("</title></rect>\n");
}

fn text(out: &mut String, x: f64, y: f64, content: &str) {
    text_with(out, x, y, "", content);
}

fn bold_text(out: &mut String, x: f64, y: f64, content: &str) {
    text_with(out, x, y, " font-weight=\"bold\"", content);
}

fn text_with(out: &mut String, x: f64, y: f64, attributes: &str, content: &str) {
    let _ = write!(out, "<text x=\"{x}\" y=\"{y}\"{attributes}>");
    escape_xml_into(out, content);
    out.push_str("</text>\n");
}

/// `1 range`, `2 ranges`.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A byte count for people: `64 MiB`, `1.5 KiB`, `100 B`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut value = n as f64;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    // Just under a unit rounds up to it at one decimal: 1048575 bytes
    // read `1.0 MiB`, not `1024.0 KiB`.
    if (value * 10.0).round() >= 10240.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Appends `value` as XML character data or attribute text: the five markup
/// characters become entities, a carriage return a character reference
/// (a parser reads a raw one as a newline: XML 1.0's end-of-line
/// handling), and characters XML 1.0 forbids (C0 controls other than tab,
/// newline and carriage return) become U+FFFD.
pub(crate) fn escape_xml_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            '\t' | '\n' => out.push(c),
            c if u32::from(c) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_forbidden_characters() {
        let mut out = String::new();
        escape_xml_into(&mut out, "a<b>&\"c\"'\u{1}é");
        assert_eq!(out, "a&lt;b&gt;&amp;&quot;c&quot;&apos;\u{fffd}é");
    }

    /// A carriage return is kept as a character reference: raw, a parser
    /// reads it (and a following newline) as one newline.
    #[test]
    fn keeps_carriage_returns_through_a_parser() {
        let mut out = String::new();
        escape_xml_into(&mut out, "a\r\nb\rc\td");
        assert_eq!(out, "a&#13;\nb&#13;c\td");
    }

    /// U+FFFE and U+FFFF are not XML characters either: a name holding them
    /// must not make the picture unreadable.
    #[test]
    fn escapes_the_xml_noncharacters() {
        let mut out = String::new();
        escape_xml_into(&mut out, "a\u{fffe}b\u{ffff}c\u{fffd}");
        assert_eq!(out, "a\u{fffd}b\u{fffd}c\u{fffd}");
    }

    /// Byte counts past the largest unit stay in it instead of panicking.
    #[test]
    fn byte_counts_past_the_largest_unit_stay_in_it() {
        assert_eq!(bytes(1 << 40), "1 TiB");
        assert_eq!(bytes(1 << 50), "1024 TiB");
        assert_eq!(bytes(u64::MAX), "16777216 TiB");
    }

    #[test]
    fn byte_counts_read_well() {
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(64 << 20), "64 MiB");
    }

    /// A count just under a unit is written in that unit, never as 1024.0
    /// of the one below.
    #[test]
    fn byte_counts_just_under_a_unit_round_up_to_it() {
        assert_eq!(bytes((1 << 20) - 1), "1.0 MiB");
        assert_eq!(bytes((1 << 30) - 1), "1.0 GiB");
        assert_eq!(bytes((1 << 20) - 52 * 1024), "972 KiB");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes((1 << 50) - 1), "1024.0 TiB");
    }
}
