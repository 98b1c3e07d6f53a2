//! Einsum: parses the equation once, then contracts the operands pairwise, left to right.
//! Each operand first loses its repeated labels (diagonals) and the labels no one else reads
//! (summed out); each pairwise contraction is a batched matrix product (`matrixmultiply` for
//! floats) between transposed copies. Size-1 dimensions broadcast. f16/bf16 are computed in
//! f32; integers wrap.

use std::collections::BTreeSet;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::gemm::{gemm, MatMut, MatRef};
use super::real::{float_output, float_slice};
use crate::ops::elementwise::{dtype_error, FLOAT_TYPES, INT_TYPES};
use crate::ops::util;

/// One position of a term: a letter or `...`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sub {
    Letter(u8),
    Ellipsis,
}

/// The parsed equation: one term per operand, and the output term when given (`->`).
#[derive(Debug)]
struct Equation {
    inputs: Vec<Vec<Sub>>,
    output: Option<Vec<Sub>>,
}

/// A label of an expanded term: a letter's code, or `ELLIPSIS + j` for the j-th of the
/// broadcast dims that `...` stands for.
type Label = u32;
const ELLIPSIS: Label = 1000;

fn parse_term(s: &str, what: &str, at: &Location) -> Result<Vec<Sub>> {
    let bad = |why: &str| Error::attribute(at, "equation", "a valid einsum equation", format!("{what} '{s}': {why}"));
    let mut out = vec![];
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c if c.is_ascii_alphabetic() => out.push(Sub::Letter(c)),
            b'.' if b[i..].starts_with(b"...") => {
                if out.contains(&Sub::Ellipsis) {
                    return Err(bad("more than one ellipsis"));
                }
                out.push(Sub::Ellipsis);
                i += 2;
            }
            _ => return Err(bad("only letters and '...' may name dimensions")),
        }
        i += 1;
    }
    Ok(out)
}

fn parse(eq: &str, at: &Location) -> Result<Equation> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let inputs = lhs.split(',').map(|t| parse_term(t, "term", at)).collect::<Result<Vec<_>>>()?;
    let output = rhs.map(|r| parse_term(r, "output", at)).transpose()?;
    if let Some(out) = &output {
        let mut seen = BTreeSet::new();
        for s in out {
            if let Sub::Letter(c) = s {
                if !seen.insert(*c) {
                    return Err(Error::attribute(at, "equation", "an output naming each letter once", eq.clone()));
                }
                if !inputs.iter().flatten().any(|x| x == s) {
                    return Err(Error::attribute(
                        at,
                        "equation",
                        "output letters that appear in an input",
                        format!("'{}' in '{eq}'", *c as char),
                    ));
                }
            }
        }
    }
    Ok(Equation { inputs, output })
}

/// A tensor whose dimensions carry labels.
#[derive(Clone, Debug)]
struct Labeled<T> {
    labels: Vec<Label>,
    shape: Vec<usize>,
    data: Vec<T>,
}

/// The elements of a strided view of `data`: dims `shape`, element strides `strides`.
fn strided<T: Copy>(data: &[T], shape: &[usize], strides: &[usize]) -> Vec<T> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let rank = shape.len();
    if rank == 0 {
        out.push(data[0]);
        return out;
    }
    let (last, ls) = (shape[rank - 1], strides[rank - 1]);
    let mut pos = vec![0usize; rank - 1];
    loop {
        let base: usize = pos.iter().zip(strides).map(|(p, s)| p * s).sum();
        out.extend((0..last).map(|j| data[base + j * ls]));
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            pos[d] += 1;
            if pos[d] < shape[d] {
                break;
            }
            pos[d] = 0;
        }
    }
}

/// Element types Einsum computes in.
trait EinElem: Copy + Default + Send + Sync + 'static {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `batch` products of `[m, k]` by `[k, n]` row-major matrices.
    fn batched(a: &[Self], b: &[Self], batch: usize, m: usize, k: usize, n: usize) -> Result<Vec<Self>> {
        let mut c = vec![Self::default(); batch * m * n];
        for t in 0..batch {
            let (a, b) = (&a[t * m * k..(t + 1) * m * k], &b[t * k * n..(t + 1) * k * n]);
            for (i, row) in c[t * m * n..(t + 1) * m * n].chunks_mut(n.max(1)).enumerate().take(m) {
                for p in 0..k {
                    let x = a[i * k + p];
                    for (o, &y) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                        *o = o.add(x.mul(y));
                    }
                }
            }
        }
        Ok(c)
    }
}

