//! NchwcConv against the plain NCHW Conv kernel (with FusedConv's epilogue) on random data, on
//! every path this CPU runs, for blocks 16 and 8 (and odd blocks on the scalar path).

use onyx_core::ep::ValueRef;
use onyx_core::ir::{AttrValue, Node};
use onyx_core::{Tensor, Value};

use super::direct::{EvenTiles, Split, PARTIAL_TILE};
use super::*;
use crate::ops::conv::conv_for;
use crate::ops::layout::testkit::rand_f32;
use crate::ops::matmul::test_support::{assert_close, ints, node, string};

/// `x` (`[n, c, h, w]`) in the blocked layout, padding channels set to `pad`.
fn block(x: &[f32], [n, c, h, w]: [usize; 4], b: usize, pad: f32) -> Vec<f32> {
    let blocks = c.div_ceil(b);
    let mut out = vec![pad; n * blocks * h * w * b];
    for (i, &v) in x.iter().enumerate() {
        let (p, ch, img) = (i % (h * w), i / (h * w) % c, i / (c * h * w));
        out[((img * blocks + ch / b) * h * w + p) * b + ch % b] = v;
    }
    out
}

/// The blocked `y` back in NCHW `[n, c, h, w]`.
fn unblock(y: &[f32], [n, c, h, w]: [usize; 4], b: usize) -> Vec<f32> {
    let blocks = c.div_ceil(b);
    (0..n * c * h * w)
        .map(|i| {
            let (p, ch, img) = (i % (h * w), i / (h * w) % c, i / (c * h * w));
            y[((img * blocks + ch / b) * h * w + p) * b + ch % b]
        })
        .collect()
}

/// One convolution to check.
#[derive(Clone, Debug)]
struct Case {
    batch: usize,
    c_in: usize,
    c_out: usize,
    hw: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    /// Top, left, bottom, right.
    pads: [usize; 4],
    depthwise: bool,
    /// X given in plain NCHW.
    nchw_input: bool,
    bias: bool,
    residual: bool,
    activation: &'static str,
    params: Vec<f32>,
}

impl Case {
    fn new(c_in: usize, c_out: usize, hw: [usize; 2], kernel: [usize; 2], stride: usize, pad: usize) -> Self {
        Case {
            batch: 1,
            c_in,
            c_out,
            hw,
            kernel,
            strides: [stride; 2],
            dilations: [1; 2],
            pads: [pad; 4],
            depthwise: false,
            nchw_input: false,
            bias: true,
            residual: false,
            activation: "Relu",
            params: vec![],
        }
    }

    fn group(&self) -> usize {
        if self.depthwise {
            self.c_in
        } else {
            1
        }
    }

    fn out_hw(&self) -> [usize; 2] {
        std::array::from_fn(|i| {
            let span = self.hw[i] + self.pads[i] + self.pads[i + 2];
            (span - (self.kernel[i] - 1) * self.dilations[i] - 1) / self.strides[i] + 1
        })
    }

