//! Unit tests of the results' tables that need their internals: the note
//! on an allocator's failed allocations under the targets, the scaling
//! table's harness floor, and the growth figures. They are apart from
//! `report.rs` so that the tables and the JSON file read on their own.

use super::*;

/// A row of `allocator` on `trace` at `ns_op` per operation.
fn test_row(allocator: Which, trace: &str, ns_op: f64, failures: u64) -> Row {
    Row {
        allocator,
        trace: trace.to_owned(),
        seed: 0,
        runs: 1,
        ns_alloc: ns_op,
        ns_free: ns_op,
        ns_op,
        ns_driver_op: None,
        ns_op_min: ns_op,
        ns_op_max: ns_op,
        allocations: 10,
        frees: 10,
        failures,
        peak_live: 1,
        peak_reserved: 1,
        peak_reserved_range: (1, 1),
        vk_allocate_calls: Some(1),
        vk_allocate_calls_range: Some((1, 1)),
        vk_free_calls: Some(1),
        end_objects_hooked: None,
        end_objects_own: None,
        placement_hash: None,
    }
}

#[test]
fn a_row_with_failures_is_called_out_under_the_targets() {
    let results = Results {
        rows: vec![
            test_row(Which::VkSuballoc, "mixed", 1.0, 0),
            test_row(Which::Vma, "mixed", 1.0, 3),
        ],
        ..Default::default()
    };
    let text = results.targets_markdown();
    assert!(
        text.contains("vma (vk-mem 0.5) failed 3 allocations"),
        "{text}"
    );
    assert!(!text.contains("vk-suballoc failed"), "{text}");
}

/// The harness's own growth, under vk-suballoc's cost at the fewest
/// live allocations held constant: (15 + 45) / (15 + 5) = 3.
#[test]
fn a_constant_cost_allocator_grows_as_the_harness_under_it() {
    let floor = |ns_op| Floor {
        ns_op,
        ns_op_min: ns_op,
        ns_op_max: ns_op,
    };
    let mut results = Results {
        scaling: vec![
            (1_000, test_row(Which::VkSuballoc, "scaling-1000", 20.0, 0)),
            (
                1_000_000,
                test_row(Which::VkSuballoc, "scaling-1000000", 150.0, 0),
            ),
        ],
        harness_floor: vec![(1_000_000, floor(45.0))],
        ..Default::default()
    };
    assert_eq!(results.flat_allocator_growth(), None, "one live count");
    results.harness_floor.insert(0, (1_000, floor(5.0)));
    assert_eq!(results.flat_allocator_growth(), Some(3.0));
    let table = results.scaling_markdown();
    assert!(
        table.contains("| harness alone (no allocator) | 5.0 | 45.0 | 9.00 |"),
        "{table}"
    );
    assert!(table.contains("would measure 3.00x"), "{table}");
    let json = results.json();
    assert!(
        json.contains(
            "{\"live\": 1000, \"ns_op\": 5.00, \"ns_op_min\": 5.00, \"ns_op_max\": 5.00}"
        ),
        "{json}"
    );
}

#[test]
fn growth_over_every_live_count_is_a_bare_ratio() {
    let lives = [1_000, 10_000, 100_000];
    assert_eq!(
        growth(&lives, &[Some(20.0), Some(30.0), Some(50.0)]),
        "2.50"
    );
}

#[test]
fn growth_with_skipped_live_counts_names_its_range() {
    let lives = [1_000, 10_000, 100_000, 1_000_000];
    let cells = [Some(3137.0), Some(28_200.0), None, None];
    assert_eq!(growth(&lives, &cells), "8.99 (1000..10000 only)");
    assert_eq!(growth(&lives, &[None; 4]), "n/a");
}

/// `--traces ""`, the scaling run alone (bench/README.md), still ends with
/// the flatness verdict: only the empty per-trace table is left out.
#[test]
fn a_scaling_only_run_keeps_the_flatness_verdict() {
    let results = Results {
        scaling: vec![
            (1_000, test_row(Which::VkSuballoc, "scaling-1000", 20.0, 0)),
            (
                1_000_000,
                test_row(Which::VkSuballoc, "scaling-1000000", 50.0, 0),
            ),
        ],
        ..Default::default()
    };
    let text = results.targets_markdown();
    assert!(
        text.contains("slowest/fastest ns/op across live counts = 2.50"),
        "{text}"
    );
    assert!(!text.contains("against the best peer"), "{text}");
    assert!(Results::default().targets_markdown().is_empty());
}

/// A scaling row's failed allocations are called out as a trace row's
/// are: its ns/op covers less work than the other rows'.
#[test]
fn a_scaling_row_with_failures_is_called_out() {
    let results = Results {
        scaling: vec![
            (1_000, test_row(Which::VkSuballoc, "scaling-1000", 20.0, 0)),
            (1_000, test_row(Which::GpuAlloc, "scaling-1000", 20.0, 4)),
        ],
        ..Default::default()
    };
    let text = results.markdown();
    assert!(
        text.contains("scaling-1000: gpu-alloc 0.6 failed 4 allocations"),
        "{text}"
    );
}

/// The target table's cells name their unit once: a figure of 10 µs or
/// more is printed in µs by `ns` ("25.0 us"), which the cells' own " ns"
/// turned into "25.0 us ns" (gpu-allocator's `small-churn` takes 25 µs an
/// operation on lavapipe; a fastest peer or a strategy's row could too).
#[test]
fn the_target_table_names_microseconds_once() {
    let results = Results {
        rows: vec![
            test_row(Which::VkSuballoc, "small-churn", 12_000.0, 0),
            test_row(Which::GpuAllocator, "small-churn", 25_000.0, 0),
            test_row(Which::OurCore, "small-churn", 24.6, 0),
            test_row(Which::VkSuballoc, "mixed", 42.6, 0),
            test_row(Which::GpuAlloc, "mixed", 40.1, 0),
            test_row(Which::OurCore, "mixed", 25.4, 0),
            test_row(Which::VkSuballoc, "streaming", 15_000.0, 0),
            test_row(Which::Vma, "streaming", 40_000.0, 0),
            test_row(Which::OurCore, "streaming", 30_000.0, 0),
        ],
        ..Default::default()
    };
    let text = results.targets_markdown();
    assert!(!text.contains("us ns"), "{text}");
    assert!(text.contains("(gpu-allocator: 25.0 us)"), "{text}");
    assert!(text.contains("(12.0 us vs 24.6 ns)"), "{text}");
    assert!(text.contains("(15.0 us vs 30.0 us)"), "{text}");
    // Below 10 µs the cells read as before.
    assert!(text.contains("(gpu-alloc: 40.1 ns)"), "{text}");
    assert!(text.contains("(42.6 vs 25.4 ns)"), "{text}");
}
