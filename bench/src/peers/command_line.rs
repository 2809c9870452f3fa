//! The `peers` command line: the usage text, numbers as the flags take them
//! (`200_000`, `1e6`, `0x5eed`), and every flag parsed into [`Args`], with the
//! defaults of a plain run (`DEFAULT_SEED`, 200,000 operations a trace, five
//! runs, every trace and allocator). It is apart from `main.rs` so that the
//! runs read without the flag table; `Args` itself stays in `main.rs`, beside
//! the code that reads it.

use crate::backends::{self, Which};
use crate::trace::TraceKind;
use crate::{defragment, ring_backends, Args};

const DEFAULT_SEED: u64 = 0x5EED_0005;

fn usage() -> &'static str {
    "usage: peers [--ops N] [--runs R] [--seed S] [--traces streaming,frame-loop,small-churn,mixed,ring]\n\
     \x20            [--ring-allocators vk-suballoc-ring,vk-suballoc-ring-mut,vk-suballoc,vma-linear-pool,gpu-alloc,gpu-allocator,\n\
     \x20                               core-ours-linear,core-vma-virtual-linear] [--ring-size BYTES]\n\
     \x20            [--allocators vk-suballoc,vk-suballoc-locked,vma,gpu-allocator,gpu-alloc,vulkano,\n\
     \x20                          core-ours,core-offset-allocator,core-vulkano-free-list,core-vulkano-buddy]\n\
     \x20            [--scaling 1000,10000,100000,1000000 | --no-scaling] [--scaling-ops N]\n\
     \x20            [--scaling-gpu-allocator-max N] [--scaling-vulkano-max N]\n\
     \x20            [--real-resources] [--print-requirements]\n\
     \x20            [--placement-hash] [--device NAME] (--traces \"\": the scaling run alone)\n\
     \x20            [--json FILE] [--markdown FILE] [--empty-block-reserve X] (vk-suballoc's Config)\n\
     \x20            [--strategy min-time|min-memory|min-offset|max-offset] (vk-suballoc's and our core's)\n\
     \x20            [--defragment [--defragment-every N|P%]] (default every 2% of a trace)"
}

fn parse_number(s: &str) -> Result<u64, String> {
    let s = s.replace('_', "");
    let parsed = if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else if let Some((m, e)) = s.split_once('e') {
        match (m.parse::<u64>(), e.parse::<u32>()) {
            (Ok(m), Ok(e)) => m.checked_mul(10u64.pow(e)),
            _ => None,
        }
    } else {
        s.parse().ok()
    };
    parsed.ok_or_else(|| format!("not a number: {s}"))
}

pub(super) fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        ops: 200_000,
        runs: 5,
        seed: DEFAULT_SEED,
        traces: TraceKind::ALL.to_vec(),
        allocators: Which::ALL.to_vec(),
        scaling: vec![1_000, 10_000, 100_000, 1_000_000],
        scaling_ops: 100_000,
        scaling_gpu_allocator_max: 10_000,
        scaling_vulkano_max: 100_000,
        real_resources: false,
        defragment: false,
        defragment_every: defragment::Every::Percent(2.0),
        print_requirements: false,
        placement_hash: false,
        json: None,
        markdown: None,
        device: None,
        ring: true,
        ring_allocators: ring_backends::RingWhich::ALL.to_vec(),
        ring_size: 64 << 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--ops" => args.ops = parse_number(&value()?)? as usize,
            "--runs" => args.runs = (parse_number(&value()?)? as usize).max(1),
            "--seed" => args.seed = parse_number(&value()?)?,
            "--traces" => {
                let list = value()?;
                args.ring = list.split(',').any(|t| t == "ring");
                args.traces = list
                    .split(',')
                    .filter(|t| !t.is_empty() && *t != "ring")
                    .map(|t| {
                        TraceKind::ALL
                            .into_iter()
                            .find(|k| k.name() == t)
                            .ok_or_else(|| format!("unknown trace {t}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--allocators" => {
                args.allocators = value()?
                    .split(',')
                    .map(|a| Which::parse(a).ok_or_else(|| format!("unknown allocator {a}")))
                    .collect::<Result<_, _>>()?;
            }
            "--scaling" => {
                args.scaling = value()?
                    .split(',')
                    .map(|n| parse_number(n).map(|n| n as usize))
                    .collect::<Result<_, _>>()?;
            }
            "--ring-allocators" => {
                args.ring_allocators = value()?
                    .split(',')
                    .map(|a| {
                        ring_backends::RingWhich::parse(a)
                            .ok_or_else(|| format!("unknown ring allocator {a}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--ring-size" => args.ring_size = parse_number(&value()?)?.max(1 << 20),
            "--no-scaling" => args.scaling.clear(),
            "--scaling-ops" => args.scaling_ops = parse_number(&value()?)? as usize,
            "--scaling-gpu-allocator-max" => {
                args.scaling_gpu_allocator_max = parse_number(&value()?)? as usize;
            }
            "--scaling-vulkano-max" => {
                args.scaling_vulkano_max = parse_number(&value()?)? as usize;
            }
            "--real-resources" => args.real_resources = true,
            "--defragment" => args.defragment = true,
            "--defragment-every" => {
                args.defragment_every = defragment::Every::parse(&value()?)?;
            }
            "--print-requirements" => args.print_requirements = true,
            "--placement-hash" => args.placement_hash = true,
            "--json" => args.json = Some(value()?),
            "--markdown" => args.markdown = Some(value()?),
            "--device" => args.device = Some(value()?),
            "--empty-block-reserve" => {
                let reserve: f64 = value()?
                    .parse()
                    .map_err(|_| format!("{flag} needs a number"))?;
                // Set once, before any allocator is made.
                let _ = backends::EMPTY_BLOCK_RESERVE.set(reserve);
            }
            "--strategy" => {
                let strategy = match value()?.as_str() {
                    "min-time" => vk_suballoc::Strategy::MinTime,
                    "min-memory" => vk_suballoc::Strategy::MinMemory,
                    "min-offset" => vk_suballoc::Strategy::MinOffset,
                    "max-offset" => vk_suballoc::Strategy::MaxOffset,
                    other => {
                        return Err(format!(
                            "{flag}: min-time, min-memory, min-offset or max-offset, not {other}"
                        ))
                    }
                };
                // Set once, before any allocator is made.
                let _ = backends::STRATEGY.set(strategy);
            }
            "-h" | "--help" => return Err(usage().to_owned()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    Ok(args)
}
