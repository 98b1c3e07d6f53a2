//! Arithmetic on symbolic dimensions: broadcasting, equality constraints, products, and the
//! conversions between shape dimensions and symbolic integer values.

use super::super::SymInt;
use crate::types::Dim;

/// Broadcasts two dimensions (numpy rules). `None` when both are fixed, differ, and neither is 1.
pub fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    match (a, b) {
        (Dim::Fixed(1), d) | (d, Dim::Fixed(1)) => Some(d.clone()),
        (Dim::Fixed(x), Dim::Fixed(y)) if x != y => None,
        (Dim::Fixed(x), _) | (_, Dim::Fixed(x)) => Some(Dim::Fixed(*x)),
        (Dim::Symbol(x), Dim::Symbol(y)) if x == y => Some(a.clone()),
        _ => Some(Dim::Unknown),
    }
}

/// Broadcasts two shapes, aligned on the right. `None` when some pair of dimensions conflicts.
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let one = Dim::Fixed(1);
    (0..rank)
        .map(|i| {
            let da = (i + a.len()).checked_sub(rank).and_then(|j| a.get(j)).unwrap_or(&one);
            let db = (i + b.len()).checked_sub(rank).and_then(|j| b.get(j)).unwrap_or(&one);
            broadcast_dim(da, db)
        })
        .collect()
}

/// Combines two dimensions that must be equal. `None` when both are fixed and differ.
pub fn merge_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    match (a, b) {
        (Dim::Fixed(x), Dim::Fixed(y)) if x != y => None,
        (Dim::Fixed(_), _) | (Dim::Symbol(_), Dim::Unknown) => Some(a.clone()),
        (_, Dim::Fixed(_)) | (Dim::Unknown, Dim::Symbol(_)) => Some(b.clone()),
        _ => Some(a.clone()),
    }
}

/// The product of some dimensions: fixed when all are, the one symbol when the rest multiply
/// to 1, zero when any is zero, else unknown.
pub fn product(dims: &[Dim]) -> Dim {
    let mut fixed: usize = 1;
    let mut symbolic: Vec<&Dim> = vec![];
    for d in dims {
        match d {
            Dim::Fixed(0) => return Dim::Fixed(0),
            Dim::Fixed(n) => match fixed.checked_mul(*n) {
                Some(p) => fixed = p,
                None => return Dim::Unknown,
            },
            other => symbolic.push(other),
        }
    }
    match symbolic.as_slice() {
        [] => Dim::Fixed(fixed),
        [one] if fixed == 1 => (*one).clone(),
        _ => Dim::Unknown,
    }
}

/// A dimension as a symbolic integer.
pub fn dim_to_sym(d: &Dim) -> SymInt {
    match d {
        Dim::Fixed(n) => i64::try_from(*n).map(SymInt::Known).unwrap_or(SymInt::Unknown),
        Dim::Symbol(s) => SymInt::Symbol(s.clone()),
        Dim::Unknown => SymInt::Unknown,
    }
}

/// A symbolic integer used as a dimension (negative values are unknown).
pub fn sym_to_dim(s: &SymInt) -> Dim {
    match s {
        SymInt::Known(n) => usize::try_from(*n).map(Dim::Fixed).unwrap_or(Dim::Unknown),
        SymInt::Symbol(name) => Dim::Symbol(name.clone()),
        SymInt::Unknown => Dim::Unknown,
    }
}

/// Formats dimensions as `[batch,3,?]` for messages.
pub fn fmt_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(","))
}

/// A fully known dimension list as `usize`s.
pub fn all_fixed(dims: &[Dim]) -> Option<Vec<usize>> {
    dims.iter().map(Dim::fixed).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str) -> Dim {
        Dim::Symbol(name.into())
    }

    const F: fn(usize) -> Dim = Dim::Fixed;

    #[test]
    fn broadcast_dim_table() {
        let u = Dim::Unknown;
        let cases: Vec<(Dim, Dim, Option<Dim>)> = vec![
            (F(1), F(7), Some(F(7))),
            (F(7), F(1), Some(F(7))),
            (F(5), F(5), Some(F(5))),
            (F(3), F(5), None),
            (F(0), F(1), Some(F(0))),
            (F(0), F(3), None),
            (s("b"), F(1), Some(s("b"))),
            (F(1), s("b"), Some(s("b"))),
            (s("b"), F(9), Some(F(9))),
            (F(9), s("b"), Some(F(9))),
            (s("b"), s("b"), Some(s("b"))),
            (s("b"), s("c"), Some(u.clone())),
            (u.clone(), F(9), Some(F(9))),
            (u.clone(), F(1), Some(u.clone())),
            (u.clone(), s("b"), Some(u.clone())),
            (u.clone(), u.clone(), Some(u.clone())),
        ];
        for (a, b, want) in cases {
            assert_eq!(broadcast_dim(&a, &b), want, "{a} vs {b}");
        }
    }

    #[test]
    fn broadcast_shapes_align_right() {
        let got = broadcast_shapes(&[s("b"), F(1), F(7)], &[F(3), F(1)]).unwrap();
        assert_eq!(got, vec![s("b"), F(3), F(7)]);
        assert_eq!(broadcast_shapes(&[], &[F(2), F(5)]).unwrap(), vec![F(2), F(5)]);
        assert_eq!(broadcast_shapes(&[F(3), F(4)], &[F(5)]), None);
    }

    #[test]
    fn merge_dim_table() {
        let u = Dim::Unknown;
        let cases: Vec<(Dim, Dim, Option<Dim>)> = vec![
            (F(3), F(3), Some(F(3))),
            (F(3), F(4), None),
            (F(3), s("k"), Some(F(3))),
            (s("k"), F(3), Some(F(3))),
            (s("k"), u.clone(), Some(s("k"))),
            (u.clone(), s("k"), Some(s("k"))),
            (u.clone(), u.clone(), Some(u.clone())),
            (s("k"), s("j"), Some(s("k"))),
        ];
        for (a, b, want) in cases {
            assert_eq!(merge_dim(&a, &b), want, "{a} vs {b}");
        }
    }

    #[test]
    fn product_table() {
        let cases: Vec<(Vec<Dim>, Dim)> = vec![
            (vec![], F(1)),
            (vec![F(3), F(5), F(7)], F(105)),
            (vec![F(1), s("b"), F(1)], s("b")),
            (vec![F(2), s("b")], Dim::Unknown),
            (vec![s("b"), F(0)], F(0)),
            (vec![s("b"), s("c")], Dim::Unknown),
            (vec![F(usize::MAX), F(3)], Dim::Unknown),
        ];
        for (dims, want) in cases {
            assert_eq!(product(&dims), want, "{dims:?}");
        }
    }

    #[test]
    fn sym_dim_round_trip() {
        for d in [F(0), F(13), s("seq"), Dim::Unknown] {
            assert_eq!(sym_to_dim(&dim_to_sym(&d)), d);
        }
        assert_eq!(sym_to_dim(&SymInt::Known(-1)), Dim::Unknown);
        assert_eq!(fmt_dims(&[s("b"), F(3), Dim::Unknown]), "[b,3,?]");
    }
}
