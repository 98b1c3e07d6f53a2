//! Matrix products: MatMul (numpy semantics, batched with broadcasting), Gemm (and Onyx's
//! FusedGemm: Gemm then an activation) and MatMulInteger, Einsum ([`einsum`]), plus the GEMM helper ([`gemm::gemm`]) and float plumbing ([`real`]) that the
//! conv, pool and norm families share. A float MatMul or Gemm by a constant B runs on B packed
//! once at build ([`packed`]).

mod einsum;
pub(crate) mod gemm;
pub(crate) mod packed;
pub(crate) mod real;
#[cfg(test)]
pub(crate) mod test_support;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{element_count, DataType, Element, Error, Location, Result, TensorView, Value};

use self::gemm::{MatMut, MatRef, PARALLEL_WORK};
use self::packed::{Isa, PackedB};
use self::real::{compute_type, filled, float_output, float_slice, overwritten, zeroed, Real};
use crate::ops::contrib::{Activation, GeluKind};
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("MatMul", build_matmul);
    r.add("Gemm", build_gemm);
    r.add_in(onyx_core::ir::ONYX_DOMAIN, "FusedGemm", build_fused_gemm);
    r.add("MatMulInteger", build_matmul_integer);
    r.add("Einsum", einsum::build_einsum);
}

/// Integer element types the integer products compute in (wrapping on overflow).
pub(crate) trait IntElem: Element + Copy + Default {
    /// Wrapping addition.
    fn wadd(self, o: Self) -> Self;
    /// Wrapping multiplication.
    fn wmul(self, o: Self) -> Self;
    /// To f64 (for Gemm's float alpha and beta).
    fn to_f64(self) -> f64;
    /// From f64, saturating.
    fn from_f64(x: f64) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl IntElem for $t {
            fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
            fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(x: f64) -> Self { x as $t }
        }
    )*};
}
int_elem!(i32, i64, u32, u64);

/// How a MatMul of two shapes maps onto 2-D products: `m x k` by `k x n`, once per batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MatMulPlan {
    /// Rows of each product.
    pub m: usize,
    /// Inner dimension.
    pub k: usize,
    /// Columns of each product.
    pub n: usize,
    /// Shape of the result.
    pub out_shape: Vec<usize>,
    /// Element offsets of A's and B's matrix for each output batch, in order.
    pub offsets: Vec<(usize, usize)>,
}

impl MatMulPlan {
    /// Plans `a @ b` with numpy semantics: 1-D operands get a dimension added (and removed from
    /// the result), batch dimensions broadcast. Errors name both shapes.
    pub fn new(a: &[usize], b: &[usize], at: &Location) -> Result<Self> {
        if a.is_empty() || b.is_empty() {
            return Err(Error::node(at, format!("cannot multiply shapes {a:?} and {b:?}: scalars are not matrices")));
        }
        let a2: Vec<usize> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
        let b2: Vec<usize> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
        let (ab, am) = a2.split_at(a2.len() - 2);
        let (bb, bm) = b2.split_at(b2.len() - 2);
        let (m, k, kb, n) = (am[0], am[1], bm[0], bm[1]);
        if k != kb {
            return Err(Error::node(
                at,
                format!("cannot multiply shapes {a:?} and {b:?}: A has {k} columns but B has {kb} rows"),
            ));
        }
        let batch = super::broadcast::broadcast_shapes(ab, bb).ok_or_else(|| {
            Error::node(at, format!("cannot multiply shapes {a:?} and {b:?}: batch dimensions do not broadcast"))
        })?;
        let offsets = batch_offsets(&batch, ab, bb, m * k, k * n);
        let mut out_shape = batch;
        if a.len() > 1 {
            out_shape.push(m);
        }
        if b.len() > 1 {
            out_shape.push(n);
        }
        Ok(MatMulPlan { m, k, n, out_shape, offsets })
    }

    /// Number of products.
    fn batches(&self) -> usize {
        self.offsets.len()
    }

    /// True when B is one matrix shared by every batch and A's batches are consecutive: then
    /// the whole product is one `(batches * m) x k` by `k x n` GEMM.
    fn folds(&self) -> bool {
        self.offsets.iter().enumerate().all(|(i, &(ao, bo))| bo == 0 && ao == i * self.m * self.k)
    }
}

