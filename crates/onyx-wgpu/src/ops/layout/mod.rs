//! Layout operators: the shape-only ones as zero-copy views (Reshape, Flatten, Squeeze,
//! Unsqueeze, Identity), and the ones that move elements (Transpose, Concat, Split, Slice,
//! Expand, Tile, Pad, Resize, DepthToSpace, SpaceToDepth).
//!
//! Every element-moving kernel works on element *sizes*, not types: 1-, 2-, 4- and 8-byte
//! elements, so one shader serves bool/uint8/int8, f16, f32/int32 and int64 alike. Buffers are
//! bound as `array<u32>`; an element is held as its bits in a `u32` (or a `vec2<u32>` for 8
//! bytes). Each invocation writes whole output words (four 1-byte or two 2-byte elements, one
//! 4-byte element, or the two words of an 8-byte one), so no two invocations ever write the
//! same word. See [`element_shader`]: a kernel supplies only `fetch(e)`, the bits of output
//! element `e`. The gather, cast and compare families build on the same shader template.
//!
//! One child module per concept: [`element`] (the shader template and strided gathers),
//! `views`, `transpose`, `depth_space`, `concat_split`, `slice_expand`, `tile_pad`, `resize`.
//! This module keeps the helpers they share and the registration table.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::types::ValueType;
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::{input_dtype, Registry};
use crate::buffer::GpuBuffer;
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, grid, host_input, host_ints, strides, u32_of, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

mod concat_split;
mod depth_space;
mod element;
mod resize;
mod slice_expand;
mod tile_pad;
mod transpose;
mod views;

pub(crate) use element::*;

// ---------------------------------------------------------------------------------------------
// Small helpers.
// ---------------------------------------------------------------------------------------------

