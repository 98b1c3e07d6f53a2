//! Model-local functions (`ModelProto.functions`), inlined at load: every node that calls one is
//! replaced by the function's body, recursively, before the graph is converted.
//!
//! Inlining renames the formal inputs and outputs to the call's actual names (omitted optional
//! inputs become `""`), gives every internal value a fresh unique name, and replaces attribute
//! references (`ref_attr_name`) by the call's attribute of that name, else by the function's
//! default (`attribute_proto`), else drops the attribute.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use onyx_core::{Error, Location, Result};

use crate::normalize_domain;
use crate::proto::{AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto};

/// Inlining stops with an error once it has produced this many nodes (a file can nest calls so
/// that the inlined graph grows exponentially).
const MAX_INLINED_NODES: usize = 1 << 22;

/// Calls nested deeper than this (F calls G calls H ...) are rejected, so that a long chain
/// of functions cannot overflow the stack.
const MAX_CALL_DEPTH: usize = 128;

/// (domain, name, overload) of a function or of the op a node calls.
type Key = (String, String, String);

/// An opset import of a function that was inlined: (function, domain, version).
pub(crate) type FunctionOpset = (String, String, i64);

fn key_of(domain: Option<&str>, name: Option<&str>, overload: Option<&str>) -> Key {
    (normalize_domain(domain), name.unwrap_or("").to_string(), overload.unwrap_or("").to_string())
}

fn display(key: &Key) -> String {
    let domain = if key.0.is_empty() { "ai.onnx" } else { &key.0 };
    if key.2.is_empty() {
        format!("{domain}::{}", key.1)
    } else {
        format!("{domain}::{}:{}", key.1, key.2)
    }
}

/// Inlines every call of a local function in the model's graph (subgraphs included) and
/// returns the opset imports of the functions used, to merge into the model's.
pub(crate) fn inline_functions(model: &mut ModelProto) -> Result<Vec<FunctionOpset>> {
    inline_with_limit(model, MAX_INLINED_NODES)
}

/// [`inline_functions`] that stops after making `max_nodes` nodes.
fn inline_with_limit(model: &mut ModelProto, max_nodes: usize) -> Result<Vec<FunctionOpset>> {
    let functions = std::mem::take(&mut model.functions);
    let Some(graph) = model.graph.as_mut() else { return Ok(vec![]) };
    if functions.is_empty() {
        return Ok(vec![]);
    }
    let mut inliner = Inliner::new(functions, graph, max_nodes)?;
    inliner.inline_graph(graph, 0)?;
    Ok(inliner.used_opsets())
}

struct Inliner {
    functions: HashMap<Key, Rc<FunctionProto>>,
    used: BTreeSet<Key>,
    stack: Vec<Key>,
    taken_names: HashSet<String>,
    calls: usize,
    nodes: usize,
    max_nodes: usize,
}

impl Inliner {
    fn new(functions: Vec<FunctionProto>, graph: &GraphProto, max_nodes: usize) -> Result<Self> {
        let mut map = HashMap::new();
        for f in functions {
            let key = key_of(f.domain.as_deref(), f.name.as_deref(), f.overload.as_deref());
            if key.1.is_empty() {
                return Err(Error::InvalidModel("a model-local function has no name".into()));
            }
            if map.insert(key.clone(), Rc::new(f)).is_some() {
                return Err(Error::InvalidModel(format!("function {} is defined twice", display(&key))));
            }
        }
        let mut taken_names = HashSet::new();
        collect_names(graph, &mut taken_names);
        Ok(Inliner { functions: map, used: BTreeSet::new(), stack: vec![], taken_names, calls: 0, nodes: 0, max_nodes })
    }