/// Element offsets of A's and B's matrices for every index of the broadcast batch shape.
fn batch_offsets(batch: &[usize], ab: &[usize], bb: &[usize], a_mat: usize, b_mat: usize) -> Vec<(usize, usize)> {
    let strides_of = |s: &[usize], mat: usize| -> Vec<usize> {
        let own = util::strides(s);
        (0..batch.len())
            .map(|i| match (i + s.len()).checked_sub(batch.len()) {
                Some(j) if s[j] != 1 => own[j] * mat,
                _ => 0,
            })
            .collect()
    };
    let (sa, sb) = (strides_of(ab, a_mat), strides_of(bb, b_mat));
    let count: usize = batch.iter().product();
    let mut idx = vec![0usize; batch.len()];
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let ao = idx.iter().zip(&sa).map(|(i, s)| i * s).sum();
        let bo = idx.iter().zip(&sb).map(|(i, s)| i * s).sum();
        out.push((ao, bo));
        for d in (0..batch.len()).rev() {
            idx[d] += 1;
            if idx[d] < batch[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Float MatMul on a plan: `a` and `b` hold the operands' elements in row-major order.
pub(crate) fn matmul_float<T: Real>(a: &[T], b: &[T], plan: &MatMulPlan) -> Result<Vec<T>> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let mut out = zeroed(element_count(&plan.out_shape)?)?;
    if plan.folds() {
        let rows = plan.batches() * m;
        return gemm::gemm(
            T::ONE,
            MatRef::row_major(a, rows, k),
            MatRef::row_major(b, k, n),
            T::ZERO,
            MatMut::row_major(&mut out, rows, n),
        )
        .map(|_| out);
    }
    let one = |(c, &(ao, bo)): (&mut [T], &(usize, usize)), parallel: bool| -> Result<()> {
        let am = MatRef::row_major(a.get(ao..).unwrap_or_default(), m, k);
        let bm = MatRef::row_major(b.get(bo..).unwrap_or_default(), k, n);
        let cm = MatMut::row_major(c, m, n);
        if parallel {
            gemm::gemm(T::ONE, am, bm, T::ZERO, cm)
        } else {
            gemm::gemm_serial(T::ONE, am, bm, T::ZERO, cm)
        }
    };
    let chunk = (m * n).max(1);
    let work = plan.batches().saturating_mul(m * n * k);
    if plan.batches() >= rayon::current_num_threads() && work >= PARALLEL_WORK {
        crate::parallel::try_for_each_chunk_mut(&mut out, chunk, &|i, c| one((c, &plan.offsets[i]), false))?;
    } else {
        out.chunks_mut(chunk).zip(plan.offsets.iter()).try_for_each(|pair| one(pair, true))?;
    }
    Ok(out)
}

/// `c (m x n) = a (m x k) * b (k x n)` for integers, wrapping on overflow (naive, row by row).
fn int_product<T: IntElem>(a: MatRef<'_, T>, b: MatRef<'_, T>, c: &mut [T]) {
    let n = b.cols;
    for (i, row) in c.chunks_mut(n.max(1)).take(a.rows).enumerate() {
        row.fill(T::default());
        for p in 0..a.cols {
            let x = a.data[i * a.rs + p * a.cs];
            let b_row = &b.data[p * b.rs..];
            for (j, y) in row.iter_mut().enumerate() {
                *y = y.wadd(x.wmul(b_row[j * b.cs]));
            }
        }
    }
}

/// Integer MatMul on a plan (wrapping arithmetic).
pub(crate) fn matmul_int<T: IntElem>(a: &[T], b: &[T], plan: &MatMulPlan) -> Result<Vec<T>> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let need_a = plan.offsets.iter().map(|o| o.0 + m * k).max().unwrap_or(0);
    let need_b = plan.offsets.iter().map(|o| o.1 + k * n).max().unwrap_or(0);
    if need_a > a.len() || need_b > b.len() {
        return Err(Error::InvalidArgument(format!(
            "matmul: operands of {} and {} elements are too short for the plan",
            a.len(),
            b.len()
        )));
    }
    let mut out = filled(element_count(&plan.out_shape)?, T::default())?;
    for (c, &(ao, bo)) in out.chunks_mut((m * n).max(1)).zip(&plan.offsets) {
        int_product(MatRef::row_major(&a[ao..], m, k), MatRef::row_major(&b[bo..], k, n), c);
    }
    Ok(out)
}

fn same_dtype(a: &TensorView<'_>, b: &TensorView<'_>, index: usize, at: &Location) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::input(at, index, format!("{} like input 0", a.dtype()), b.dtype().name()));
    }
    Ok(())
}

