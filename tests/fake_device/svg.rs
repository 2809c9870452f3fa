//! The SVG memory map, read as a person reads it: well-formed markup with
//! one rectangle per allocation, colours by kind, a legend and rows that do
//! not overlap, allocations drawn to scale, labels that tell fragmentation
//! from exhaustion.

use std::collections::BTreeSet;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{PoolDesc, Usage};

use super::report::{free_all, free_pools, populate, populate_pools};
use super::{allocator, buffer, finish, free};

/// Checks that tags nest and close, and returns the names of the elements
/// in document order.
fn balanced_elements(svg: &str) -> Vec<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut elements = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').expect("unclosed tag") + open;
        let tag = &rest[open + 1..close];
        assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
        } else {
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            elements.push(name.clone());
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        // Text between tags must not hold raw markup characters.
        let text_end = rest[close..].find('<').map_or(rest.len(), |n| n + close);
        let between = &rest[close + 1..text_end];
        assert!(!between.contains('>'), "raw '>' in text: {between}");
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    elements
}

#[test]
fn svg_map_is_well_formed_with_one_rect_per_allocation() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let map = allocator.memory_map();
    let svg = allocator.memory_map_svg();
    assert_eq!(svg, map.to_svg());
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    let elements = balanced_elements(&svg);
    assert_eq!(elements[0], "svg");
    assert_eq!(elements.iter().filter(|e| *e == "svg").count(), 1);
    assert_eq!(svg.matches("class=\"alloc ").count(), live.len());
    assert_eq!(map.allocation_count(), live.len());
    let blocks: usize = map.memory_types.iter().map(|t| t.blocks.len()).sum();
    assert_eq!(
        svg.matches("class=\"block\"").count(),
        blocks * 2,
        "a group and a background each"
    );
    // Every allocation rect carries its title; names are escaped.
    assert!(svg.contains(
        "&quot;vertices &quot;main&quot; C:\\assets\\mesh.bin &lt;lod 0&gt; &amp; más 🦀&quot; (BUFFER)"
    ));
    assert!(svg.contains("&quot;albedo\ttexture\nline two \u{fffd}&quot; (IMAGE_OPTIMAL)"));
    assert!(svg.contains("unnamed (BUFFER)"));
    assert!(!svg.contains('\u{1}'));
    free_all(&allocator, live);
    finish(allocator, &device);
}
/// The value of attribute `name` in the start tag `tag`.
fn svg_attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// `svg_attr` as a number.
fn svg_number(tag: &str, name: &str) -> f64 {
    svg_attr(tag, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {name} in {tag}"))
}

/// The start tags of the elements named `element`, in document order.
fn svg_tags<'a>(svg: &'a str, element: &str) -> Vec<&'a str> {
    let open = format!("<{element} ");
    svg.match_indices(&open)
        .map(|(at, _)| &svg[at..at + svg[at..].find('>').unwrap()])
        .collect()
}

/// The (top, bottom) of every heading, label and row after the legend, in
/// document order: text is 11 units high above its baseline; a row is a
/// block's background or a dedicated allocation's rectangle.
fn stacked_items(svg: &str) -> Vec<(f64, f64, &str)> {
    let rows = &svg[svg.find("</g>").unwrap()..];
    let mut items = Vec::new();
    for (at, _) in rows.match_indices('<') {
        let tag = &rows[at..at + rows[at..].find('>').unwrap()];
        if tag.starts_with("<text ") {
            let baseline = svg_number(tag, "y");
            items.push((baseline - 11.0, baseline, tag));
        } else if tag.starts_with("<rect class=\"block\"")
            || tag.starts_with("<rect class=\"alloc dedicated ")
        {
            let y = svg_number(tag, "y");
            items.push((y, y + svg_number(tag, "height"), tag));
        }
    }
    items
}

/// Each of `items` (more than 10, from [`stacked_items`]) sits below the
/// one before it, with less than a row of blank between.
fn assert_stacked(items: &[(f64, f64, &str)]) {
    assert!(items.len() > 10);
    for pair in items.windows(2) {
        let ((_, bottom, before), (top, _, after)) = (pair[0], pair[1]);
        assert!(
            top >= bottom && top < bottom + 24.0,
            "{after} does not follow {before}"
        );
    }
}

