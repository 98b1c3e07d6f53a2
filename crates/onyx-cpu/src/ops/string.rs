//! String ops: StringNormalizer, StringSplit, StringConcat and RegexFullMatch.
//!
//! RegexFullMatch compiles its pattern once with the `regex` crate, whose syntax is RE2's; the
//! classes `\w`, `\d`, `\s` and `\b` are Unicode-aware there (ASCII in RE2), which only matters
//! for non-ASCII text. Case changes of StringNormalizer are Unicode's (the `locale` attribute
//! is accepted and not used).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

use super::broadcast::map2_any;
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("StringNormalizer", build_normalizer);
    r.add("StringSplit", build_split);
    r.add("StringConcat", build_concat);
    r.add("RegexFullMatch", build_regex);
}

/// The strings of input `i`, or an error when it is not a string tensor.
fn strings<'a>(t: &TensorView<'a>, i: usize, at: &Location) -> Result<&'a [String]> {
    if t.dtype() != DataType::String {
        return Err(Error::input(at, i, "a string tensor", t.dtype().name()));
    }
    t.strings()
}

fn string_out(shape: Vec<usize>, data: Vec<String>) -> Result<Value> {
    Tensor::from_strings(shape, data).map(Value::Tensor)
}

/// Case change of StringNormalizer.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CaseChange {
    None,
    Lower,
    Upper,
}

/// A StringNormalizer node.
struct Normalizer {
    stopwords: Vec<String>,
    case_sensitive: bool,
    change: CaseChange,
    at: Location,
}

fn build_normalizer(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let change = match node.string_or("case_change_action", "NONE")?.as_str() {
        "NONE" => CaseChange::None,
        "LOWER" => CaseChange::Lower,
        "UPPER" => CaseChange::Upper,
        other => return Err(Error::attribute(&at, "case_change_action", "NONE, LOWER or UPPER", other)),
    };
    let case_sensitive = node.int_or("is_case_sensitive", 0)? != 0;
    let stopwords = node
        .get_strings("stopwords")?
        .unwrap_or(&[])
        .iter()
        .map(|s| {
            let s = String::from_utf8_lossy(s).into_owned();
            if case_sensitive {
                s
            } else {
                s.to_lowercase()
            }
        })
        .collect();
    Ok(Box::new(Normalizer { stopwords, case_sensitive, change, at }))
}

impl Kernel for Normalizer {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let data = strings(&x, 0, at)?;
        let two_d = match x.shape() {
            [_] => false,
            [1, _] => true,
            s => return Err(Error::input(at, 0, "a [C] or [1, C] string tensor", format!("{s:?}"))),
        };
        let kept: Vec<String> = data
            .iter()
            .filter(|s| {
                let key = if self.case_sensitive { (*s).clone() } else { s.to_lowercase() };
                !self.stopwords.contains(&key)
            })
            .map(|s| match self.change {
                CaseChange::None => s.clone(),
                CaseChange::Lower => s.to_lowercase(),
                CaseChange::Upper => s.to_uppercase(),
            })
            .collect();
        // Everything dropped: one empty string.
        let kept = if kept.is_empty() && !data.is_empty() { vec![String::new()] } else { kept };
        let n = kept.len();
        Ok(vec![string_out(if two_d { vec![1, n] } else { vec![n] }, kept)?])
    }
}

/// A StringSplit node.
struct Split {
    /// `None`: split on runs of whitespace.
    delimiter: Option<String>,
    maxsplit: Option<usize>,
    at: Location,
}

fn build_split(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let delimiter = ctx.node.get_string("delimiter")?.filter(|d| !d.is_empty());
    let maxsplit = match ctx.node.get_int("maxsplit")? {
        None => None,
        Some(v) if v >= 0 => Some(v as usize),
        Some(v) => return Err(Error::attribute(&at, "maxsplit", "a value >= 0", v.to_string())),
    };
    Ok(Box::new(Split { delimiter, maxsplit, at }))
}