/// Maps a possibly negative `axis` into `0..rank`.
pub(crate) fn normalize_axis(axis: i64, rank: usize, at: &Location) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) && !(rank == 0 && axis == 0) {
        return Err(Error::node(at, format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Whether input `i` is a tensor of a dtype the data-movement kernels handle.
fn movable(ctx: &NodeContext<'_>, i: usize) -> bool {
    input_elem_size(ctx, i).is_some()
}

/// Whether input `i` is present.
fn has_input(ctx: &NodeContext<'_>, i: usize) -> bool {
    ctx.node.input(i).is_some()
}

/// Whether input `i` is a tensor (of any dtype).
fn is_tensor(ctx: &NodeContext<'_>, i: usize) -> bool {
    matches!(ctx.input_types.get(i), Some(ValueType::Tensor(_)))
}

/// The dtype of input `i` or an `Unsupported` error.
pub(crate) fn known_dtype(ctx: &NodeContext<'_>, i: usize) -> Result<DataType> {
    input_dtype(ctx, i)
        .ok_or_else(|| Error::Unsupported(format!("wgpu: input {i} of {} has no known dtype", ctx.node.location())))
}

/// The element size of input `i` or an `Unsupported` error.
pub(crate) fn known_size(ctx: &NodeContext<'_>, i: usize) -> Result<u32> {
    let dtype = known_dtype(ctx, i)?;
    elem_size(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {} on {dtype} tensors", ctx.node.location())))
}

/// A new GPU tensor value sharing `x`'s buffer with another shape.
fn view_as(x: &onyx_core::Tensor, shape: Vec<usize>, at: &Location) -> Result<Vec<Value>> {
    Ok(vec![Value::Tensor(x.reshaped(shape).map_err(|e| e.at(at))?)])
}

/// Registers this family's kernels.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("Reshape", supports_first_movable, views::build_reshape, &[1]);
    r.add("Flatten", supports_first_movable, views::build_flatten);
    r.add_with_host_inputs("Squeeze", supports_first_movable, views::build_squeeze, &[1]);
    r.add_with_host_inputs("Unsqueeze", supports_first_movable, views::build_unsqueeze, &[1]);
    r.add("Identity", supports_identity, views::build_identity);
    r.add("Transpose", supports_first_movable, transpose::build_transpose);
    r.add("DepthToSpace", depth_space::supports_rearrange, depth_space::build_depth_to_space);
    r.add("SpaceToDepth", depth_space::supports_rearrange, depth_space::build_space_to_depth);
    r.add("Concat", concat_split::supports_concat, concat_split::build_concat);
    r.add_with_host_inputs("Split", supports_first_movable, concat_split::build_split, &[1]);
    r.add_with_host_inputs("Slice", supports_first_movable, slice_expand::build_slice, &[1, 2, 3, 4]);
    r.add_with_host_inputs("Expand", supports_first_movable, slice_expand::build_expand, &[1]);
    r.add_with_host_inputs("Tile", supports_first_movable, tile_pad::build_tile, &[1]);
    r.add_with_host_inputs("Pad", tile_pad::supports_pad, tile_pad::build_pad, &[1, 2, 3]);
    r.add_with_host_inputs("Resize", resize::supports_resize, resize::build_resize, &[1, 2, 3]);
    r.add_with_host_inputs("Upsample", resize::supports_resize, resize::build_resize, &[1]);
}

/// Input 0 is a tensor the kernels can move.
fn supports_first_movable(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    movable(ctx, 0)
}

fn supports_identity(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    is_tensor(ctx, 0) && movable(ctx, 0)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use onyx_core::{DataType, HostBuffer, Tensor};

    use crate::testkit::{i64s, ints, provider, string, t, Case};

    /// The dtypes the data-movement tests run on: every element size, signed and unsigned.
    pub(crate) const DTYPES: [DataType; 7] = [
        DataType::Float,
        DataType::Float16,
        DataType::Int64,
        DataType::Int32,
        DataType::Bool,
        DataType::Uint8,
        DataType::Int8,
    ];

    /// A tensor of random bits (0/1 for bool; finite values for floats).
    pub(crate) fn random(dtype: DataType, shape: &[usize], seed: u64) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        let size = dtype.byte_len(1).unwrap();
        let mut bytes = vec![0u8; n * size];
        for e in bytes.chunks_mut(size) {
            match dtype {
                DataType::Bool => e[0] = rng.u8(0..2),
                DataType::Float => e.copy_from_slice(&(rng.f32() * 200.0 - 100.0).to_le_bytes()),
                DataType::Float16 => e.copy_from_slice(&half::f16::from_f32(rng.f32() * 200.0 - 100.0).to_le_bytes()),
                _ => rng.fill(e),
            }
        }
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
        let len = bytes.len();
        Tensor::from_bytes(dtype, shape.to_vec(), HostBuffer::new(Arc::new(words), 0, len).unwrap()).unwrap()
    }

    /// Runs `case` on both EPs and asserts bit-identical outputs (dtype, shape and bytes).
    pub(crate) fn check_exact(case: &Case) {
        let Some(gpu) = provider() else { return };
        let want = case.run_cpu();
        let got = case.try_run_gpu(&gpu).unwrap_or_else(|e| panic!("{} on wgpu: {e}", case.op));
        assert_eq!(got.len(), want.len(), "{}: output count", case.op);
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            let what = format!("{} output {o} ({} {:?})", case.op, w.dtype(), w.shape());
            assert_eq!(g.dtype(), w.dtype(), "{what}: dtype");
            assert_eq!(g.shape(), w.shape(), "{what}: shape");
            let (gb, wb) = (g.view().unwrap().bytes().unwrap(), w.view().unwrap().bytes().unwrap());
            let size = w.dtype().byte_len(1).unwrap();
            for (e, (a, b)) in gb.chunks(size).zip(wb.chunks(size)).enumerate() {
                assert!(a == b || both_nan(w.dtype(), a, b), "{what}: element {e} is {a:?}, expected {b:?}");
            }
        }
    }

    /// Whether two elements of a float type are both NaN (payloads may differ).
    fn both_nan(dtype: DataType, a: &[u8], b: &[u8]) -> bool {
        let nan = |x: &[u8]| match dtype {
            DataType::Float => f32::from_le_bytes([x[0], x[1], x[2], x[3]]).is_nan(),
            DataType::Float16 => half::f16::from_le_bytes([x[0], x[1]]).is_nan(),
            DataType::BFloat16 => half::bf16::from_le_bytes([x[0], x[1]]).is_nan(),
            _ => false,
        };
        nan(a) && nan(b)
    }

    /// One benchmark: a chain of nodes of `op`, each reading the previous output as input
    /// `slot` (the others are the constants given), and the bytes one node moves.
    struct Bench {
        name: &'static str,
        op: &'static str,
        attrs: Vec<onyx_core::ir::Attribute>,
        x: Tensor,
        slot: usize,
        others: Vec<Tensor>,
        bytes: f64,
    }

    /// A model chaining `n` nodes of `b`.
    fn chain(b: &Bench, n: usize) -> onyx_core::ir::Model {
        use onyx_core::ir::{Graph, Model, Node};
        use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
        let mut graph = Graph::default();
        let shape = b.x.shape().iter().map(|&d| Dim::Fixed(d)).collect();
        graph
            .inputs
            .push(ValueInfo::new("x", ValueType::Tensor(TensorType { dtype: b.x.dtype(), shape: Some(shape) })));
        for (i, c) in b.others.iter().enumerate() {
            graph.initializers.insert(format!("c{i}"), c.clone());
        }
        let mut prev = "x".to_string();
        for k in 0..n {
            let mut inputs: Vec<String> = (0..b.others.len()).map(|i| format!("c{i}")).collect();
            inputs.insert(b.slot, prev.clone());
            let out = format!("y{k}");
            let node = Node {
                name: format!("n{k}"),
                op_type: b.op.into(),
                attributes: b.attrs.clone(),
                inputs,
                outputs: vec![out.clone()],
                ..Default::default()
            };
            graph.nodes.push(node);
            prev = out;
        }
        graph.outputs.push(ValueInfo::new(prev, ValueType::Unknown));
        let mut model = Model { ir_version: 10, graph, ..Default::default() };
        model.opsets.insert(String::new(), 21);
        model
    }

    /// Seconds per run of a chain of `n` nodes of `b` (best of several runs after a warm-up).
    fn time_chain(gpu: &Arc<crate::WgpuProvider>, b: &Bench, n: usize) -> f64 {
        let options = onyx_core::SessionOptions { providers: vec![gpu.clone()], ..Default::default() };
        let session = onyx_core::Session::new(chain(b, n), options).unwrap();
        let feed = || vec![("x".to_string(), onyx_core::InputValue::Value(onyx_core::Value::Tensor(b.x.clone())))];
        for _ in 0..2 {
            session.run(feed()).unwrap();
        }
        (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                session.run(feed()).unwrap();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    }

    /// Per-node time and bandwidth of the data-movement kernels on large tensors (ignored:
    /// `cargo test -p onyx-wgpu bench_data_movement -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn bench_data_movement() {
        let Some(gpu) = provider() else { return };
        let f32s = |shape: &[usize]| random(DataType::Float, shape, 1);
        let n16 = 1usize << 24;
        let mut perm: Vec<i64> = (0..32768).collect();
        fastrand::Rng::with_seed(2).shuffle(&mut perm);
        let benches = vec![
            Bench {
                name: "Relu f32 16M (baseline)",
                op: "Relu",
                attrs: vec![],
                x: f32s(&[n16]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 2-D f32 4096x4096",
                op: "Transpose",
                attrs: vec![],
                x: f32s(&[4096, 4096]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 0213 f32 16x512x16x128",
                op: "Transpose",
                attrs: vec![ints("perm", &[0, 2, 1, 3])],
                x: f32s(&[16, 512, 16, 128]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 0213 f16 16x512x16x128",
                op: "Transpose",
                attrs: vec![ints("perm", &[0, 2, 1, 3])],
                x: random(DataType::Float16, &[16, 512, 16, 128], 1),
                slot: 0,
                others: vec![],
                bytes: 4.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 3-D f32 256x256x256 (2,0,1)",
                op: "Transpose",
                attrs: vec![ints("perm", &[1, 2, 0])],
                x: f32s(&[256, 256, 256]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Gather f32 rows 32768x512 int64",
                op: "Gather",
                attrs: vec![],
                x: f32s(&[32768, 512]),
                slot: 0,
                others: vec![t(&[32768], perm)],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Where f32 16M",
                op: "Where",
                attrs: vec![],
                x: f32s(&[n16]),
                slot: 1,
                others: vec![random(DataType::Bool, &[n16], 3), f32s(&[n16])],
                bytes: 9.0 * n16 as f64,
            },
            Bench {
                name: "Pad edge f32 4096x4095 (+1 / -1)",
                op: "Pad",
                attrs: vec![string("mode", "edge")],
                x: f32s(&[4096, 4095]),
                slot: 0,
                others: vec![i64s(&[0, 1, 0, -1])],
                bytes: 8.0 * (4096.0 * 4095.0),
            },
            Bench {
                name: "Tile f32 4096x4096 (repeats 1)",
                op: "Tile",
                attrs: vec![],
                x: f32s(&[4096, 4096]),
                slot: 0,
                others: vec![i64s(&[1, 1])],
                bytes: 8.0 * n16 as f64,
            },
        ];
        let benches: Vec<Bench> = benches
            .into_iter()
            .chain([
                Bench {
                    name: "Slice 1-D f32 [1:]",
                    op: "Slice",
                    attrs: vec![],
                    x: f32s(&[n16 + 50]),
                    slot: 0,
                    others: vec![i64s(&[1]), i64s(&[i64::MAX])],
                    bytes: 8.0 * n16 as f64,
                },
                Bench {
                    name: "Add f32 16M + scalar (other family)",
                    op: "Add",
                    attrs: vec![],
                    x: f32s(&[n16]),
                    slot: 0,
                    others: vec![f32s(&[1])],
                    bytes: 8.0 * n16 as f64,
                },
            ])
            .collect();
        eprintln!("adapter: {:?}", gpu.context().unwrap().adapter_info());
        let extra = 40;
        for b in &benches {
            let (t1, tn) = (time_chain(&gpu, b, 1), time_chain(&gpu, b, 1 + extra));
            let per = (tn - t1) / extra as f64;
            eprintln!(
                "{:<48} {:>9.1} us/node {:>8.1} GB/s  (chain of 1: {:.2} ms)",
                b.name,
                per * 1e6,
                b.bytes / per / 1e9,
                t1 * 1e3
            );
        }
    }
}
