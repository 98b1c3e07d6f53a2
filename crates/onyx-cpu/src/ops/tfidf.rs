//! TfIdfVectorizer (opset 9): counts the n-grams of a pool (`pool_int64s` or `pool_strings`)
//! in each row of the input (`[C]` or `[B, C]`, int32/int64/string), with up to
//! `max_skip_count` items skipped between the items of an n-gram, and weighs the counts (TF,
//! IDF or TFIDF) into a float output `[output_size]` or `[B, output_size]`.
//!
//! The pool is read as ONNX lays it out: `ngram_counts[i]` is where the `(i+1)`-grams start;
//! the `k`-th n-gram of the pool (in pool order) counts into output column `ngram_indexes[k]`.
//! Only n-grams of `min_gram_length..=max_gram_length` items are counted; unigrams once per
//! position, longer n-grams once per position and skip distance. When an n-gram occurs twice
//! in the pool the later column wins.

use std::collections::HashMap;
use std::hash::Hash;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("TfIdfVectorizer", build_tfidf);
}

/// How counts become output values.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// The count.
    Tf,
    /// The weight (1 without weights) where the count is positive.
    Idf,
    /// The weight (1 without weights) times the count.
    TfIdf,
}

/// The n-grams of the pool, keyed by their items.
enum Pool {
    Ints(HashMap<Vec<i64>, usize>),
    Strings(HashMap<Vec<String>, usize>),
}

/// A TfIdfVectorizer node with its pool decoded.
struct TfIdf {
    mode: Mode,
    min_len: usize,
    max_len: usize,
    max_skip: usize,
    pool: Pool,
    /// Number of output columns: `max(ngram_indexes) + 1`.
    width: usize,
    weights: Vec<f32>,
    at: Location,
}

fn nonneg(ctx: &NodeContext<'_>, name: &str, required: bool) -> Result<usize> {
    let at = ctx.node.location();
    match ctx.node.get_int(name)? {
        Some(v) if v >= 0 => Ok(v as usize),
        Some(v) => Err(Error::attribute(&at, name, "a non-negative int", v.to_string())),
        None if required => Err(Error::attribute(&at, name, "an int (required)", "nothing")),
        None => Ok(0),
    }
}

/// Maps the `k`-th n-gram of `items` (sizes laid out by `counts`) within `min..=max` items to
/// its output column `indexes[k]`.
fn index_pool<K: Clone + Eq + Hash>(
    items: &[K],
    counts: &[usize],
    indexes: &[usize],
    (min, max): (usize, usize),
    at: &Location,
) -> Result<HashMap<Vec<K>, usize>> {
    let mut map = HashMap::new();
    let mut k = 0;
    for (i, &start) in counts.iter().enumerate() {
        let n = i + 1;
        let end = counts.get(i + 1).copied().unwrap_or(items.len());
        if start > end || end > items.len() || (end - start) % n != 0 {
            let want = format!("ngram_counts cutting the pool ({} items) into whole {n}-grams", items.len());
            return Err(Error::attribute(at, "ngram_counts", want, format!("{counts:?}")));
        }
        for gram in items[start..end].chunks_exact(n) {
            let column = *indexes.get(k).ok_or_else(|| {
                Error::attribute(
                    at,
                    "ngram_indexes",
                    "one output column per n-gram of the pool",
                    format!("{} columns", indexes.len()),
                )
            })?;
            if (min..=max).contains(&n) {
                map.insert(gram.to_vec(), column);
            }
            k += 1;
        }
    }
    Ok(map)
}