    /// The window attributes shared by the Conv and the NchwcConv node.
    fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        vec![
            ("kernel_shape", ints(&as_i64(&self.kernel))),
            ("strides", ints(&as_i64(&self.strides))),
            ("dilations", ints(&as_i64(&self.dilations))),
            ("pads", ints(&as_i64(&self.pads))),
            ("group", AttrValue::Int(self.group() as i64)),
        ]
    }

    fn nchwc_node(&self, b: usize) -> Node {
        let mut attrs = self.attrs();
        attrs.push(("block", AttrValue::Int(b as i64)));
        if !self.activation.is_empty() {
            attrs.push(("activation", string(self.activation)));
            attrs.push(("activation_params", AttrValue::Floats(self.params.clone())));
        }
        node("NchwcConv", &["x", "w", if self.bias { "b" } else { "" }, if self.residual { "z" } else { "" }], 1, attrs)
    }

    /// Random inputs: X `[n, c_in, h, w]`, W, B, Z `[n, c_out, oh, ow]`.
    fn inputs(&self, seed: u64) -> [Vec<f32>; 4] {
        let [h, w] = self.hw;
        let [oh, ow] = self.out_hw();
        let per_group = self.c_in / self.group();
        let scale = |v: Vec<f32>, s: f32| v.into_iter().map(|x| x * s).collect::<Vec<_>>();
        [
            scale(rand_f32(self.batch * self.c_in * h * w, seed), 0.1),
            scale(rand_f32(self.c_out * per_group * self.kernel[0] * self.kernel[1], seed + 1), 0.1),
            scale(rand_f32(self.c_out, seed + 2), 0.1),
            scale(rand_f32(self.batch * self.c_out * oh * ow, seed + 3), 0.1),
        ]
    }

    /// The plain Conv kernel, its inputs and the activation.
    fn reference(&self, [x, w, b, z]: &[Vec<f32>; 4]) -> (crate::ops::conv::ConvOp, [Value; 4], Activation) {
        let [h, wd] = self.hw;
        let [oh, ow] = self.out_hw();
        let conv = conv_for(&node("Conv", &["x", "w", "b"], 1, self.attrs())).unwrap();
        let per_group = self.c_in / self.group();
        let tensor = |shape: Vec<usize>, v: &Vec<f32>| Value::Tensor(Tensor::from_vec(shape, v.clone()).unwrap());
        let values = [
            tensor(vec![self.batch, self.c_in, h, wd], x),
            tensor(vec![self.c_out, per_group, self.kernel[0], self.kernel[1]], w),
            tensor(vec![self.c_out], b),
            tensor(vec![self.batch, self.c_out, oh, ow], z),
        ];
        (conv, values, Activation::from_node(&self.nchwc_node(16)).unwrap())
    }

    /// Runs the plain Conv kernel of [`Case::reference`].
    fn run_reference(
        &self,
        conv: &crate::ops::conv::ConvOp,
        [x, w, b, z]: &[Value; 4],
        activation: Activation,
    ) -> Value {
        let inputs = [Some(ValueRef::Value(x)), Some(ValueRef::Value(w)), self.bias.then_some(ValueRef::Value(b))];
        conv.run_with(&inputs, self.residual.then_some((3, ValueRef::Value(z))), activation).unwrap()
    }

    /// The plain Conv kernel's output (NCHW).
    fn expected(&self, inputs: &[Vec<f32>; 4]) -> Vec<f64> {
        let (conv, values, activation) = self.reference(inputs);
        let y = self.run_reference(&conv, &values, activation);
        y.as_tensor().unwrap().as_slice::<f32>().unwrap().iter().map(|&v| f64::from(v)).collect()
    }

    /// The NchwcConv kernel with block `b` and its inputs (X blocked, its padding channels NaN:
    /// a kernel that read them would spread NaN into real channels, unless X is NCHW).
    fn prepare(
        &self,
        [x, w, b_, z]: &[Vec<f32>; 4],
        b: usize,
        path: Path,
        bias_constant: bool,
    ) -> (NchwcConv, Vec<Option<Value>>) {
        let [h, wd] = self.hw;
        let [oh, ow] = self.out_hw();
        let per_group = self.c_in / self.group();
        let w = Tensor::from_vec(vec![self.c_out, per_group, self.kernel[0], self.kernel[1]], w.clone()).unwrap();
        let mut conv = NchwcConv::new(&self.nchwc_node(b), Some(w.view().unwrap()), |_| path).unwrap();
        let x = if self.nchw_input {
            Tensor::from_vec(vec![self.batch, self.c_in, h, wd], x.clone())
        } else {
            let blocked = block(x, [self.batch, self.c_in, h, wd], b, f32::NAN);
            Tensor::from_vec(vec![self.batch, self.c_in.div_ceil(b), h, wd, b], blocked)
        };
        let out_shape = vec![self.batch, self.c_out.div_ceil(b), oh, ow, b];
        let z = Tensor::from_vec(out_shape, block(z, [self.batch, self.c_out, oh, ow], b, 0.0)).unwrap();
        let bias = Tensor::from_vec(vec![self.c_out], b_.clone()).unwrap();
        if self.bias && bias_constant {
            conv.bias = Some(pad_bias(b_, b));
        }
        let values = vec![
            Some(Value::Tensor(x.unwrap())),
            None,
            self.bias.then(|| Value::Tensor(bias)),
            self.residual.then(|| Value::Tensor(z)),
        ];
        (conv, values)
    }

    /// NchwcConv's output on `path` with block `b`, back in NCHW; checks that padding channels
    /// of a dense convolution's output are finite.
    fn run(&self, inputs: &[Vec<f32>; 4], b: usize, path: Path, bias_constant: bool) -> Vec<f32> {
        let (conv, values) = self.prepare(inputs, b, path, bias_constant);
        let [oh, ow] = self.out_hw();
        let y = run_values(&conv, &values);
        let y = y.as_tensor().unwrap();
        assert_eq!(y.shape(), [self.batch, self.c_out.div_ceil(b), oh, ow, b]);
        let y = y.as_slice::<f32>().unwrap();
        if !self.depthwise {
            assert!(y.iter().all(|v| v.is_finite()), "{self:?}: non-finite values (padding channels included)");
        }
        unblock(y, [self.batch, self.c_out, oh, ow], b)
    }

    /// Checks every path this CPU runs for block `b`.
    fn check(&self, b: usize, seed: u64) {
        let inputs = self.inputs(seed);
        let want = self.expected(&inputs);
        for path in [Path::Avx512, Path::Avx2, Path::Portable, Path::Scalar] {
            if path.runs(b) {
                let got = self.run(&inputs, b, path, seed % 2 == 0);
                assert_close(&got, &want, 1e-4, &format!("{path:?} block {b} {self:?}"));
            }
        }
    }
}