macro_rules! ein_float {
    ($($t:ty),*) => {$(
        impl EinElem for $t {
            fn add(self, o: Self) -> Self { self + o }
            fn mul(self, o: Self) -> Self { self * o }
            fn batched(a: &[Self], b: &[Self], batch: usize, m: usize, k: usize, n: usize) -> Result<Vec<Self>> {
                let mut c = vec![0.0; batch * m * n];
                for t in 0..batch {
                    let am = MatRef::row_major(&a[t * m * k..(t + 1) * m * k], m, k);
                    let bm = MatRef::row_major(&b[t * k * n..(t + 1) * k * n], k, n);
                    gemm(1.0, am, bm, 0.0, MatMut::row_major(&mut c[t * m * n..(t + 1) * m * n], m, n))?;
                }
                Ok(c)
            }
        }
    )*};
}
ein_float!(f32, f64);

macro_rules! ein_int {
    ($($t:ty),*) => {$(
        impl EinElem for $t {
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
        }
    )*};
}
ein_int!(i8, i16, i32, i64, u8, u16, u32, u64);

impl<T: EinElem> Labeled<T> {
    fn strides(&self) -> Vec<usize> {
        util::strides(&self.shape)
    }

    /// Merges repeated labels into one dimension (the diagonal).
    fn diagonal(self, at: &Location) -> Result<Self> {
        let mut labels: Vec<Label> = vec![];
        let mut shape: Vec<usize> = vec![];
        let mut strides: Vec<usize> = vec![];
        for ((&l, &d), s) in self.labels.iter().zip(&self.shape).zip(self.strides()) {
            match labels.iter().position(|&x| x == l) {
                Some(p) if shape[p] != d => {
                    return Err(Error::node(
                        at,
                        format!("label '{}' has sizes {} and {d} in one operand", name(l), shape[p]),
                    ))
                }
                Some(p) => strides[p] += s,
                None => {
                    labels.push(l);
                    shape.push(d);
                    strides.push(s);
                }
            }
        }
        if labels.len() == self.labels.len() {
            return Ok(self);
        }
        let data = strided(&self.data, &shape, &strides);
        Ok(Labeled { labels, shape, data })
    }

    /// Reorders the dimensions so that they follow `order` (a permutation of the labels).
    fn permuted(self, order: &[Label]) -> Self {
        if order == self.labels.as_slice() {
            return self;
        }
        let strides = self.strides();
        let pos: Vec<usize> = order.iter().map(|l| self.labels.iter().position(|x| x == l).unwrap_or(0)).collect();
        let shape: Vec<usize> = pos.iter().map(|&p| self.shape[p]).collect();
        let st: Vec<usize> = pos.iter().map(|&p| strides[p]).collect();
        Labeled { labels: order.to_vec(), data: strided(&self.data, &shape, &st), shape }
    }

    /// Sums out every label not in `keep`.
    fn sum_out(self, keep: &BTreeSet<Label>) -> Self {
        let kept: Vec<Label> = self.labels.iter().copied().filter(|l| keep.contains(l)).collect();
        if kept.len() == self.labels.len() {
            return self;
        }
        let summed: Vec<Label> = self.labels.iter().copied().filter(|l| !keep.contains(l)).collect();
        let size = |ls: &[Label]| -> Vec<usize> {
            ls.iter().map(|l| self.shape[self.labels.iter().position(|x| x == l).unwrap_or(0)]).collect()
        };
        let (shape, r) = (size(&kept), size(&summed).iter().product::<usize>());
        let order: Vec<Label> = kept.iter().chain(&summed).copied().collect();
        let p = self.permuted(&order);
        let outer: usize = shape.iter().product();
        let data = (0..outer).map(|o| p.data[o * r..(o + 1) * r].iter().fold(T::default(), |a, &x| a.add(x))).collect();
        Labeled { labels: kept, shape, data }
    }

    /// The size of label `l` (it must be present).
    fn size_of(&self, l: Label) -> usize {
        self.labels.iter().position(|&x| x == l).map_or(1, |p| self.shape[p])
    }

    /// Broadcasts size-1 dimension `l` to `n`.
    fn expand(self, l: Label, n: usize) -> Self {
        let mut strides = self.strides();
        let mut shape = self.shape.clone();
        let p = self.labels.iter().position(|&x| x == l).unwrap_or(0);
        strides[p] = 0;
        shape[p] = n;
        Labeled { data: strided(&self.data, &shape, &strides), labels: self.labels, shape }
    }
}

fn name(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("...[{}]", l - ELLIPSIS)
    } else {
        (l as u8 as char).to_string()
    }
}