/// The SVG is read by eye: the legend is one row of swatches inside the
/// picture, each with its label just right of it; every heading, label and
/// row sits below the legend, with less than a row of blank between; the
/// picture's height takes in the last row, with less than a row of blank
/// below it.
#[test]
fn svg_layout_keeps_legend_rows_and_height_apart() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let svg = allocator.memory_map().to_svg();
    let root = svg_tags(&svg, "svg")[0];
    let (width, height) = (svg_number(root, "width"), svg_number(root, "height"));
    let legend_end = svg.find("</g>").unwrap();
    let (legend, rows) = svg.split_at(legend_end);
    let swatches: Vec<&str> = svg_tags(legend, "rect")
        .into_iter()
        .filter(|r| r.contains("class=\"legend "))
        .collect();
    let labels = svg_tags(legend, "text");
    assert_eq!((swatches.len(), labels.len()), (6, 6));
    let mut legend_bottom: f64 = 0.0;
    let mut previous_label = f64::NEG_INFINITY;
    for (swatch, label) in swatches.iter().zip(&labels) {
        let (x, y) = (svg_number(swatch, "x"), svg_number(swatch, "y"));
        let right = x + svg_number(swatch, "width");
        assert!(x >= 0.0 && x > previous_label && right < width, "{swatch}");
        assert_eq!(y, svg_number(swatches[0], "y"), "one row: {swatch}");
        let label_x = svg_number(label, "x");
        assert!(right < label_x && label_x <= right + 8.0, "{label}");
        let baseline = svg_number(label, "y");
        assert!(
            y < baseline && baseline <= y + 12.0,
            "{label} beside {swatch}"
        );
        previous_label = label_x;
        legend_bottom = legend_bottom.max(y + svg_number(swatch, "height"));
    }
    // Text is 11 units high above its baseline.
    let tops: Vec<f64> = svg_tags(rows, "text")
        .iter()
        .map(|t| svg_number(t, "y") - 11.0)
        .chain(svg_tags(rows, "rect").iter().map(|r| svg_number(r, "y")))
        .collect();
    let first = tops.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        first >= legend_bottom && first < legend_bottom + 24.0,
        "first row at {first}, legend ends at {legend_bottom}"
    );
    let bottom = svg_tags(rows, "rect")
        .iter()
        .map(|r| svg_number(r, "y") + svg_number(r, "height"))
        .fold(0.0, f64::max);
    assert!(
        bottom < height && height < bottom + 24.0,
        "last row ends at {bottom}, picture at {height}"
    );
    free_all(&allocator, live);
    finish(allocator, &device);
}

/// The message of an empty map sits below the legend, inside the picture.
#[test]
fn svg_of_an_empty_map_says_so_below_the_legend() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let svg = allocator.memory_map_svg();
    let root = svg_tags(&svg, "svg")[0];
    let height = svg_number(root, "height");
    let legend_bottom = svg_tags(&svg, "rect")
        .iter()
        .filter(|r| r.contains("class=\"legend "))
        .map(|r| svg_number(r, "y") + svg_number(r, "height"))
        .fold(0.0, f64::max);
    let message = svg_tags(&svg, "text")
        .into_iter()
        .find(|t| svg[svg.find(t).unwrap()..].starts_with(&format!("{t}>No device memory")))
        .expect("message");
    let baseline = svg_number(message, "y");
    assert!(
        baseline - 11.0 >= legend_bottom && baseline < height,
        "message at {baseline}, legend ends at {legend_bottom}, picture at {height}"
    );
    assert!(baseline - 11.0 < legend_bottom + 24.0);
    finish(allocator, &device);
}