/// Runs `conv` on `values`.
fn run_values(conv: &NchwcConv, values: &[Option<Value>]) -> Value {
    let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| v.as_ref().map(ValueRef::Value)).collect();
    conv.run_on(&refs).unwrap()
}

/// Dense cases: resnet-like 3x3 and strided ones, the 7x7 stem from plain NCHW, pointwise
/// (long flattened rows cut into segments), dilations, asymmetric pads, 1x1 maps, channel
/// counts that are not multiples of the block.
fn dense_cases() -> Vec<Case> {
    let mut cases = vec![
        Case::new(17, 40, [13, 11], [3, 3], 1, 1),
        Case { batch: 2, ..Case::new(24, 33, [14, 9], [3, 3], 2, 1) },
        Case { nchw_input: true, activation: "", ..Case::new(3, 24, [23, 19], [7, 7], 2, 3) },
        Case { nchw_input: true, ..Case::new(20, 18, [9, 8], [3, 3], 1, 1) },
        Case { residual: true, ..Case::new(40, 70, [9, 13], [1, 1], 1, 0) },
        Case { residual: true, bias: false, activation: "", ..Case::new(64, 96, [15, 15], [1, 1], 1, 0) },
        Case::new(16, 16, [7, 7], [1, 1], 2, 0),
        Case { residual: true, ..Case::new(20, 16, [9, 13], [1, 1], 1, 0) },
        // More input blocks than one chunk of a tile, the last one partial.
        Case { residual: true, ..Case::new(150, 20, [5, 7], [1, 1], 1, 0) },
        Case::new(7, 30, [5, 61], [3, 3], 1, 1),
        Case {
            dilations: [2, 2],
            pads: [2, 1, 0, 2],
            activation: "LeakyRelu",
            params: vec![0.2],
            ..Case::new(5, 9, [8, 10], [3, 3], 1, 0)
        },
        Case { residual: true, activation: "Sigmoid", ..Case::new(20, 18, [1, 1], [3, 3], 1, 1) },
        Case { strides: [2, 1], activation: "Clip", params: vec![0.0, 0.3], ..Case::new(8, 12, [11, 9], [5, 3], 1, 2) },
        Case { activation: "Tanh", ..Case::new(4, 6, [2, 2], [1, 1], 1, 2) },
        Case {
            residual: true,
            activation: "HardSigmoid",
            params: vec![0.5, 0.4],
            ..Case::new(33, 65, [6, 71], [3, 3], 1, 1)
        },
        // Tiles spanning rows: narrower than a tile (each tile over several rows), a 7x7 map
        // (rows of 7 into tiles of 6), strided; several chunks of input blocks, the last partial.
        Case { residual: true, ..Case::new(70, 40, [3, 2], [3, 3], 1, 1) },
        Case { activation: "Clip", ..Case::new(70, 24, [7, 7], [3, 3], 1, 1) },
        Case { batch: 2, residual: true, activation: "Sigmoid", ..Case::new(41, 36, [14, 13], [3, 3], 2, 1) },
        // Plain NCHW inputs with fewer channels than a block (the stem form): row dilation,
        // uneven pads and strides; column dilation (read in place instead).
        Case {
            batch: 2,
            nchw_input: true,
            residual: true,
            dilations: [2, 1],
            pads: [1, 3, 2, 0],
            strides: [1, 2],
            ..Case::new(5, 20, [12, 17], [3, 5], 1, 0)
        },
        Case { nchw_input: true, dilations: [1, 2], ..Case::new(4, 9, [10, 11], [3, 3], 1, 1) },
    ];
    for c in &mut cases {
        if c.activation == "Clip" && c.params.is_empty() {
            c.params = vec![0.0, 6.0];
        }
    }
    cases
}