fn build_tfidf(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let mode = match node.get_string("mode")?.as_deref() {
        Some("TF") => Mode::Tf,
        Some("IDF") => Mode::Idf,
        Some("TFIDF") => Mode::TfIdf,
        other => return Err(Error::attribute(&at, "mode", "TF, IDF or TFIDF", format!("{other:?}"))),
    };
    let min_len = nonneg(ctx, "min_gram_length", true)?;
    let max_len = nonneg(ctx, "max_gram_length", true)?;
    if min_len == 0 || min_len > max_len {
        return Err(Error::attribute(
            &at,
            "min_gram_length",
            format!("1..={max_len} (max_gram_length)"),
            min_len.to_string(),
        ));
    }
    let max_skip = nonneg(ctx, "max_skip_count", true)?;
    let to_usize = |name: &str| -> Result<Vec<usize>> {
        let v =
            node.get_ints(name)?.ok_or_else(|| Error::attribute(&at, name, "a list of ints (required)", "nothing"))?;
        v.iter()
            .map(|&x| {
                usize::try_from(x).map_err(|_| Error::attribute(&at, name, "non-negative values", format!("{v:?}")))
            })
            .collect()
    };
    let counts = to_usize("ngram_counts")?;
    let indexes = to_usize("ngram_indexes")?;
    let width = indexes.iter().max().map_or(0, |m| m + 1);
    let range = (min_len, max_len);
    let pool = match (node.get_ints("pool_int64s")?, node.get_strings("pool_strings")?) {
        (Some(p), None) => Pool::Ints(index_pool(p, &counts, &indexes, range, &at)?),
        (None, Some(p)) => {
            let p: Vec<String> = p.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
            Pool::Strings(index_pool(&p, &counts, &indexes, range, &at)?)
        }
        _ => {
            return Err(Error::attribute(
                &at,
                "pool_int64s",
                "exactly one of pool_int64s and pool_strings",
                "both or neither",
            ))
        }
    };
    let weights = node.get_floats("weights")?.map(<[f32]>::to_vec).unwrap_or_default();
    if !weights.is_empty() && weights.len() < width {
        return Err(Error::attribute(
            &at,
            "weights",
            format!("{width} weights (one per output column)"),
            weights.len().to_string(),
        ));
    }
    Ok(Box::new(TfIdf { mode, min_len, max_len, max_skip, pool, width, weights, at }))
}

impl TfIdf {
    /// Adds the n-gram counts of `row` to `freq` (one row of the output).
    fn count<K: Clone + Eq + Hash>(&self, row: &[K], map: &HashMap<Vec<K>, usize>, freq: &mut [u64]) {
        let mut gram = Vec::with_capacity(self.max_len);
        for n in self.min_len..=self.max_len {
            // Unigrams have no gaps: they are counted once, not once per skip distance.
            let skips = if n == 1 { 0 } else { self.max_skip };
            for skip in 0..=skips {
                let step = skip + 1;
                let span = (n - 1) * step;
                for start in 0..row.len().saturating_sub(span) {
                    gram.clear();
                    gram.extend((0..n).map(|j| row[start + j * step].clone()));
                    if let Some(&col) = map.get(&gram) {
                        freq[col] += 1;
                    }
                }
            }
        }
    }

    /// The weighed output of the counts.
    fn weigh(&self, freq: &[u64]) -> Vec<f32> {
        let w = |i: usize| if self.weights.is_empty() { 1.0 } else { self.weights[i % self.width] };
        freq.iter()
            .enumerate()
            .map(|(i, &f)| match self.mode {
                Mode::Tf => f as f32,
                Mode::Idf if f > 0 => w(i),
                Mode::Idf => 0.0,
                Mode::TfIdf => w(i) * f as f32,
            })
            .collect()
    }

    fn rows<K: Clone + Eq + Hash>(&self, data: &[K], rows: usize, map: &HashMap<Vec<K>, usize>) -> Vec<u64> {
        let mut freq = vec![0u64; rows * self.width];
        let c = if rows == 0 { 0 } else { data.len() / rows };
        for r in 0..rows {
            self.count(&data[r * c..(r + 1) * c], map, &mut freq[r * self.width..(r + 1) * self.width]);
        }
        freq
    }