/// A custom pool that holds no memory draws nothing: no heading of its own,
/// and none for its memory type when nothing else there holds memory, so
/// the map of an allocator whose only pool is empty says it holds none.
#[test]
fn svg_leaves_out_custom_pools_that_hold_no_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let vram = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let pool = allocator
        .create_pool(&PoolDesc::new(vram).name("idle"))
        .unwrap();
    let map = allocator.memory_map();
    let pools: Vec<_> = map.custom_pools().collect();
    assert_eq!(pools.len(), 1);
    assert!(pools[0].blocks.is_empty() && pools[0].dedicated.is_empty());
    let svg = map.to_svg();
    assert!(!svg.contains("Custom pool"), "{svg}");
    assert!(!svg.contains(">Memory type "), "{svg}");
    assert!(svg.contains(">No device memory is held.<"), "{svg}");
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Allocations are coloured by kind with GpuMemDumpVis's palette and carry
/// the kind's CSS class, so a stylesheet or a script can pick them out:
/// buffers `#ffffa5`, optimal images `#b7ffff`, in the legend alike.
#[test]
fn svg_colours_allocations_by_kind() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let svg = allocator.memory_map_svg();
    let rects = svg_tags(&svg, "rect");
    let styles = |class: &str| -> BTreeSet<(String, String)> {
        rects
            .iter()
            .filter(|r| svg_attr(r, "class").unwrap().starts_with(class))
            .map(|r| {
                let class = svg_attr(r, "class").unwrap();
                let kind = class.rsplit(' ').next().unwrap().to_owned();
                (kind, svg_attr(r, "fill").unwrap().to_owned())
            })
            .collect()
    };
    let buffer = ("buffer".to_owned(), "#ffffa5".to_owned());
    let optimal = ("image-optimal".to_owned(), "#b7ffff".to_owned());
    assert_eq!(
        styles("alloc "),
        BTreeSet::from([buffer.clone(), optimal.clone()])
    );
    let legend = styles("legend ");
    assert!(
        legend.contains(&buffer) && legend.contains(&optimal),
        "{legend:?}"
    );
    assert!(legend.contains(&("free".to_owned(), "#dcdcdc".to_owned())));
    let backgrounds = styles("block");
    assert_eq!(
        backgrounds,
        BTreeSet::from([("block".to_owned(), "#dcdcdc".to_owned())])
    );
    free_all(&allocator, live);
    finish(allocator, &device);
}

/// Rows of the SVG neither overlap nor drift apart: in document order each
/// heading, label and row starts below the one before it, with less than a
/// row of blank between; and each allocation is drawn to scale inside its
/// block's row, at `offset / size` of the row's width.
#[test]
fn svg_rows_stack_and_allocations_are_drawn_to_scale() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let map = allocator.memory_map();
    let svg = map.to_svg();
    let picture_width = svg_number(svg_tags(&svg, "svg")[0], "width");
    // Rows span the picture's width, with equal margins.
    let full_width = |row: &str| {
        let (x, width) = (svg_number(row, "x"), svg_number(row, "width"));
        assert!(
            x > 0.0 && (x + width - (picture_width - x)).abs() < 0.01,
            "{row}"
        );
    };
    let rows = &svg[svg.find("</g>").unwrap()..];
    // (top, bottom) of every heading, label and row background, in order.
    let mut items: Vec<(f64, f64, &str)> = Vec::new();
    let mut blocks = map.memory_types.iter().flat_map(|t| &t.blocks);
    let mut rest = rows;
    while let Some(at) = rest.find('<') {
        rest = &rest[at..];
        let tag = &rest[..rest.find('>').unwrap()];
        if tag.starts_with("<text ") {
            let baseline = svg_number(tag, "y");
            items.push((baseline - 11.0, baseline, tag));
        } else if tag.starts_with("<rect ") {
            full_width(tag);
            let y = svg_number(tag, "y");
            items.push((y, y + svg_number(tag, "height"), tag));
        } else if tag == "<g class=\"block\"" {
            let group = &rest[..rest.find("</g>").unwrap()];
            let rects = svg_tags(group, "rect");
            let row = rects[0];
            let (x, y, width) = (
                svg_number(row, "x"),
                svg_number(row, "y"),
                svg_number(row, "width"),
            );
            full_width(row);
            items.push((y, y + svg_number(row, "height"), row));
            let block = blocks.next().expect("a block per row");
            let allocations: Vec<_> = block.allocations().collect();
            assert_eq!(rects.len() - 1, allocations.len());
            for (rect, range) in rects[1..].iter().zip(allocations) {
                assert_eq!(svg_number(rect, "y"), y, "{rect}");
                let expected_x = x + width * range.offset as f64 / block.size as f64;
                let expected_width = width * range.size as f64 / block.size as f64;
                assert!((svg_number(rect, "x") - expected_x).abs() < 0.01, "{rect}");
                let drawn = svg_number(rect, "width");
                assert!(
                    (drawn - expected_width.max(1.0)).abs() < 0.01,
                    "{rect}: {expected_width}"
                );
            }
            rest = &rest[group.len()..];
            continue;
        }
        rest = &rest[1..];
    }
    assert!(blocks.next().is_none(), "a row per block");
    // A bold heading names each memory type that holds memory.
    let headings: Vec<&str> = rows
        .split("<text ")
        .filter(|t| t.contains("font-weight=\"bold\""))
        .collect();
    let held: Vec<u32> = map
        .memory_types
        .iter()
        .filter(|t| !t.blocks.is_empty() || !t.dedicated.is_empty())
        .map(|t| t.memory_type)
        .collect();
    assert_eq!(headings.len(), held.len());
    for (heading, memory_type) in headings.iter().zip(held) {
        assert!(heading.contains(&format!(">Memory type {memory_type} (")));
    }
    assert_stacked(&items);
    free_all(&allocator, live);
    finish(allocator, &device);
}

