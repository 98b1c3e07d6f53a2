//! Builders of ModelProtos for the tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use onyx_core::ir::Model;
use onyx_core::{DataType, Result};
use prost::Message;

use crate::proto::attribute_proto::AttributeType;
use crate::proto::tensor_shape_proto::{dimension, Dimension};
use crate::proto::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};

/// A tensor value info with fixed dims.
pub(crate) fn tensor_info(name: &str, dtype: DataType, dims: &[i64]) -> ValueInfoProto {
    let dim =
        dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), denotation: None }).collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dtype.onnx_code()),
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
        ..Default::default()
    }
}

/// A node of the default domain.
pub(crate) fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outputs.first().unwrap_or(&""))),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// A graph of float [2,3] inputs and outputs.
pub(crate) fn graph_proto(nodes: Vec<NodeProto>, inputs: &[&str], outputs: &[&str]) -> GraphProto {
    GraphProto {
        name: Some("g".into()),
        node: nodes,
        input: inputs.iter().map(|n| tensor_info(n, DataType::Float, &[2, 3])).collect(),
        output: outputs.iter().map(|n| tensor_info(n, DataType::Float, &[2, 3])).collect(),
        ..Default::default()
    }
}

/// A model of IR version 10 importing opset 17 of the default domain.
pub(crate) fn model_proto(graph: GraphProto) -> ModelProto {
    ModelProto { ir_version: Some(10), opset_import: vec![opset("", 17)], graph: Some(graph), ..Default::default() }
}

/// An opset import.
pub(crate) fn opset(domain: &str, version: i64) -> OperatorSetIdProto {
    OperatorSetIdProto { domain: Some(domain.into()), version: Some(version) }
}

/// A float tensor.
pub(crate) fn float_tensor(name: &str, dims: &[i64], data: Vec<f32>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Float.onnx_code()),
        dims: dims.to_vec(),
        float_data: data,
        ..Default::default()
    }
}

/// A FLOAT attribute.
pub(crate) fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

/// A GRAPH attribute.
pub(crate) fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

/// Encodes and loads a model without a folder.
pub(crate) fn load(m: &ModelProto) -> Result<Model> {
    crate::load_model_from_bytes(&m.encode_to_vec(), None)
}

/// A fresh folder under the system's temp dir, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// Creates the folder.
    pub(crate) fn new(tag: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("onyx-onnx-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The folder.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
