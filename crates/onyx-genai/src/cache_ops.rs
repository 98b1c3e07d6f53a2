//! Operations on KV cache tensors where they live: choosing rows (beam search reorders its
//! beams, a prompt's cache is copied to every beam), keeping the first positions (rewind) and
//! adding zero positions (a shared buffer's capacity grows). Each is a one-node ONNX graph
//! (Gather, Slice, Pad) run on the model's own providers, so a GPU cache never goes through the
//! host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use onyx_runtime::ep::ExecutionProvider;
use onyx_runtime::ir::{AttrValue, Attribute, Graph, Model as IrModel, Node};
use onyx_runtime::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx_runtime::{DataType, Device, IoBinding, Session, SessionBuilder, Tensor};

use crate::error::Result;

/// Which one-node graph.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Op {
    /// `Gather(x, rows, axis = 0)`.
    Rows,
    /// `Slice(x, starts = [0], ends = [n], axes = [2])`.
    Positions,
    /// `Pad(x, pads)`: zero positions after the last (a shared buffer's new capacity).
    Grow,
}

/// The one-node sessions of a model, made on first use per op and element type.
pub(crate) struct CacheOps {
    providers: Vec<Arc<dyn ExecutionProvider>>,
    device: Device,
    sessions: Mutex<HashMap<(Op, DataType), Arc<Session>>>,
}

impl CacheOps {
    pub fn new(providers: Vec<Arc<dyn ExecutionProvider>>, device: Device) -> CacheOps {
        CacheOps { providers, device, sessions: Mutex::default() }
    }

    /// Rows `rows` of `t` (its first dimension), on the cache device.
    pub fn rows(&self, t: &Tensor, rows: &[i64]) -> Result<Tensor> {
        let rows = Tensor::from_vec(vec![rows.len()], rows.to_vec())?;
        self.run(Op::Rows, t, rows)
    }

    /// The first `n` positions of a cache tensor `[batch, heads, length, head_size]`.
    pub fn positions(&self, t: &Tensor, n: usize) -> Result<Tensor> {
        let ends = Tensor::from_vec(vec![1], vec![n as i64])?;
        self.run(Op::Positions, t, ends)
    }

    /// `t` `[batch, heads, length, head_size]` with zero positions after its own, up to
    /// `capacity` in all.
    pub fn grow(&self, t: &Tensor, capacity: usize) -> Result<Tensor> {
        let extra = capacity.saturating_sub(t.shape().get(2).copied().unwrap_or(0)) as i64;
        let pads = Tensor::from_vec(vec![8], vec![0, 0, 0, 0, 0, 0, extra, 0])?;
        self.run(Op::Grow, t, pads)
    }

    /// A zero-filled tensor on the cache device.
    pub fn zeros(&self, dtype: DataType, shape: Vec<usize>) -> Result<Tensor> {
        let host = Tensor::zeros(dtype, shape)?;
        match self.providers.iter().find(|p| p.device() == self.device).filter(|_| self.device != Device::Cpu) {
            Some(p) => Ok(p.upload(host.view()?)?),
            None => Ok(host),
        }
    }

    /// `t` on the host (downloaded from the cache device when it is there).
    pub fn to_host(&self, t: &Tensor) -> Result<Tensor> {
        match self.providers.iter().find(|p| p.device() == t.device()).filter(|_| t.device() != Device::Cpu) {
            Some(p) => Ok(p.download(t)?),
            None => Ok(t.clone()),
        }
    }

    fn run(&self, op: Op, t: &Tensor, arg: Tensor) -> Result<Tensor> {
        let session = self.session(op, t.dtype())?;
        let mut binding = IoBinding::new();
        binding.bind_input("x", t.clone()).bind_input("arg", arg).bind_output_to_device("y", self.device);
        let outputs = session.run_with_binding(binding)?;
        Ok(outputs.get("y")?.as_tensor()?.clone())
    }

    fn session(&self, op: Op, dtype: DataType) -> Result<Arc<Session>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = sessions.get(&(op, dtype)) {
            return Ok(s.clone());
        }
        let mut builder = SessionBuilder::new();
        for p in &self.providers {
            builder = builder.with_provider(p.clone());
        }
        let session = Arc::new(builder.commit_from_model(graph(op, dtype)?)?);
        sessions.insert((op, dtype), session.clone());
        Ok(session)
    }
}

fn tensor_info(name: &str, dtype: DataType, dims: &[&str]) -> ValueInfo {
    let shape = dims.iter().map(|d| Dim::Symbol(d.to_string())).collect();
    ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor(TensorType { dtype, shape: Some(shape) }),
        denotations: vec![],
        doc: String::new(),
    }
}

fn ints(name: &str, values: Vec<i64>) -> Result<(String, Tensor)> {
    Ok((name.to_string(), Tensor::from_vec(vec![values.len()], values)?))
}

/// The one-node model of `op` on cache tensors of `dtype`.
fn graph(op: Op, dtype: DataType) -> Result<IrModel> {
    let cache = ["batch", "heads", "length", "head_size"];
    let (node, initializers) = match op {
        Op::Rows => (
            Node {
                name: "rows".into(),
                op_type: "Gather".into(),
                inputs: vec!["x".into(), "arg".into()],
                outputs: vec!["y".into()],
                attributes: vec![Attribute { name: "axis".into(), value: AttrValue::Int(0) }],
                ..Node::default()
            },
            vec![],
        ),
        Op::Positions => (
            Node {
                name: "positions".into(),
                op_type: "Slice".into(),
                inputs: vec!["x".into(), "starts".into(), "arg".into(), "axes".into()],
                outputs: vec!["y".into()],
                ..Node::default()
            },
            vec![ints("starts", vec![0])?, ints("axes", vec![2])?],
        ),
        Op::Grow => (
            Node {
                name: "grow".into(),
                op_type: "Pad".into(),
                inputs: vec!["x".into(), "arg".into()],
                outputs: vec!["y".into()],
                ..Node::default()
            },
            vec![],
        ),
    };
    let graph = Graph {
        name: format!("{op:?}"),
        nodes: vec![node],
        inputs: vec![tensor_info("x", dtype, &cache), tensor_info("arg", DataType::Int64, &["n"])],
        outputs: vec![tensor_info("y", dtype, &["batch_out", "heads", "length_out", "head_size"])],
        initializers: initializers.into_iter().collect(),
        ..Graph::default()
    };
    let mut model = IrModel { ir_version: 8, graph, ..IrModel::default() };
    model.opsets.insert(String::new(), 17);
    Ok(model)
}
