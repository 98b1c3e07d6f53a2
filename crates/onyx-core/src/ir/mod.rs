//! The in-memory model: graphs of nodes with typed attributes, independent of protobuf.

mod attribute;
mod check;
mod graph;

pub use attribute::{AttrValue, Attribute};
pub use check::{check_model, topo_sort, MAX_IR_VERSION, MAX_SUBGRAPH_DEPTH};
pub use graph::{Graph, Model, Node, OpsetImports, DEFAULT_DOMAIN, MS_DOMAIN, ONYX_DOMAIN};