fn unsupported_dtype(at: &Location, dtype: DataType) -> Error {
    Error::input(at, 0, "a float, double, float16, bfloat16 or 32/64-bit integer tensor", dtype.name())
}

/// MatMul: numpy-style matrix product.
struct MatMulOp {
    at: Location,
    /// A constant 2-D float B (float, float16 or bfloat16), packed.
    packed: Option<PackedB>,
}

fn build_matmul(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let packed = ctx.constant(1).map(|b| pack_constant(&b.view()?, false, 1.0)).transpose();
    Ok(Box::new(MatMulOp { packed: packed.map_err(|e| e.at(&at))?.flatten(), at }))
}

/// A constant B packed for [`PackedB`] when it is a 2-D tensor computed in f32 (`transposed`:
/// Gemm's transB), times `scale`; `None` for other constants.
fn pack_constant(b: &TensorView<'_>, transposed: bool, scale: f32) -> Result<Option<PackedB>> {
    let &[rows, cols] = b.shape() else { return Ok(None) };
    if compute_type(b.dtype()) != Some(DataType::Float) {
        return Ok(None);
    }
    let data = float_slice::<f32>(b)?;
    PackedB::new(MatRef::row_major(&data, rows, cols).t_if(transposed), scale, Isa::best()).map(Some)
}

/// `a (rows x k) * packed (+ bias)` for an A computed in f32, with `a`'s dtype.
fn packed_product(
    packed: &PackedB,
    a: &TensorView<'_>,
    rows: usize,
    bias: Option<&[f32]>,
    shape: Vec<usize>,
) -> Result<Value> {
    let a32 = float_slice::<f32>(a)?;
    let mut y = overwritten::<f32>(element_count(&shape)?)?;
    packed.matmul(&a32, rows, bias, &mut y)?;
    float_output(a.dtype(), shape, y)
}

impl MatMulOp {
    fn run_float<T: Real>(&self, a: &TensorView<'_>, b: &TensorView<'_>, plan: &MatMulPlan) -> Result<Value> {
        if let Some(packed) = &self.packed {
            let same_b = b.shape() == [packed.k(), packed.n()];
            if same_b && T::DTYPE == DataType::Float && plan.folds() {
                let rows = plan.batches() * plan.m;
                return packed_product(packed, a, rows, None, plan.out_shape.clone()).map_err(|e| e.at(&self.at));
            }
        }
        let y = matmul_float::<T>(&float_slice(a)?, &float_slice(b)?, plan).map_err(|e| e.at(&self.at))?;
        float_output(a.dtype(), plan.out_shape.clone(), y)
    }

    fn run_int<T: IntElem>(&self, a: &TensorView<'_>, b: &TensorView<'_>, plan: &MatMulPlan) -> Result<Value> {
        let y = matmul_int::<T>(a.as_slice()?, b.as_slice()?, plan).map_err(|e| e.at(&self.at))?;
        util::out(plan.out_shape.clone(), y)
    }
}

impl Kernel for MatMulOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let a = util::input(inputs, 0, &self.at)?;
        let b = util::input(inputs, 1, &self.at)?;
        same_dtype(&a, &b, 1, &self.at)?;
        let plan = MatMulPlan::new(a.shape(), b.shape(), &self.at)?;
        let y = match (compute_type(a.dtype()), a.dtype()) {
            (Some(DataType::Float), _) => self.run_float::<f32>(&a, &b, &plan)?,
            (Some(_), _) => self.run_float::<f64>(&a, &b, &plan)?,
            (None, DataType::Int32) => self.run_int::<i32>(&a, &b, &plan)?,
            (None, DataType::Int64) => self.run_int::<i64>(&a, &b, &plan)?,
            (None, DataType::Uint32) => self.run_int::<u32>(&a, &b, &plan)?,
            (None, DataType::Uint64) => self.run_int::<u64>(&a, &b, &plan)?,
            (None, other) => return Err(unsupported_dtype(&self.at, other)),
        };
        Ok(vec![y])
    }
}

/// Elements per parallel chunk of FusedGemm's activation.
const ACTIVATION_CHUNK: usize = 1 << 13;

/// Gemm: `Y = alpha * op(A) * op(B) + beta * C`.
struct GemmOp {
    at: Location,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
    /// A constant float B, as op(B) times alpha, packed.
    packed: Option<PackedB>,
    /// Applied to each output element (FusedGemm; float types only).
    activation: Activation,
}

