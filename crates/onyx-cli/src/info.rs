//! `onyx info`.

use std::collections::BTreeMap;
use std::path::Path;

use onyx::types::{Dim, ValueInfo, ValueType};
use onyx::{Result, Session};
use serde_json::{json, Value as Json};

use crate::SessionArgs;

fn dims_json(ty: &ValueType) -> Json {
    match ty {
        ValueType::Tensor(t) | ValueType::SparseTensor(t) => match &t.shape {
            None => Json::Null,
            Some(dims) => dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => json!(n),
                    Dim::Symbol(s) => json!(s),
                    Dim::Unknown => Json::Null,
                })
                .collect(),
        },
        _ => Json::Null,
    }
}

fn dtype_name(ty: &ValueType) -> String {
    match ty {
        ValueType::Tensor(t) | ValueType::SparseTensor(t) => t.dtype.to_string(),
        other => other.to_string(),
    }
}

fn value_json(v: &ValueInfo) -> Json {
    json!({ "name": v.name, "dtype": dtype_name(&v.ty), "shape": dims_json(&v.ty), "type": v.ty.to_string() })
}

/// Prints what the model is and how the session would run it.
pub fn info(path: &Path, as_json: bool, args: &SessionArgs) -> Result<()> {
    let model = onyx::load_model(path)?;
    let graph = &model.graph;
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    count_ops(graph, &mut histogram);
    let parameters: usize = graph.initializers.values().map(|t| t.len()).sum();
    let parameter_bytes: usize = graph.initializers.values().map(|t| t.dtype().byte_len(t.len()).unwrap_or(0)).sum();
    let session = args.builder()?.commit_from_model(model.clone());
    let (inputs, outputs): (Vec<ValueInfo>, Vec<ValueInfo>) = match &session {
        Ok(s) => (s.inputs().to_vec(), s.outputs().to_vec()),
        Err(_) => (graph.runtime_inputs().cloned().collect(), graph.outputs.clone()),
    };
    let opsets: BTreeMap<String, i64> =
        model.opsets.iter().map(|(d, v)| (if d.is_empty() { "ai.onnx".to_string() } else { d.clone() }, *v)).collect();
    if as_json {
        let nodes: Json = match &session {
            Ok(s) => assignments(s).into_iter().map(|(n, o, p)| json!({"name": n, "op": o, "provider": p})).collect(),
            Err(_) => Json::Null,
        };
        let report = json!({
            "path": path.display().to_string(),
            "ir_version": model.ir_version,
            "producer_name": model.producer_name,
            "producer_version": model.producer_version,
            "domain": model.domain,
            "model_version": model.model_version,
            "doc": model.doc,
            "opsets": opsets,
            "metadata": model.metadata.iter().cloned().collect::<BTreeMap<_, _>>(),
            "inputs": inputs.iter().map(value_json).collect::<Vec<_>>(),
            "outputs": outputs.iter().map(value_json).collect::<Vec<_>>(),
            "node_count": graph.nodes.len(),
            "op_histogram": histogram,
            "parameters": parameters,
            "parameter_bytes": parameter_bytes,
            "nodes": nodes,
            "copies_per_run": session.as_ref().ok().map(Session::copies_per_run),
            "session_error": session.as_ref().err().map(|e| e.to_string()),
        });
        println!("{report}");
        return Ok(());
    }
    println!("model      {}", path.display());
    println!("producer   {} {}", model.producer_name, model.producer_version);
    println!("ir version {}", model.ir_version);
    let opsets: Vec<String> = opsets.iter().map(|(d, v)| format!("{d} {v}")).collect();
    println!("opsets     {}", opsets.join(", "));
    for (k, v) in &model.metadata {
        println!("metadata   {k} = {v}");
    }
    println!("inputs");
    for i in &inputs {
        println!("  {}: {}", i.name, i.ty);
    }
    println!("outputs");
    for o in &outputs {
        println!("  {}: {}", o.name, o.ty);
    }
    println!("parameters {parameters} ({:.2} MB)", parameter_bytes as f64 / 1e6);
    println!("ops ({} nodes)", graph.nodes.len());
    for (op, n) in &histogram {
        println!("  {op:<28} {n}");
    }
    match &session {
        Ok(s) => {
            let mut per_provider: BTreeMap<(String, String), usize> = BTreeMap::new();
            for (_, op, p) in assignments(s) {
                *per_provider.entry((p, op)).or_default() += 1;
            }
            println!("placement (copies per run: {})", s.copies_per_run());
            for ((p, op), n) in per_provider {
                println!("  {p:<6} {op:<28} {n}");
            }
        }
        Err(e) => println!("placement  cannot create a session: {e}"),
    }
    Ok(())
}

fn assignments(s: &Session) -> Vec<(String, String, String)> {
    s.assignments().iter().map(|a| (a.node.clone(), a.op.clone(), a.provider.clone())).collect()
}

fn count_ops(graph: &onyx::ir::Graph, histogram: &mut BTreeMap<String, usize>) {
    for node in &graph.nodes {
        let name =
            if node.domain.is_empty() { node.op_type.clone() } else { format!("{}::{}", node.domain, node.op_type) };
        *histogram.entry(name).or_default() += 1;
        for g in node.subgraphs() {
            count_ops(g, histogram);
        }
    }
}