impl Split {
    /// The parts of one string.
    fn split(&self, s: &str) -> Vec<String> {
        let max = self.maxsplit.unwrap_or(usize::MAX);
        match &self.delimiter {
            Some(d) => s.splitn(max.saturating_add(1), d.as_str()).map(str::to_string).collect(),
            None => {
                let mut parts = Vec::new();
                let mut rest = s.trim_start();
                while !rest.is_empty() {
                    if parts.len() == max {
                        parts.push(rest.to_string());
                        break;
                    }
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    parts.push(rest[..end].to_string());
                    rest = rest[end..].trim_start();
                }
                parts
            }
        }
    }
}

impl Kernel for Split {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let parts: Vec<Vec<String>> = strings(&x, 0, at)?.iter().map(|s| self.split(s)).collect();
        let width = parts.iter().map(Vec::len).max().unwrap_or(0);
        let counts: Vec<i64> = parts.iter().map(|p| p.len() as i64).collect();
        let mut out = Vec::with_capacity(parts.len() * width);
        for mut p in parts {
            p.resize(width, String::new());
            out.extend(p);
        }
        let mut shape = x.shape().to_vec();
        let counts = util::out(shape.clone(), counts)?;
        shape.push(width);
        Ok(vec![string_out(shape, out)?, counts])
    }
}

/// A StringConcat node.
struct Concat {
    at: Location,
}

fn build_concat(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Concat { at: ctx.node.location() }))
}

impl Kernel for Concat {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let (a, b) = (util::input(inputs, 0, at)?, util::input(inputs, 1, at)?);
        let (sa, sb) = (strings(&a, 0, at)?, strings(&b, 1, at)?);
        let (shape, data) = map2_any(sa, a.shape(), sb, b.shape(), |x, y| format!("{x}{y}")).map_err(|e| e.at(at))?;
        Ok(vec![string_out(shape, data)?])
    }
}

/// A RegexFullMatch node: the pattern anchored at both ends.
struct RegexMatch {
    re: regex::Regex,
    at: Location,
}

fn build_regex(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let pattern = ctx
        .node
        .get_string("pattern")?
        .ok_or_else(|| Error::attribute(&at, "pattern", "a regular expression", "nothing"))?;
    let re = regex::Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| Error::attribute(&at, "pattern", "a valid RE2 expression", e.to_string()))?;
    Ok(Box::new(RegexMatch { re, at }))
}