fn build_gemm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(gemm_op(ctx, Activation::None)?))
}

/// FusedGemm: Gemm's inputs and attributes, then `activation` (and `activation_params`).
fn build_fused_gemm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(gemm_op(ctx, Activation::from_node(ctx.node)?)?))
}

fn gemm_op(ctx: &NodeContext<'_>, activation: Activation) -> Result<GemmOp> {
    let node = ctx.node;
    let mut op = GemmOp {
        at: node.location(),
        alpha: node.float_or("alpha", 1.0)?,
        beta: node.float_or("beta", 1.0)?,
        trans_a: node.int_or("transA", 0)? != 0,
        trans_b: node.int_or("transB", 0)? != 0,
        packed: None,
        activation,
    };
    if let Some(b) = ctx.constant(1) {
        op.packed = pack_constant(&b.view()?, op.trans_b, op.alpha).map_err(|e| e.at(&op.at))?;
    }
    Ok(op)
}

/// Gemm's sizes: (m, k, n) and the strides of C broadcast to `m x n` (0 on broadcast dims).
struct GemmDims {
    m: usize,
    k: usize,
    n: usize,
    c_strides: Option<(usize, usize)>,
}

impl GemmOp {
    fn dims(&self, a: &[usize], b: &[usize], c: Option<&[usize]>) -> Result<GemmDims> {
        let matrix = |s: &[usize], i: usize| match *s {
            [r, c] => Ok((r, c)),
            _ => Err(Error::input(&self.at, i, "a 2-D tensor", format!("shape {s:?}"))),
        };
        let (ar, ac) = matrix(a, 0)?;
        let (br, bc) = matrix(b, 1)?;
        let (m, k) = if self.trans_a { (ac, ar) } else { (ar, ac) };
        let (kb, n) = if self.trans_b { (bc, br) } else { (br, bc) };
        if k != kb {
            return Err(Error::node(
                &self.at,
                format!(
                    "cannot multiply A {a:?} (transA={}) by B {b:?} (transB={}): inner dimensions {k} and {kb} differ",
                    self.trans_a as u8, self.trans_b as u8
                ),
            ));
        }
        let c_strides = match c {
            Some(c) => Some(c_broadcast_strides(c, m, n).ok_or_else(|| {
                Error::input(&self.at, 2, format!("a shape broadcastable to [{m}, {n}]"), format!("shape {c:?}"))
            })?),
            None => None,
        };
        Ok(GemmDims { m, k, n, c_strides })
    }

    fn run_float<T: Real>(
        &self,
        a: &TensorView<'_>,
        b: &TensorView<'_>,
        c: Option<&TensorView<'_>>,
        d: &GemmDims,
    ) -> Result<Value> {
        let (m, k, n) = (d.m, d.k, d.n);
        if let Some(y) = self.run_packed::<T>(a, c, d)? {
            return Ok(y);
        }
        let (a_data, b_data) = (float_slice::<T>(a)?, float_slice::<T>(b)?);
        let beta = T::from_f32(self.beta);
        let mut y = zeroed(element_count(&[m, n])?)?;
        let mut gemm_beta = T::ZERO;
        if let (Some(c), Some((rs, cs)), true) = (c, d.c_strides, self.beta != 0.0) {
            let c_data = float_slice::<T>(c)?;
            fill_broadcast(&mut y, n, |i, j| beta * c_data[i * rs + j * cs]);
            gemm_beta = T::ONE;
        }
        let am = MatRef::row_major(&a_data[..], a.shape()[0], a.shape()[1]).t_if(self.trans_a);
        let bm = MatRef::row_major(&b_data[..], b.shape()[0], b.shape()[1]).t_if(self.trans_b);
        gemm::gemm(T::from_f32(self.alpha), am, bm, gemm_beta, MatMut::row_major(&mut y, m, n))
            .map_err(|e| e.at(&self.at))?;
        debug_assert_eq!(k, am.cols);
        float_output(a.dtype(), vec![m, n], y)
    }