/// Contracts `a` and `b` into a tensor with the labels `out` (each from `a` or `b`); the shared
/// labels not in `out` are summed.
fn contract<T: EinElem>(mut a: Labeled<T>, mut b: Labeled<T>, out: &[Label], at: &Location) -> Result<Labeled<T>> {
    let shared: Vec<Label> = a.labels.iter().copied().filter(|l| b.labels.contains(l)).collect();
    for &l in &shared {
        let (na, nb) = (a.size_of(l), b.size_of(l));
        if na != nb {
            match (na, nb) {
                (1, n) => a = a.expand(l, n),
                (n, 1) => b = b.expand(l, n),
                _ => {
                    return Err(Error::node(at, format!("label '{}' has sizes {na} and {nb} in two operands", name(l))))
                }
            }
        }
    }
    let batch: Vec<Label> = shared.iter().copied().filter(|l| out.contains(l)).collect();
    let inner: Vec<Label> = shared.iter().copied().filter(|l| !out.contains(l)).collect();
    let m: Vec<Label> = a.labels.iter().copied().filter(|l| !shared.contains(l)).collect();
    let n: Vec<Label> = b.labels.iter().copied().filter(|l| !shared.contains(l)).collect();
    let prod = |t: &Labeled<T>, ls: &[Label]| ls.iter().map(|&l| t.size_of(l)).product::<usize>();
    let (bs, ms, ks, ns) = (prod(&a, &batch), prod(&a, &m), prod(&a, &inner), prod(&b, &n));
    let sizes: Vec<usize> = batch
        .iter()
        .map(|&l| a.size_of(l))
        .chain(m.iter().map(|&l| a.size_of(l)))
        .chain(n.iter().map(|&l| b.size_of(l)))
        .collect();
    let a = a.permuted(&[&batch[..], &m, &inner].concat());
    let b = b.permuted(&[&batch[..], &inner, &n].concat());
    let data = T::batched(&a.data, &b.data, bs, ms, ks, ns)?;
    let c = Labeled { labels: [&batch[..], &m, &n].concat(), shape: sizes, data };
    Ok(c.permuted(out))
}

/// Einsum with its equation parsed at build time.
struct Einsum {
    eq: Equation,
    at: Location,
}

pub(super) fn build_einsum(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let text =
        ctx.node.get_string("equation")?.ok_or_else(|| Error::attribute(&at, "equation", "a string", "nothing"))?;
    let eq = parse(&text, &at)?;
    if eq.inputs.len() != ctx.node.inputs.len() {
        return Err(Error::attribute(
            &at,
            "equation",
            format!("{} terms (one per input)", ctx.node.inputs.len()),
            format!("{} in '{text}'", eq.inputs.len()),
        ));
    }
    Ok(Box::new(Einsum { eq, at }))
}

impl Einsum {
    /// Each operand's labels, and the output's, for operands of the given shapes.
    fn labels(&self, shapes: &[&[usize]]) -> Result<(Vec<Vec<Label>>, Vec<Label>)> {
        let mut ell = 0;
        let mut per_input = vec![];
        for (i, (term, shape)) in self.eq.inputs.iter().zip(shapes).enumerate() {
            let letters = term.iter().filter(|s| **s != Sub::Ellipsis).count();
            let has_ell = term.contains(&Sub::Ellipsis);
            if shape.len() < letters || (!has_ell && shape.len() != letters) {
                return Err(Error::input(
                    &self.at,
                    i,
                    format!("a tensor of rank {}{letters} for its term", if has_ell { "at least " } else { "" }),
                    format!("shape {shape:?}"),
                ));
            }
            let e = shape.len() - letters;
            ell = ell.max(e);
            per_input.push(e);
        }
        let expand = |term: &[Sub], e: usize| -> Vec<Label> {
            term.iter()
                .flat_map(|s| match *s {
                    Sub::Letter(c) => vec![c as Label],
                    Sub::Ellipsis => (ell - e..ell).map(|j| ELLIPSIS + j as Label).collect(),
                })
                .collect()
        };
        let ins: Vec<Vec<Label>> = self.eq.inputs.iter().zip(&per_input).map(|(t, &e)| expand(t, e)).collect();
        let out = match &self.eq.output {
            Some(t) => expand(t, ell),
            None => {
                let mut once: Vec<Label> = (b'A'..=b'z')
                    .map(Label::from)
                    .filter(|&c| self.eq.inputs.iter().flatten().filter(|s| **s == Sub::Letter(c as u8)).count() == 1)
                    .collect();
                let mut out: Vec<Label> = (0..ell).map(|j| ELLIPSIS + j as Label).collect();
                out.append(&mut once);
                out
            }
        };
        Ok((ins, out))
    }