fn depthwise_cases() -> Vec<Case> {
    let dw = |c: usize, hw: [usize; 2], k: usize, stride: usize, pad: usize| Case {
        depthwise: true,
        ..Case::new(c, c, hw, [k, k], stride, pad)
    };
    vec![
        dw(40, [13, 29], 3, 1, 1),
        Case { batch: 2, residual: true, ..dw(24, [14, 14], 3, 2, 1) },
        Case { activation: "Clip", params: vec![0.0, 0.2], ..dw(7, [9, 12], 5, 1, 2) },
        Case { dilations: [2, 2], bias: false, ..dw(16, [10, 21], 3, 1, 2) },
        Case { pads: [1, 1, 1, 0], activation: "", ..dw(19, [1, 17], 3, 2, 0) },
    ]
}

#[test]
fn dense_matches_the_nchw_conv_on_every_path_and_block() {
    for (i, case) in dense_cases().iter().enumerate() {
        for b in [16, 8, 5] {
            case.check(b, 10 * i as u64 + b as u64);
        }
    }
}

#[test]
fn depthwise_matches_the_nchw_conv_on_every_path_and_block() {
    for (i, case) in depthwise_cases().iter().enumerate() {
        for b in [16, 8, 3] {
            case.check(b, 100 + 10 * i as u64 + b as u64);
        }
    }
}

#[test]
fn row_runs_are_cut_into_even_tiles_the_kernels_have() {
    for full in [3, 4, 6, 8, 12, 24] {
        for run in 0..80 {
            let mut even = EvenTiles::new(run, full);
            let sizes: Vec<usize> = std::iter::from_fn(|| (even.left > 0).then(|| even.next())).collect();
            assert_eq!(sizes.iter().sum::<usize>(), run, "{run} by {full}: {sizes:?}");
            assert!(
                sizes.iter().all(|&s| s == full || (1..=PARTIAL_TILE.min(full)).contains(&s)),
                "{run} by {full}: {sizes:?}"
            );
            let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
            assert!(hi.zip(lo).is_none_or(|(h, l)| h - l <= 1), "{run} by {full}: {sizes:?}");
        }
    }
}

