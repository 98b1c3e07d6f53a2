//! The outputs of a run.

use crate::{Error, Result, Value};

/// Named outputs of a run, in the graph's output order.
#[derive(Debug, Clone)]
pub struct Outputs {
    values: Vec<(String, Value)>,
}

impl Outputs {
    pub(crate) fn new(values: Vec<(String, Value)>) -> Self {
        Outputs { values }
    }

    /// The output called `name`.
    pub fn get(&self, name: &str) -> Result<&Value> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v).ok_or_else(|| Error::UnknownOutput {
            name: name.into(),
            available: self.values.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// (name, value) pairs in output order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.values.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when the graph has no outputs.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The (name, value) pairs.
    pub fn into_vec(self) -> Vec<(String, Value)> {
        self.values
    }
}

impl std::ops::Index<usize> for Outputs {
    type Output = Value;

    fn index(&self, i: usize) -> &Value {
        &self.values[i].1
    }
}
