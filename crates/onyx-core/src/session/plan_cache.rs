//! Plans cached by the concrete shapes of a session's inputs.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::types::{ValueInfo, ValueType};
use crate::InputValue;

/// How many plans a session keeps; the least recently used one goes first.
const CAPACITY: usize = 16;

/// The shape of each session input in declaration order (`None` where not given or not a tensor).
pub(crate) type ShapeKey = Vec<Option<Vec<usize>>>;

/// Plans (`P`) by input shapes, for sessions whose inputs have free dimensions.
pub(crate) struct PlanCache<P> {
    /// Whether any input has a free dimension (otherwise the session's plan is already concrete).
    dynamic: bool,
    /// Most recently used last.
    entries: Mutex<Vec<(ShapeKey, Arc<P>)>>,
}

impl<P> PlanCache<P> {
    /// An empty cache for a session with these inputs.
    pub fn new(inputs: &[ValueInfo]) -> Self {
        let dynamic = inputs.iter().any(|i| match &i.ty {
            ValueType::Tensor(t) => t.concrete().is_none(),
            _ => false,
        });
        PlanCache { dynamic, entries: Mutex::new(vec![]) }
    }

    /// The key of `given`, or `None` when the session's own plan serves every shape.
    pub fn key(&self, inputs: &[ValueInfo], given: &[(String, InputValue<'_>)]) -> Option<ShapeKey> {
        if !self.dynamic {
            return None;
        }
        let shape_of = |name: &str| {
            let value = given.iter().find(|(n, _)| n == name).map(|(_, v)| v)?;
            value.tensor_type().map(|(_, shape)| shape.to_vec())
        };
        Some(inputs.iter().map(|i| shape_of(&i.name)).collect())
    }

    /// The plan for `key`, if cached (and marks it most recently used).
    pub fn get(&self, key: &ShapeKey) -> Option<Arc<P>> {
        let mut entries = self.lock();
        let i = entries.iter().position(|(k, _)| k == key)?;
        let entry = entries.remove(i);
        let plan = entry.1.clone();
        entries.push(entry);
        Some(plan)
    }

    /// Caches `plan` for `key`, evicting the least recently used plan when full.
    pub fn insert(&self, key: ShapeKey, plan: Arc<P>) {
        let mut entries = self.lock();
        entries.retain(|(k, _)| *k != key);
        if entries.len() >= CAPACITY {
            entries.remove(0);
        }
        entries.push((key, plan));
    }

    /// How many plans are cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(ShapeKey, Arc<P>)>> {
        // Every update leaves the list consistent, so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Dim, TensorType};
    use crate::{DataType, Tensor};

    fn input(dims: Vec<Dim>) -> ValueInfo {
        ValueInfo::new("x", ValueType::Tensor(TensorType { dtype: DataType::Float, shape: Some(dims) }))
    }

    fn given(n: usize) -> Vec<(String, InputValue<'static>)> {
        vec![("x".into(), Tensor::from_vec(vec![n, 2], vec![0.5f32; n * 2]).unwrap().into())]
    }

    #[test]
    fn fixed_inputs_need_no_cache() {
        let inputs = [input(vec![Dim::Fixed(3), Dim::Fixed(2)])];
        let cache = PlanCache::<u32>::new(&inputs);
        assert_eq!(cache.key(&inputs, &given(3)), None);
    }

    #[test]
    fn keeps_the_most_recently_used_plans() {
        let inputs = [input(vec![Dim::Symbol("n".into()), Dim::Fixed(2)])];
        let cache = PlanCache::<usize>::new(&inputs);
        let key = |n| cache.key(&inputs, &given(n)).unwrap();
        assert_eq!(key(5), vec![Some(vec![5, 2])]);
        for n in 0..CAPACITY {
            cache.insert(key(n), Arc::new(n));
        }
        assert_eq!(cache.get(&key(0)).as_deref(), Some(&0), "hit, and now most recently used");
        cache.insert(key(100), Arc::new(100));
        assert_eq!(cache.len(), CAPACITY);
        assert!(cache.get(&key(1)).is_none(), "the least recently used plan was evicted");
        assert_eq!(cache.get(&key(0)).as_deref(), Some(&0));
        assert_eq!(cache.get(&key(100)).as_deref(), Some(&100));
    }
}