#[test]
fn work_is_split_into_disjoint_items_covering_the_output() {
    let items = Items::new(2, 3, 7, 3, 10, 4);
    let mut seen = vec![0u8; 2 * 3 * 7 * 10];
    for i in 0..items.count() {
        let (n, g, rows, cols) = items.decode(i);
        for r in rows {
            for c in cols.clone() {
                seen[((n * 3 + g) * 7 + r) * 10 + c] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&s| s == 1));
}

#[test]
fn row_segments_are_even_whole_tiles() {
    // (pixel bytes, grain, groups, rows, cols, wanted): mobilenet_v2's 960->320 pointwise
    // conv at 7x7 (one flattened row of 49 pixels, 5 groups of 4 blocks of 16) on 2 threads;
    // long flattened rows of 8-pixel tiles; a 56-wide map; a 7x7 map on 16 threads.
    for (pixel_bytes, grain, groups, rows, cols, wanted) in [
        (256, 1, 5, 1, 49, 8),
        (192, 8, 2, 1, 12544, 8),
        (64, 24, 1, 1, 3136, 64),
        (256, 1, 1, 56, 56, 8),
        (256, 1, 8, 7, 7, 64),
    ] {
        let items = Split { pixel_bytes, grain, shortest: 24, wanted }.items(1, groups, rows, cols);
        let mut seen = vec![0u8; groups * rows * cols];
        let mut lengths = Vec::new();
        for i in 0..items.count() {
            let (_, g, rs, cs) = items.decode(i);
            if cs.end < cols {
                assert_eq!(cs.len() % grain, 0, "{cols} pixels by {grain}: {cs:?}");
            }
            assert!(cs.len() * pixel_bytes <= ITEM_BYTES + grain * pixel_bytes || cs.len() == cols, "{cs:?}");
            lengths.push(cs.len());
            for r in rs {
                cs.clone().for_each(|c| seen[(g * rows + r) * cols + c] += 1);
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{cols} pixels: items overlap or miss pixels");
        let (lo, hi) = (lengths.iter().min().unwrap(), lengths.iter().max().unwrap());
        assert!(hi - lo <= grain.max(1) || *lo >= 24, "{cols} pixels by {grain}: segments {lo}..{hi}");
    }
    // The 7x7 pointwise conv: two segments of 25 and 24 pixels (not 24 + 24 + 1).
    let items = Split { pixel_bytes: 256, grain: 1, shortest: 24, wanted: 8 }.items(1, 5, 1, 49);
    assert_eq!(items.count(), 10);
}

#[test]
fn block_groups_are_even_and_cover_every_block_once() {
    for blocks in 1..30 {
        for max in 1..5 {
            let g = BlockGroups::new(blocks, max);
            let mut next = 0;
            for i in 0..g.count {
                let (first, count) = g.group(i);
                assert_eq!(first, next);
                assert!((1..=max).contains(&count) && count + 1 >= g.widest(), "{blocks} by {max}: {count}");
                next += count;
            }
            assert_eq!(next, blocks);
            for block in 0..blocks {
                let (first, count) = g.of_block(block);
                assert!(
                    (first..first + count).contains(&block)
                        && g.group((0..g.count).find(|&i| g.group(i).0 == first).unwrap()) == (first, count)
                );
            }
        }
    }
    assert_eq!((BlockGroups::new(6, 4).group(0), BlockGroups::new(6, 4).group(1)), ((0, 3), (3, 3)));
}

/// Building and running with bad input gives errors that name the problem.
#[test]
fn bad_input_is_an_error_naming_it() {
    let case = Case::new(17, 40, [5, 5], [3, 3], 1, 1);
    let w = Tensor::from_vec(vec![40, 17, 3, 3], vec![0.5f32; 40 * 17 * 9]).unwrap();
    let err = |n: &Node, w: Option<&Tensor>| {
        NchwcConv::new(n, w.map(|w| w.view().unwrap()), Path::best).unwrap_err().to_string()
    };
    assert!(err(&case.nchwc_node(16), None).contains("constant weights"));
    let mut grouped = case.nchwc_node(16);
    grouped.attributes.retain(|a| a.name != "group");
    grouped.attributes.push(onyx_core::ir::Attribute { name: "group".into(), value: AttrValue::Int(2) });
    assert!(err(&grouped, Some(&w)).contains("'group'"));
    let mut no_block = case.nchwc_node(16);
    no_block.attributes.retain(|a| a.name != "block");
    assert!(err(&no_block, Some(&w)).contains("'block'"));
    let mut same = case.nchwc_node(16);
    same.attributes.push(onyx_core::ir::Attribute { name: "auto_pad".into(), value: string("SAME_UPPER") });
    assert!(err(&same, Some(&w)).contains("auto_pad"));

    let conv = NchwcConv::new(&case.nchwc_node(16), Some(w.view().unwrap()), |_| Path::Scalar).unwrap();
    let run = |x: Tensor, z: Option<Tensor>| {
        let values = [Some(Value::Tensor(x)), None, None, z.map(Value::Tensor)];
        let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| v.as_ref().map(ValueRef::Value)).collect();
        conv.run_on(&refs).unwrap_err().to_string()
    };
    let e = run(Tensor::from_vec(vec![1, 1, 5, 5, 16], vec![0.0f32; 400]).unwrap(), None);
    assert!(e.contains("[N, 2, H, W, 16]") && e.contains("[1, 1, 5, 5, 16]"), "{e}");
    let e = run(Tensor::from_vec(vec![1, 2, 5, 5, 8], vec![0.0f32; 400]).unwrap(), None);
    assert!(e.contains("[N, 2, H, W, 16]"), "{e}");
    let x = Tensor::from_vec(vec![1, 2, 5, 5, 16], vec![0.0f32; 800]).unwrap();
    let e = run(x.clone(), Some(Tensor::from_vec(vec![1, 3, 5, 4, 16], vec![0.0f32; 960]).unwrap()));
    assert!(e.contains("residual") && e.contains("[1, 3, 5, 5, 16]"), "{e}");
    let e = run(Tensor::from_vec(vec![1, 16, 5, 5], vec![0.0f32; 400]).unwrap(), None);
    assert!(e.contains("NCHW [N, 17, H, W]"), "{e}");
}

/// Timings of NchwcConv against the NCHW Conv at resnet18 and mobilenet_v2 shapes (a
/// measurement aid, not a test: `cargo test -p onyx-cpu --lib nchwc_timings -- --ignored
/// --nocapture`).
#[test]
#[ignore]
fn nchwc_timings() {
    let time = |f: &mut dyn FnMut()| {
        f();
        let start = std::time::Instant::now();
        let mut runs = 0;
        while start.elapsed().as_millis() < 300 {
            f();
            runs += 1;
        }
        start.elapsed().as_secs_f64() * 1e3 / runs as f64
    };
    let dw =
        |c: usize, hw: usize, stride: usize| Case { depthwise: true, ..Case::new(c, c, [hw, hw], [3, 3], stride, 1) };
    let cases = [
        ("stem 3->64 7x7/2 224", Case { nchw_input: true, ..Case::new(3, 64, [224, 224], [7, 7], 2, 3) }),
        ("3x3 64 56", Case::new(64, 64, [56, 56], [3, 3], 1, 1)),
        ("3x3 128 28", Case::new(128, 128, [28, 28], [3, 3], 1, 1)),
        ("3x3 256 14", Case::new(256, 256, [14, 14], [3, 3], 1, 1)),
        ("3x3 512 7", Case::new(512, 512, [7, 7], [3, 3], 1, 1)),
        ("1x1/2 128->256 28", Case::new(128, 256, [28, 28], [1, 1], 2, 0)),
        ("pw 16->96 112", Case::new(16, 96, [112, 112], [1, 1], 1, 0)),
        ("pw 24->144 56", Case::new(24, 144, [56, 56], [1, 1], 1, 0)),
        ("pw 320->1280 7", Case::new(320, 1280, [7, 7], [1, 1], 1, 0)),
        ("pw 144->24 56 +z", Case { residual: true, ..Case::new(144, 24, [56, 56], [1, 1], 1, 0) }),
        ("pw 32->16 112", Case::new(32, 16, [112, 112], [1, 1], 1, 0)),
        ("dw 96 112 /2", dw(96, 112, 2)),
        ("dw 144 56", dw(144, 56, 1)),
        ("dw 960 7", dw(960, 7, 1)),
    ];
    let b = if Path::best(16) == Path::Avx512 { 16 } else { 8 };
    for (name, case) in cases {
        let inputs = case.inputs(1);
        let (conv, values, activation) = case.reference(&inputs);
        let nchw = time(&mut || {
            case.run_reference(&conv, &values, activation);
        });
        let (conv, values) = case.prepare(&inputs, b, Path::best(b), true);
        let blocked = time(&mut || {
            run_values(&conv, &values);
        });
        println!("{name:24} nchw {nchw:7.3} ms  nchwc {blocked:7.3} ms  ratio {:.2}", blocked / nchw);
    }
}