    fn compute<T: EinElem>(&self, datas: Vec<Vec<T>>, shapes: &[&[usize]]) -> Result<(Vec<usize>, Vec<T>)> {
        let (labels, out) = self.labels(shapes)?;
        let mut ops: Vec<Labeled<T>> = vec![];
        for (i, (data, l)) in datas.into_iter().zip(&labels).enumerate() {
            let keep: BTreeSet<Label> = out
                .iter()
                .copied()
                .chain(labels.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, l)| l.clone()))
                .collect();
            let t = Labeled { labels: l.clone(), shape: shapes[i].to_vec(), data }.diagonal(&self.at)?;
            ops.push(t.sum_out(&keep));
        }
        let mut ops = ops.into_iter();
        let mut acc = ops.next().ok_or_else(|| Error::node(&self.at, "no operands"))?;
        for (i, op) in ops.enumerate() {
            let later: BTreeSet<Label> = labels[i + 2..].iter().flatten().chain(&out).copied().collect();
            let step: Vec<Label> =
                acc.labels.iter().chain(&op.labels).copied().filter(|l| later.contains(l)).fold(vec![], |mut v, l| {
                    if !v.contains(&l) {
                        v.push(l);
                    }
                    v
                });
            acc = contract(acc, op, &step, &self.at)?;
        }
        let keep: BTreeSet<Label> = out.iter().copied().collect();
        let acc = acc.sum_out(&keep);
        for &l in &out {
            if !acc.labels.contains(&l) {
                return Err(Error::node(&self.at, format!("output label '{}' is in no operand", name(l))));
            }
        }
        let acc = acc.permuted(&out);
        Ok((acc.shape, acc.data))
    }
}