    /// The product on the packed B, when there is one and A is not transposed and C (if any)
    /// is one row: `None` otherwise.
    fn run_packed<T: Real>(
        &self,
        a: &TensorView<'_>,
        c: Option<&TensorView<'_>>,
        d: &GemmDims,
    ) -> Result<Option<Value>> {
        let Some(packed) = &self.packed else { return Ok(None) };
        if T::DTYPE != DataType::Float || self.trans_a || (packed.k(), packed.n()) != (d.k, d.n) {
            return Ok(None);
        }
        let bias = match (c, d.c_strides) {
            (Some(c), Some((0, cs))) if self.beta != 0.0 => {
                let c = float_slice::<f32>(c)?;
                Some((0..d.n).map(|j| self.beta * c[j * cs]).collect::<Vec<f32>>())
            }
            (Some(_), Some(_)) if self.beta != 0.0 => return Ok(None),
            _ => None,
        };
        packed_product(packed, a, d.m, bias.as_deref(), vec![d.m, d.n]).map(Some).map_err(|e| e.at(&self.at))
    }

    /// `y` with the activation applied (computed in `T`, rounded once to y's type).
    fn activated<T: Real>(&self, y: Value) -> Result<Value> {
        if self.activation == Activation::None {
            return Ok(y);
        }
        let y = y.into_tensor()?;
        let view = y.view()?;
        // Gelu through the Gelu kernel's own loops (erf vectorizes there, not through `apply`).
        match self.activation {
            Activation::Gelu => return crate::ops::contrib::gelu(&view, None, GeluKind::Exact),
            Activation::GeluTanh => return crate::ops::contrib::gelu(&view, None, GeluKind::Tanh),
            _ => {}
        }
        let mut data = float_slice::<T>(&view)?.into_owned();
        let act = self.activation;
        crate::parallel::for_each_chunk_mut(&mut data, ACTIVATION_CHUNK, &|_, seg| util::simd(|| act.apply(seg)));
        float_output(y.dtype(), y.shape().to_vec(), data)
    }

    fn run_int<T: IntElem>(
        &self,
        a: &TensorView<'_>,
        b: &TensorView<'_>,
        c: Option<&TensorView<'_>>,
        d: &GemmDims,
    ) -> Result<Value> {
        let (m, n) = (d.m, d.n);
        let am = MatRef::row_major(a.as_slice::<T>()?, a.shape()[0], a.shape()[1]).t_if(self.trans_a);
        let bm = MatRef::row_major(b.as_slice::<T>()?, b.shape()[0], b.shape()[1]).t_if(self.trans_b);
        let mut y = filled(element_count(&[m, n])?, T::default())?;
        int_product(am, bm, &mut y);
        let alpha = f64::from(self.alpha);
        y.iter_mut().for_each(|v| *v = T::from_f64(alpha * v.to_f64()));
        if let (Some(c), Some((rs, cs)), true) = (c, d.c_strides, self.beta != 0.0) {
            let c_data = c.as_slice::<T>()?;
            let beta = f64::from(self.beta);
            for (i, row) in y.chunks_mut(n.max(1)).enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = T::from_f64(v.to_f64() + beta * c_data[i * rs + j * cs].to_f64());
                }
            }
        }
        util::out(vec![m, n], y)
    }
}

/// Strides that read a C of shape `c` as an `m x n` matrix under unidirectional broadcasting,
/// `None` when `c` does not broadcast to `[m, n]`.
fn c_broadcast_strides(c: &[usize], m: usize, n: usize) -> Option<(usize, usize)> {
    let (cr, cc) = match *c {
        [] => (1, 1),
        [x] => (1, x),
        [r, x] => (r, x),
        _ => return None,
    };
    let ok = (cr == m || cr == 1) && (cc == n || cc == 1);
    ok.then_some((if cr == 1 { 0 } else { cc }, if cc == 1 { 0 } else { 1 }))
}

/// Sets `y[i][j] = f(i, j)` on a row-major matrix with `n` columns.
fn fill_broadcast<T>(y: &mut [T], n: usize, f: impl Fn(usize, usize) -> T) {
    for (i, row) in y.chunks_mut(n.max(1)).enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = f(i, j);
        }
    }
}