impl Kernel for RegexMatch {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let matches: Vec<bool> = strings(&x, 0, &self.at)?.iter().map(|s| self.re.is_match(s)).collect();
        Ok(vec![Value::Tensor(Tensor::from_bools(x.shape().to_vec(), matches)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{bool_values, ints};
    use crate::ops::matmul::test_support::{build, node, run, string};
    use onyx_core::ir::AttrValue;

    fn strs(shape: &[usize], v: &[&str]) -> Tensor {
        Tensor::from_strings(shape.to_vec(), v.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    fn texts(t: &Tensor) -> Vec<String> {
        t.view().unwrap().strings().unwrap().to_vec()
    }

    fn apply(f: crate::BuildFn, op: &str, attrs: Vec<(&str, AttrValue)>, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let k = build(f, &node(op, &["a", "b"], 2, attrs), 20)?;
        run(k.as_ref(), &inputs.into_iter().map(Some).collect::<Vec<_>>(), 2)?
            .into_iter()
            .map(Value::into_tensor)
            .collect()
    }

    #[test]
    fn string_normalizer_drops_stopwords_and_changes_case() {
        let words = AttrValue::Strings(vec![b"Monday".to_vec(), b"x".to_vec()]);
        let attrs = |sensitive: i64, case: &str| {
            vec![
                ("stopwords", words.clone()),
                ("is_case_sensitive", AttrValue::Int(sensitive)),
                ("case_change_action", string(case)),
            ]
        };
        let x = strs(&[1, 5], &["monday", "Straße", "Monday", "b", "X"]);
        let y = apply(build_normalizer, "StringNormalizer", attrs(0, "UPPER"), vec![x.clone()]).unwrap();
        assert_eq!(y[0].shape(), &[1, 2]);
        assert_eq!(texts(&y[0]), vec!["STRASSE", "B"]);
        let y = apply(build_normalizer, "StringNormalizer", attrs(1, "LOWER"), vec![x]).unwrap();
        assert_eq!(texts(&y[0]), vec!["monday", "straße", "b", "x"]);
        let y =
            apply(build_normalizer, "StringNormalizer", attrs(0, "NONE"), vec![strs(&[2], &["x", "MONDAY"])]).unwrap();
        assert_eq!((y[0].shape().to_vec(), texts(&y[0])), (vec![1], vec![String::new()]));
        assert!(apply(build_normalizer, "StringNormalizer", attrs(0, "TITLE"), vec![]).is_err());
        assert!(
            apply(build_normalizer, "StringNormalizer", attrs(0, "NONE"), vec![strs(&[2, 1], &["a", "b"])]).is_err()
        );
    }

    #[test]
    fn string_split_pads_to_the_longest() {
        let x = strs(&[3], &["a,b,,c", "", ",x"]);
        let y = apply(build_split, "StringSplit", vec![("delimiter", string(","))], vec![x.clone()]).unwrap();
        assert_eq!(y[0].shape(), &[3, 4]);
        assert_eq!(texts(&y[0]), vec!["a", "b", "", "c", "", "", "", "", "", "x", "", ""]);
        assert_eq!(ints(&y[1]), vec![4, 1, 2]);
        let y = apply(
            build_split,
            "StringSplit",
            vec![("delimiter", string(",")), ("maxsplit", AttrValue::Int(1))],
            vec![x],
        )
        .unwrap();
        assert_eq!(texts(&y[0]), vec!["a", "b,,c", "", "", "", "x"]);
        let w = strs(&[2], &["  one\ttwo  three ", "   "]);
        let y = apply(build_split, "StringSplit", vec![("maxsplit", AttrValue::Int(1))], vec![w.clone()]).unwrap();
        assert_eq!(texts(&y[0]), vec!["one", "two  three ", "", ""]);
        assert_eq!(ints(&y[1]), vec![2, 0]);
        let y = apply(build_split, "StringSplit", vec![], vec![w]).unwrap();
        assert_eq!(texts(&y[0]), vec!["one", "two", "three", "", "", ""]);
    }

    #[test]
    fn string_concat_broadcasts_and_regex_matches_fully() {
        let y =
            apply(build_concat, "StringConcat", vec![], vec![strs(&[2, 1], &["a", "é"]), strs(&[3], &["1", "", "的"])])
                .unwrap();
        assert_eq!(y[0].shape(), &[2, 3]);
        assert_eq!(texts(&y[0]), vec!["a1", "a", "a的", "é1", "é", "é的"]);
        assert!(apply(
            build_concat,
            "StringConcat",
            vec![],
            vec![strs(&[2], &["a", "b"]), strs(&[3], &["1", "2", "3"])]
        )
        .is_err());
        let x = strs(&[2, 2], &["abc123", "xabc123", "abc", "ABC1"]);
        let y = apply(build_regex, "RegexFullMatch", vec![("pattern", string("[a-c]+\\d*|ABC\\d"))], vec![x]).unwrap();
        assert_eq!(bool_values(&y[0]), vec![true, false, true, true]);
        assert!(apply(build_regex, "RegexFullMatch", vec![("pattern", string("(unclosed"))], vec![]).is_err());
        let e = apply(build_regex, "RegexFullMatch", vec![("pattern", string("a"))], vec![Tensor::scalar(1f32)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("string tensor"), "{e}");
    }
}