impl Kernel for Einsum {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let views: Vec<TensorView<'_>> =
            (0..self.eq.inputs.len()).map(|i| util::input(inputs, i, &self.at)).collect::<Result<_>>()?;
        let dtype = views[0].dtype();
        for (i, v) in views.iter().enumerate().skip(1) {
            if v.dtype() != dtype {
                return Err(crate::ops::elementwise::same_dtype_error(&self.at, i, dtype, v.dtype()));
            }
        }
        let shapes: Vec<&[usize]> = views.iter().map(|v| v.shape()).collect();
        match dtype {
            DataType::Double => {
                let d = views.iter().map(|v| Ok(v.as_slice::<f64>()?.to_vec())).collect::<Result<_>>()?;
                let (shape, data) = self.compute::<f64>(d, &shapes)?;
                Ok(vec![util::out(shape, data)?])
            }
            DataType::Float | DataType::Float16 | DataType::BFloat16 => {
                let d = views.iter().map(|v| Ok(float_slice::<f32>(v)?.into_owned())).collect::<Result<_>>()?;
                let (shape, data) = self.compute::<f32>(d, &shapes)?;
                Ok(vec![float_output(dtype, shape, data)?])
            }
            other => crate::ops::elementwise::dispatch_int!(other, T => {
                let d = views.iter().map(|v| Ok(v.as_slice::<T>()?.to_vec())).collect::<Result<_>>()?;
                let (shape, data) = self.compute::<T>(d, &shapes)?;
                Ok(vec![util::out(shape, data)?])
            }, _ => Err(dtype_error(&self.at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), other))),
        }
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::ops::layout::testkit::*;

    fn einsum(eq: &str, xs: &[Tensor]) -> onyx_core::Result<Tensor> {
        let inputs: Vec<Option<Tensor>> = xs.iter().cloned().map(Some).collect();
        run1("Einsum", 12, vec![string("equation", eq)], &inputs)
    }

    /// `((np.arange(n) * 7) % 11) * step - off` reshaped to `shape`: the data of the numpy references.
    fn ramp(shape: &[usize], step: f32, off: f32) -> Tensor {
        let n: usize = shape.iter().product();
        t(shape, (0..n).map(|i| ((i * 7) % 11) as f32 * step - off).collect())
    }

    #[test]
    fn matches_numpy() {
        // Expected values: np.einsum(eq, *operands) on the same ramps.
        let a = ramp(&[2, 3, 4], 0.5, 2.0);
        let b = ramp(&[2, 4, 5], 0.25, 1.0);
        let m = ramp(&[4, 4], 1.0, 3.0);
        let v = ramp(&[4], 0.75, 1.5);
        let cases: Vec<(&str, Vec<Tensor>, Vec<usize>, Vec<f32>)> = vec![
            (
                "bij,bjk->bik",
                vec![a.clone(), b.clone()],
                vec![2, 3, 5],
                vec![
                    2.75, -0.625, 4.25, -3.25, -2.5, -0.25, -3.25, 2.0, 1.75, 2.875, -0.5, 2.375, -1.625, -4.25, 2.75,
                    -1.75, 4.25, -0.75, -3.0, 3.0, 2.75, -0.5, -1.0, 2.625, -0.625, 3.125, 0.25, -1.25, 2.75, -0.125,
                ],
            ),
            ("ii->i", vec![m.clone()], vec![4], vec![-3.0, -1.0, 1.0, 3.0]),
            ("ii", vec![m.clone()], vec![], vec![0.0]),
            ("ij->", vec![m.clone()], vec![], vec![33.0]),
            (
                "ji",
                vec![m.clone()],
                vec![4, 4],
                vec![-3.0, 3.0, -2.0, 4.0, 4.0, -1.0, 5.0, 0.0, 0.0, 6.0, 1.0, 7.0, 7.0, 2.0, -3.0, 3.0],
            ),
            ("i,i", vec![v.clone(), v.clone()], vec![], vec![52.875]),
            (
                "i,j->ij",
                vec![v.clone(), ramp(&[3], 1.0, 0.0)],
                vec![4, 3],
                vec![0.0, -10.5, -4.5, 0.0, 26.25, 11.25, 0.0, 5.25, 2.25, 0.0, 42.0, 18.0],
            ),
            (
                "...ij,...jk",
                vec![a.clone(), b.clone()],
                vec![2, 3, 5],
                vec![
                    2.75, -0.625, 4.25, -3.25, -2.5, -0.25, -3.25, 2.0, 1.75, 2.875, -0.5, 2.375, -1.625, -4.25, 2.75,
                    -1.75, 4.25, -0.75, -3.0, 3.0, 2.75, -0.5, -1.0, 2.625, -0.625, 3.125, 0.25, -1.25, 2.75, -0.125,
                ],
            ),
            (
                "bij,bjk,kl->li",
                vec![a.clone(), b.clone(), ramp(&[5, 2], 0.5, 1.0)],
                vec![2, 3],
                vec![-14.3125, 11.8125, -13.625, 9.125, 4.5625, 22.6875],
            ),
            (
                "i...->...",
                vec![a.clone()],
                vec![3, 4],
                vec![-0.5, 1.0, 2.5, 4.0, 0.0, 1.5, 3.0, -1.0, 0.5, 2.0, -2.0, -0.5],
            ),
        ];
        for (eq, xs, shape, want) in cases {
            let y = einsum(eq, &xs).unwrap_or_else(|e| panic!("{eq}: {e}"));
            let (s, d) = f32s(&y);
            assert_eq!(s, shape, "{eq}");
            assert_close(&d, &want, 1e-5);
        }
    }

    #[test]
    fn integers_broadcasting_and_errors() {
        let a = t(&[2, 3], vec![1i32, 2, 3, 4, 5, 6]);
        let b = t(&[3, 2], vec![7i32, 8, 9, 10, 11, 12]);
        let y = einsum("ij,jk->ik", &[a.clone(), b]).unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), &[58, 64, 139, 154]);
        // A size-1 ellipsis dim broadcasts: [1,2,3] x [4,3,2].
        let x = t(&[1, 2, 3], vec![1f64, 2., 3., 4., 5., 6.]);
        let z = t(&[4, 3, 2], (0..24).map(f64::from).collect());
        let y = einsum("...ij,...jk->...ik", &[x, z]).unwrap();
        assert_eq!(y.shape(), &[4, 2, 2]);
        assert_eq!(&y.as_slice::<f64>().unwrap()[..4], &[16., 22., 34., 49.]);
        assert!(einsum("ij,jk", &[a.clone()]).unwrap_err().to_string().contains("equation"));
        assert!(einsum("ij->k", &[a.clone()]).unwrap_err().to_string().contains("'k'"));
        assert!(einsum("ijk", &[a.clone()]).unwrap_err().to_string().contains("input 0"));
        assert!(einsum("i1", &[a.clone()]).unwrap_err().to_string().contains("letters"));
        let err = einsum("ij,jk", &[a.clone(), a.clone()]).unwrap_err().to_string();
        assert!(err.contains("'j'") && err.contains("3 and 2"), "{err}");
        let err = einsum("ij,jk", &[a, t(&[3, 2], vec![1f32; 6])]).unwrap_err().to_string();
        assert!(err.contains("input 1"), "{err}");
    }
}