impl Kernel for GemmOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let a = util::input(inputs, 0, &self.at)?;
        let b = util::input(inputs, 1, &self.at)?;
        let c = util::opt_input(inputs, 2, &self.at)?;
        same_dtype(&a, &b, 1, &self.at)?;
        if let Some(c) = &c {
            same_dtype(&a, c, 2, &self.at)?;
        }
        let d = self.dims(a.shape(), b.shape(), c.as_ref().map(|c| c.shape()))?;
        let c = c.as_ref();
        if self.activation != Activation::None && compute_type(a.dtype()).is_none() {
            return Err(Error::input(&self.at, 0, "a float tensor (FusedGemm's activation)", a.dtype().name()));
        }
        let y = match (compute_type(a.dtype()), a.dtype()) {
            (Some(DataType::Float), _) => self.activated::<f32>(self.run_float::<f32>(&a, &b, c, &d)?)?,
            (Some(_), _) => self.activated::<f64>(self.run_float::<f64>(&a, &b, c, &d)?)?,
            (None, DataType::Int32) => self.run_int::<i32>(&a, &b, c, &d)?,
            (None, DataType::Int64) => self.run_int::<i64>(&a, &b, c, &d)?,
            (None, DataType::Uint32) => self.run_int::<u32>(&a, &b, c, &d)?,
            (None, DataType::Uint64) => self.run_int::<u64>(&a, &b, c, &d)?,
            (None, other) => return Err(unsupported_dtype(&self.at, other)),
        };
        Ok(vec![y])
    }
}

/// MatMulInteger: `(A - a_zero_point) @ (B - b_zero_point)` on 8-bit integers, int32 result.
struct MatMulIntegerOp {
    at: Location,
}

fn build_matmul_integer(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(MatMulIntegerOp { at: ctx.node.location() }))
}

/// An 8-bit tensor (or zero point) widened to i32.
pub(crate) fn widen_8bit(v: &TensorView<'_>, index: usize, at: &Location) -> Result<Vec<i32>> {
    match v.dtype() {
        DataType::Uint8 => Ok(v.as_slice::<u8>()?.iter().map(|&x| i32::from(x)).collect()),
        DataType::Int8 => Ok(v.as_slice::<i8>()?.iter().map(|&x| i32::from(x)).collect()),
        other => Err(Error::input(at, index, "a uint8 or int8 tensor", other.name())),
    }
}

/// Subtracts zero points from `x`, a row-major tensor seen as `groups` blocks of `rows x cols`.
/// `zp` holds one value, one per `per` index (row of A or column of B), or one per
/// (block, `per` index); `by_row` says whether `per` indexes rows or columns.
pub(crate) fn subtract_zero_point(
    x: &mut [i32],
    zp: &[i32],
    rows: usize,
    cols: usize,
    by_row: bool,
    index: usize,
    at: &Location,
) -> Result<()> {
    let per = if by_row { rows } else { cols };
    let block = rows * cols;
    let blocks = x.len().checked_div(block).unwrap_or(0);
    let zp_at: Box<dyn Fn(usize, usize) -> i32> = match zp.len() {
        1 => Box::new(|_, _| zp[0]),
        l if l == per => Box::new(|_, i| zp[i]),
        l if l == per * blocks => Box::new(|blk, i| zp[blk * per + i]),
        l => {
            let want = if by_row { "one per row of A" } else { "one per column of B" };
            return Err(Error::input(at, index, format!("1 zero point or {per} ({want})"), format!("{l} zero points")));
        }
    };
    for (blk, mat) in x.chunks_mut(block.max(1)).enumerate() {
        for (r, row) in mat.chunks_mut(cols.max(1)).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v -= zp_at(blk, if by_row { r } else { c });
            }
        }
    }
    Ok(())
}

impl Kernel for MatMulIntegerOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let a = util::input(inputs, 0, at)?;
        let b = util::input(inputs, 1, at)?;
        let mut a32 = widen_8bit(&a, 0, at)?;
        let mut b32 = widen_8bit(&b, 1, at)?;
        let plan = MatMulPlan::new(a.shape(), b.shape(), at)?;
        if let Some(zp) = util::opt_input(inputs, 2, at)? {
            if zp.dtype() != a.dtype() {
                return Err(Error::input(at, 2, format!("{} like input 0", a.dtype()), zp.dtype().name()));
            }
            subtract_zero_point(&mut a32, &widen_8bit(&zp, 2, at)?, plan.m, plan.k, true, 2, at)?;
        }
        if let Some(zp) = util::opt_input(inputs, 3, at)? {
            if zp.dtype() != b.dtype() {
                return Err(Error::input(at, 3, format!("{} like input 1", b.dtype()), zp.dtype().name()));
            }
            subtract_zero_point(&mut b32, &widen_8bit(&zp, 3, at)?, plan.k, plan.n, false, 3, at)?;
        }
        let y = matmul_int::<i32>(&a32, &b32, &plan).map_err(|e| e.at(at))?;
        Ok(vec![util::out(plan.out_shape, y)?])
    }
}

#[cfg(test)]
mod tests;