/// A block's label in the SVG gives its free space and largest free range
/// (what tells fragmentation from exhaustion): an emptied block's one free
/// range is the whole block.
#[test]
fn svg_block_label_gives_the_largest_free_range() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    free(&allocator, a);
    let svg = allocator.memory_map_svg();
    let label = svg
        .lines()
        .find_map(|line| line.split(">Block 0: ").nth(1))
        .expect("a block label");
    let size = label.split(',').next().unwrap();
    assert!(
        label.starts_with(&format!(
            "{size}, 0 allocations, {size} free in 1 range (largest {size})"
        )),
        "{label}"
    );
    allocator.trim();
    finish(allocator, &device);
}

/// Custom pools are drawn after the default pool of their memory type,
/// each under a heading with its index, name and block policy, its rows
/// labelled with the pool, every allocation one rectangle; the type's
/// heading counts them.
#[test]
fn svg_names_custom_pools_after_their_types_default_pool() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = populate(&allocator);
    let (pools, pooled) = populate_pools(&allocator);
    let map = allocator.memory_map();
    let svg = map.to_svg();
    balanced_elements(&svg);
    assert_eq!(
        svg.matches("class=\"alloc ").count(),
        live.len() + pooled.len()
    );
    let blocks: usize = map
        .memory_types
        .iter()
        .map(|t| t.blocks.len() + t.custom_pools.iter().map(|p| p.blocks.len()).sum::<usize>())
        .sum();
    assert_eq!(svg.matches("class=\"block\"").count(), blocks * 2);

    let vram = pools[0].memory_type();
    let name = "&quot;streamed &quot;&lt;textures&gt;&quot;&quot;";
    let position = |text: &str| {
        svg.find(text)
            .unwrap_or_else(|| panic!("{text} missing in\n{svg}"))
    };
    let type_heading = position(&format!(">Memory type {vram} ("));
    let default_rows = type_heading + svg[type_heading..].find(">Block 0: ").unwrap();
    let named = position(&format!(
        ">Custom pool 0 {name} (blocks of 1 MiB, at most 3 blocks): 4 MiB in 3 memory objects, \
         4 allocations of 3.5 MiB<"
    ));
    let first_block = position(&format!(
        ">Custom pool 0 {name}, block 0: 1 MiB, 2 allocations, 0 B free"
    ));
    let second_block = position(&format!(
        ">Custom pool 0 {name}, block 1: 1 MiB, 1 allocation, 512 KiB free"
    ));
    let dedicated = position(&format!(
        ">Custom pool 0 {name}, dedicated allocation 0: 2 MiB, BUFFER, &quot;pool dedicated&quot;<"
    ));
    let unnamed = position(">Custom pool 1 (at least 1 block): ");
    let unnamed_block = position(">Custom pool 1, block 0: ");
    let order = [
        type_heading,
        default_rows,
        named,
        first_block,
        second_block,
        dedicated,
        unnamed,
        unnamed_block,
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    // The next memory type's heading comes after the pools.
    if let Some(next) = svg[type_heading + 1..].find(">Memory type ") {
        assert!(unnamed_block < type_heading + 1 + next);
    }
    // Tooltips name the pool too.
    assert!(svg.contains(&format!(
        "block {vram}/0 in custom pool 0 {name}: VkDeviceMemory"
    )));
    assert!(svg.contains(&format!(
        "of memory type {vram} in custom pool 0 {name}, 2097152 bytes"
    )));
    // The type's heading counts its custom pools, as stats() does.
    let t = &allocator.stats().memory_types[vram as usize];
    let heading_end = svg[type_heading..].find('<').unwrap() + type_heading;
    let heading = &svg[type_heading..heading_end];
    let objects = t.blocks + t.dedicated_allocations;
    assert!(
        heading.contains(&format!(
            " in {objects} memory objects, {} allocations",
            t.allocations()
        )),
        "{heading}"
    );

    // The pools' headings, labels and rows stack as the default pools' do:
    // each below the one before it, with less than a row of blank between.
    let items = stacked_items(&svg);
    assert_stacked(&items);

    live.extend(pooled);
    free_pools(&allocator, pools, live);
    finish(allocator, &device);
}