    fn compute(&self, x: &TensorView<'_>) -> Result<Value> {
        let at = &self.at;
        let (rows, shape) = match x.shape() {
            [] | [_] => (1, vec![self.width]),
            &[b, _] => (b, vec![b, self.width]),
            s => return Err(Error::input(at, 0, "a tensor of shape [C] or [B, C]", format!("{s:?}"))),
        };
        let freq = match (&self.pool, x.dtype()) {
            (Pool::Ints(map), DataType::Int32 | DataType::Int64) => self.rows(&util::to_i64(x)?, rows, map),
            (Pool::Strings(map), DataType::String) => self.rows(x.strings()?, rows, map),
            (Pool::Ints(_), d) => {
                return Err(Error::input(at, 0, "an int32/int64 tensor (the pool is pool_int64s)", d.name()))
            }
            (Pool::Strings(_), d) => {
                return Err(Error::input(at, 0, "a string tensor (the pool is pool_strings)", d.name()))
            }
        };
        util::out(shape, self.weigh(&freq))
    }
}

impl Kernel for TfIdf {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        Ok(vec![self.compute(&x).map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::test_support::{build, node, run, string, Rng};
    use onyx_core::ir::AttrValue;
    use onyx_core::Tensor;

    /// Attributes for an int pool.
    fn attrs(
        mode: &str,
        min: i64,
        max: i64,
        skip: i64,
        counts: &[i64],
        indexes: &[i64],
        pool: &[i64],
    ) -> Vec<(&'static str, AttrValue)> {
        vec![
            ("mode", string(mode)),
            ("min_gram_length", AttrValue::Int(min)),
            ("max_gram_length", AttrValue::Int(max)),
            ("max_skip_count", AttrValue::Int(skip)),
            ("ngram_counts", AttrValue::Ints(counts.to_vec())),
            ("ngram_indexes", AttrValue::Ints(indexes.to_vec())),
            ("pool_int64s", AttrValue::Ints(pool.to_vec())),
        ]
    }

    fn kernel(a: Vec<(&'static str, AttrValue)>) -> Result<Box<dyn Kernel>> {
        build(build_tfidf, &node("TfIdfVectorizer", &["x"], 1, a), 9)
    }

    fn floats(v: &Value) -> Vec<f32> {
        v.as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
    }

    /// Brute force: every (n, skip, start) window of every row, compared with every pool gram.
    fn naive(row: &[i64], pool: &[(Vec<i64>, usize)], min: usize, max: usize, skip: usize, width: usize) -> Vec<f32> {
        let mut f = vec![0f32; width];
        for (gram, col) in pool {
            let n = gram.len();
            if n < min || n > max {
                continue;
            }
            let skips = if n == 1 { 0 } else { skip };
            for s in 0..=skips {
                for start in 0..row.len() {
                    let idx: Vec<usize> = (0..n).map(|j| start + j * (s + 1)).collect();
                    if idx.iter().all(|&i| i < row.len()) && idx.iter().zip(gram).all(|(&i, g)| row[i] == *g) {
                        f[*col] += 1.0;
                    }
                }
            }
        }
        f
    }

    #[test]
    fn counts_match_brute_force_on_random_rows() {
        let mut rng = Rng::new(3);
        // Pool: 3 unigrams, 4 bigrams, 2 trigrams over a small alphabet so that hits are common.
        let pool: Vec<i64> = vec![1, 2, 3, 1, 2, 2, 3, 3, 1, 4, 4, 1, 2, 3, 2, 2, 2];
        let counts = [0, 3, 11];
        let indexes: Vec<i64> = (0..9).map(|k| (k * 5 + 2) % 9).collect();
        let grams: Vec<(Vec<i64>, usize)> = [(0usize, 1usize, 3usize), (3, 2, 4), (11, 3, 2)]
            .iter()
            .flat_map(|&(s, n, c)| (0..c).map(move |j| (s + j * n, n)))
            .enumerate()
            .map(|(k, (s, n))| (pool[s..s + n].to_vec(), indexes[k] as usize))
            .collect();
        for (min, max, skip) in [(1, 1, 0), (1, 2, 0), (2, 2, 3), (1, 3, 2), (2, 3, 5), (3, 3, 1)] {
            let (b, c) = (3, 11);
            let x: Vec<i64> = (0..b * c).map(|_| rng.range(1, 5)).collect();
            let k = kernel(attrs("TF", min, max, skip, &counts, &indexes, &pool)).unwrap();
            let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![b, c], x.clone()).unwrap())], 1).unwrap();
            assert_eq!(y[0].as_tensor().unwrap().shape(), [b, 9]);
            let want: Vec<f32> = (0..b)
                .flat_map(|r| naive(&x[r * c..(r + 1) * c], &grams, min as usize, max as usize, skip as usize, 9))
                .collect();
            assert_eq!(floats(&y[0]), want, "min {min} max {max} skip {skip}");
        }
    }

    #[test]
    fn weighting_modes_and_string_pools() {
        // Pool of unigrams [5, 6] and the bigram (5, 6); x = 5 6 5 6 7.
        let x = Tensor::from_vec(vec![5], vec![5i32, 6, 5, 6, 7]).unwrap();
        let counts = [0, 2];
        let pool = [5, 6, 5, 6];
        let run_mode = |mode: &str, weights: Option<&[f32]>| {
            let mut a = attrs(mode, 1, 2, 0, &counts, &[0, 1, 2], &pool);
            if let Some(w) = weights {
                a.push(("weights", AttrValue::Floats(w.to_vec())));
            }
            floats(&run(kernel(a).unwrap().as_ref(), &[Some(x.clone())], 1).unwrap()[0])
        };
        assert_eq!(run_mode("TF", None), [2.0, 2.0, 2.0]);
        assert_eq!(run_mode("IDF", None), [1.0, 1.0, 1.0]);
        assert_eq!(run_mode("IDF", Some(&[0.5, 2.0, 3.0])), [0.5, 2.0, 3.0]);
        assert_eq!(run_mode("TFIDF", Some(&[0.5, 2.0, 3.0])), [1.0, 4.0, 6.0]);
        // The same with strings.
        let mut a = attrs("TF", 1, 2, 0, &counts, &[0, 1, 2], &[]);
        a.retain(|(n, _)| *n != "pool_int64s");
        let p = ["a", "b", "a", "b"].iter().map(|s| s.as_bytes().to_vec()).collect();
        a.push(("pool_strings", AttrValue::Strings(p)));
        let xs = Tensor::from_strings(vec![1, 5], ["a", "b", "a", "b", "c"].iter().map(|s| s.to_string()).collect())
            .unwrap();
        let y = run(kernel(a).unwrap().as_ref(), &[Some(xs)], 1).unwrap();
        assert_eq!(y[0].as_tensor().unwrap().shape(), [1, 3]);
        assert_eq!(floats(&y[0]), [2.0, 2.0, 2.0]);
    }

    #[test]
    fn bad_attributes_and_inputs_are_errors_naming_the_node() {
        let e = kernel(attrs("TF", 2, 1, 0, &[0], &[0], &[1])).err().unwrap().to_string();
        assert!(e.contains("TfIdfVectorizer") && e.contains("min_gram_length"), "{e}");
        let e = kernel(attrs("COUNT", 1, 1, 0, &[0], &[0], &[1])).err().unwrap().to_string();
        assert!(e.contains("mode"), "{e}");
        // 3 items cannot be whole bigrams.
        let e = kernel(attrs("TF", 1, 2, 0, &[0, 1], &[0, 1], &[1, 2, 3, 4])).err().unwrap().to_string();
        assert!(e.contains("ngram_counts"), "{e}");
        let e = kernel(attrs("TF", 1, 1, 0, &[0], &[0], &[1, 2])).err().unwrap().to_string();
        assert!(e.contains("ngram_indexes"), "{e}");
        let k = kernel(attrs("TF", 1, 1, 0, &[0], &[0], &[1])).unwrap();
        let e =
            run(k.as_ref(), &[Some(Tensor::from_vec(vec![2], vec![1f32, 2.0]).unwrap())], 1).err().unwrap().to_string();
        assert!(e.contains("int32/int64"), "{e}");
        let e = run(k.as_ref(), &[Some(Tensor::from_vec(vec![1, 1, 2], vec![1i64, 2]).unwrap())], 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("[B, C]"), "{e}");
    }
}
