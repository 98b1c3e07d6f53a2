//! Checks on what callers pass: free-dimension overrides and run-time inputs.

use std::collections::HashMap;

use super::SessionOptions;
use crate::ir::Graph;
use crate::types::{format_dims, Dim, ValueInfo, ValueType};
use crate::{Error, InputValue, Result};

/// Fixes the free dimensions of an input that the options name (by symbol or by denotation).
pub(crate) fn apply_free_dims(input: &ValueInfo, options: &SessionOptions) -> Result<ValueInfo> {
    let mut info = input.clone();
    let ValueType::Tensor(t) = &mut info.ty else { return Ok(info) };
    let Some(dims) = &mut t.shape else { return Ok(info) };
    for (i, dim) in dims.iter_mut().enumerate() {
        if matches!(dim, Dim::Fixed(_)) {
            continue;
        }
        let by_name = match dim {
            Dim::Symbol(s) => options.free_dims_by_name.iter().find(|(n, _)| n == s).map(|(_, v)| *v),
            _ => None,
        };
        let denotation = input.denotations.get(i).and_then(Option::as_deref);
        let by_denotation =
            denotation.and_then(|d| options.free_dims_by_denotation.iter().find(|(n, _)| n == d).map(|(_, v)| *v));
        if let Some(v) = by_name.or(by_denotation) {
            *dim = Dim::Fixed(v);
        }
    }
    Ok(info)
}

/// Checks run inputs against the declared ones: known names, no duplicates, every required input
/// present, tensors of the declared dtype and rank, fixed dimensions equal, and each symbolic
/// dimension the same size wherever it appears.
pub(crate) fn check_inputs(graph: &Graph, declared: &[ValueInfo], given: &[(String, InputValue<'_>)]) -> Result<()> {
    let names = || declared.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
    let mut seen: HashMap<&str, ()> = HashMap::new();
    let mut symbols: HashMap<&str, (usize, &str)> = HashMap::new();
    for (name, value) in given {
        let Some(decl) = declared.iter().find(|d| &d.name == name) else {
            return Err(Error::Input {
                name: name.clone(),
                expected: format!("one of the model's inputs ({})", names()),
                found: "an input of that name".into(),
            });
        };
        if seen.insert(name, ()).is_some() {
            return Err(Error::Input { name: name.clone(), expected: "one value".into(), found: "two".into() });
        }
        check_one(decl, value, &mut symbols)?;
    }
    for d in declared {
        if !seen.contains_key(d.name.as_str()) && !graph.initializers.contains_key(&d.name) {
            return Err(Error::Input {
                name: d.name.clone(),
                expected: format!("a value of type {}", d.ty),
                found: "none (the input is required)".into(),
            });
        }
    }
    Ok(())
}

fn check_one<'d>(
    decl: &'d ValueInfo,
    value: &InputValue<'_>,
    symbols: &mut HashMap<&'d str, (usize, &'d str)>,
) -> Result<()> {
    let ValueType::Tensor(t) = &decl.ty else { return Ok(()) };
    let mismatch = |found: String| Error::Input { name: decl.name.clone(), expected: decl.ty.to_string(), found };
    let Some((dtype, shape)) = value.tensor_type() else {
        let kind = match value {
            InputValue::Value(v) => v.kind(),
            InputValue::View(_) => "tensor",
        };
        return Err(mismatch(format!("a {kind}")));
    };
    let found = || format!("{dtype}{}", format_dims(&Some(shape.iter().map(|&d| Dim::Fixed(d)).collect())));
    if dtype != t.dtype {
        return Err(mismatch(found()));
    }
    let Some(dims) = &t.shape else { return Ok(()) };
    if dims.len() != shape.len() {
        return Err(mismatch(format!("{} (rank {} instead of {})", found(), shape.len(), dims.len())));
    }
    for (i, (d, &n)) in dims.iter().zip(shape).enumerate() {
        match d {
            Dim::Fixed(want) if *want != n => {
                return Err(mismatch(format!("{} (dimension {i} is {n}, not {want})", found())));
            }
            Dim::Symbol(s) => match symbols.get(s.as_str()) {
                Some((m, other)) if *m != n => {
                    return Err(mismatch(format!(
                        "{} (dimension '{s}' is {n} here but {m} in input '{other}')",
                        found()
                    )));
                }
                _ => {
                    symbols.insert(s, (n, &decl.name));
                }
            },
            _ => {}
        }
    }
    Ok(())
}