    fn inline_graph(&mut self, graph: &mut GraphProto, depth: usize) -> Result<()> {
        if depth > crate::MAX_SUBGRAPH_DEPTH {
            return Err(Error::InvalidModel(format!(
                "subgraphs are nested more than {} deep",
                crate::MAX_SUBGRAPH_DEPTH
            )));
        }
        let nodes = std::mem::take(&mut graph.node);
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            self.expand(node, &mut out, depth)?;
        }
        graph.node = out;
        Ok(())
    }

    /// Appends `node` to `out`, or the inlined body if it calls a local function.
    fn expand(&mut self, mut node: NodeProto, out: &mut Vec<NodeProto>, depth: usize) -> Result<()> {
        let key = key_of(node.domain.as_deref(), node.op_type.as_deref(), node.overload.as_deref());
        let Some(function) = self.functions.get(&key).cloned() else {
            for attr in &mut node.attribute {
                for g in attr.g.iter_mut().chain(attr.graphs.iter_mut()) {
                    self.inline_graph(g, depth + 1)?;
                }
            }
            self.nodes += 1;
            if self.nodes > self.max_nodes {
                return Err(Error::InvalidModel(format!(
                    "inlining local functions makes more than {} nodes",
                    self.max_nodes
                )));
            }
            out.push(node);
            return Ok(());
        };
        if self.stack.contains(&key) {
            let chain: Vec<String> = self.stack.iter().chain([&key]).map(display).collect();
            return Err(Error::InvalidModel(format!(
                "function {} calls itself ({}); recursive functions cannot be inlined",
                display(&key),
                chain.join(" -> ")
            )));
        }
        if self.stack.len() >= MAX_CALL_DEPTH {
            return Err(Error::InvalidModel(format!(
                "function calls are nested more than {MAX_CALL_DEPTH} deep (at {})",
                display(&key)
            )));
        }
        let body = self.instantiate(&function, &node, &key)?;
        self.used.insert(key.clone());
        self.stack.push(key);
        for n in body {
            self.expand(n, out, depth)?;
        }
        self.stack.pop();
        Ok(())
    }

    /// The function's nodes with names and attributes bound to `call`.
    fn instantiate(&mut self, f: &FunctionProto, call: &NodeProto, key: &Key) -> Result<Vec<NodeProto>> {
        let at = Location { node: call.name.clone().unwrap_or_default(), op: key.1.clone() };
        for (kind, given, declared) in
            [("inputs", call.input.len(), f.input.len()), ("outputs", call.output.len(), f.output.len())]
        {
            if given > declared {
                return Err(Error::node(
                    &at,
                    format!("calls function {} with {given} {kind}, but it declares {declared}", display(key)),
                ));
            }
        }
        self.calls += 1;
        let mut renamer =
            Renamer { map: HashMap::new(), prefix: format!("_{}{}_", key.1, self.calls), taken: &mut self.taken_names };
        for (i, formal) in f.input.iter().enumerate() {
            renamer.map.insert(formal.clone(), call.input.get(i).cloned().unwrap_or_default());
        }
        for (formal, actual) in f.output.iter().zip(&call.output).filter(|(_, a)| !a.is_empty()) {
            renamer.map.insert(formal.clone(), actual.clone());
        }
        let attrs = AttrSource { call: &call.attribute, defaults: &f.attribute_proto };
        let call_name = if at.node.is_empty() { renamer.prefix.clone() } else { format!("{}/", at.node) };
        let mut body = f.node.clone();
        for n in &mut body {
            renamer.node(n);
            attrs.resolve(&mut n.attribute);
            n.name = Some(format!("{call_name}{}", n.name.as_deref().unwrap_or("")));
        }
        Ok(body)
    }

    fn used_opsets(&self) -> Vec<FunctionOpset> {
        let mut out = vec![];
        for key in &self.used {
            if let Some(f) = self.functions.get(key) {
                for o in &f.opset_import {
                    out.push((display(key), normalize_domain(o.domain.as_deref()), o.version.unwrap_or(0)));
                }
            }
        }
        out
    }
}

/// Renames the values of one function instance: formals to actuals, the rest to fresh names.
struct Renamer<'a> {
    map: HashMap<String, String>,
    prefix: String,
    taken: &'a mut HashSet<String>,
}

impl Renamer<'_> {
    fn name(&mut self, name: &mut String) {
        if name.is_empty() {
            return;
        }
        if let Some(new) = self.map.get(name.as_str()) {
            *name = new.clone();
            return;
        }
        let mut fresh = format!("{}{name}", self.prefix);
        let mut n = 0;
        while self.taken.contains(&fresh) {
            n += 1;
            fresh = format!("{}{name}_{n}", self.prefix);
        }
        self.taken.insert(fresh.clone());
        self.map.insert(std::mem::replace(name, fresh.clone()), fresh);
    }

    fn node(&mut self, node: &mut NodeProto) {
        node.input.iter_mut().chain(node.output.iter_mut()).for_each(|n| self.name(n));
        for attr in &mut node.attribute {
            for g in attr.g.iter_mut().chain(attr.graphs.iter_mut()) {
                self.graph(g);
            }
        }
    }

    fn graph(&mut self, g: &mut GraphProto) {
        for info in g.input.iter_mut().chain(g.output.iter_mut()).chain(g.value_info.iter_mut()) {
            if let Some(n) = info.name.as_mut() {
                self.name(n);
            }
        }
        let sparse_values = g.sparse_initializer.iter_mut().filter_map(|s| s.values.as_mut());
        for t in g.initializer.iter_mut().chain(sparse_values) {
            if let Some(n) = t.name.as_mut() {
                self.name(n);
            }
        }
        g.node.iter_mut().for_each(|n| self.node(n));
    }
}

/// Where attribute references are resolved: the call's attributes, then the defaults.
struct AttrSource<'a> {
    call: &'a [AttributeProto],
    defaults: &'a [AttributeProto],
}

impl AttrSource<'_> {
    /// Replaces every reference in `attrs` (and in their subgraphs) by its value, or drops it.
    fn resolve(&self, attrs: &mut Vec<AttributeProto>) {
        let mut out = Vec::with_capacity(attrs.len());
        for mut a in std::mem::take(attrs) {
            let Some(r) = a.ref_attr_name.as_deref().filter(|r| !r.is_empty()) else {
                for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                    g.node.iter_mut().for_each(|n| self.resolve(&mut n.attribute));
                }
                out.push(a);
                continue;
            };
            let found = self.call.iter().chain(self.defaults).find(|v| v.name.as_deref() == Some(r));
            if let Some(v) = found {
                out.push(AttributeProto { name: a.name.take(), ref_attr_name: None, ..v.clone() });
            }
        }
        *attrs = out;
    }
}

/// Every value name of `graph` and its subgraphs.
fn collect_names(graph: &GraphProto, names: &mut HashSet<String>) {
    let infos = graph.input.iter().chain(&graph.output).chain(&graph.value_info);
    names.extend(infos.filter_map(|i| i.name.clone()));
    names.extend(graph.initializer.iter().filter_map(|t| t.name.clone()));
    names.extend(graph.sparse_initializer.iter().filter_map(|s| s.values.as_ref()?.name.clone()));
    for node in &graph.node {
        names.extend(node.input.iter().chain(&node.output).cloned());
        for a in &node.attribute {
            a.g.iter().chain(&a.graphs).for_each(|g| collect_names(g, names));
        }
    }
}

#[cfg(test)]
mod tests;
