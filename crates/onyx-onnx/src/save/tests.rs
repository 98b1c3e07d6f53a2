use std::collections::BTreeMap;
use std::sync::Arc;

use half::f16;
use onyx_core::ir::{AttrValue, Attribute, Graph, Model, Node};
use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx_core::{DataType, Device, HostBuffer, Location, Tensor, TensorData};
use prost::Message;

use super::attribute::attribute_to_proto;
use super::tensor::tensor_to_proto;
use super::types::value_info_to_proto;
use super::*;
use crate::external::ExternalData;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::ModelProto;
use crate::testutil::TempDir;

/// Dtype, shape and elements of a tensor, for comparisons (Tensor's Debug omits the elements).
fn fingerprint(t: &Tensor) -> String {
    match t.data() {
        TensorData::Strings(s) => format!("{} {:?} {s:?}", t.dtype(), t.shape()),
        _ => format!("{} {:?} {:?}", t.dtype(), t.shape(), t.view().unwrap().bytes().unwrap()),
    }
}

fn graph_fingerprint(g: &Graph) -> String {
    let inits: Vec<String> = g.initializers.iter().map(|(n, t)| format!("{n}: {}", fingerprint(t))).collect();
    let attrs: Vec<String> = g
        .nodes
        .iter()
        .flat_map(|n| &n.attributes)
        .map(|a| format!("{}: {}", a.name, attr_fingerprint(&a.value)))
        .collect();
    format!("{g:?}\n{inits:?}\n{attrs:?}")
}

fn attr_fingerprint(v: &AttrValue) -> String {
    match v {
        AttrValue::Tensor(t) | AttrValue::SparseTensor(t) => fingerprint(t),
        AttrValue::Tensors(ts) | AttrValue::SparseTensors(ts) => {
            ts.iter().map(fingerprint).collect::<Vec<_>>().join("; ")
        }
        AttrValue::Graph(g) => graph_fingerprint(g),
        AttrValue::Graphs(gs) => gs.iter().map(graph_fingerprint).collect::<Vec<_>>().join("; "),
        other => format!("{other:?}"),
    }
}

/// Random little-endian elements of `dtype` (bools 0 or 1).
fn random_tensor(dtype: DataType, shape: Vec<usize>, rng: &mut fastrand::Rng) -> Tensor {
    let n: usize = shape.iter().product();
    if dtype == DataType::String {
        let strings = (0..n).map(|i| if i % 3 == 0 { String::new() } else { format!("s{}é", rng.u32(..)) }).collect();
        return Tensor::from_strings(shape, strings).unwrap();
    }
    let mut bytes: Vec<u8> = (0..dtype.byte_len(n).unwrap()).map(|_| rng.u8(..)).collect();
    if dtype == DataType::Bool {
        bytes.iter_mut().for_each(|b| *b &= 1);
    }
    Tensor::from_bytes(dtype, shape, crate::tensor::copy_aligned(&bytes).unwrap()).unwrap()
}

fn relu_graph(initializers: BTreeMap<String, Tensor>) -> Graph {
    let float = |name: &str| ValueInfo::new(name, ValueType::Tensor(TensorType::fixed(DataType::Float, &[2, 3])));
    Graph {
        name: "g".into(),
        nodes: vec![Node {
            name: "r".into(),
            op_type: "Relu".into(),
            inputs: vec!["x".into()],
            outputs: vec!["y".into()],
            ..Default::default()
        }],
        inputs: vec![float("x")],
        outputs: vec![float("y")],
        initializers,
        ..Default::default()
    }
}

fn model_of(graph: Graph) -> Model {
    Model { ir_version: 10, opsets: [(String::new(), 17)].into(), graph, ..Default::default() }
}

#[test]
fn every_dtype_round_trips_as_raw_data() {
    let mut rng = fastrand::Rng::with_seed(11);
    for dtype in DataType::ALL {
        // 21 elements: sub-byte types end in a half-filled byte.
        let t = random_tensor(dtype, vec![3, 7], &mut rng);
        let p = tensor_to_proto(&t, Some("w"), "initializer 'w'", None).unwrap();
        assert_eq!(p.data_type, Some(dtype.onnx_code()));
        assert_eq!(p.dims, vec![3, 7]);
        if dtype == DataType::String {
            assert!(p.raw_data.is_none() && p.string_data.len() == 21, "{dtype}");
        } else {
            assert_eq!(p.raw_data.as_deref(), Some(t.view().unwrap().bytes().unwrap()), "{dtype}");
        }
        let back = crate::tensor::tensor_from_proto(p, &mut ExternalData::new(None)).unwrap();
        assert_eq!(fingerprint(&back), fingerprint(&t), "{dtype}");
    }
}

#[test]
fn known_encodings() {
    let raw = |t: Tensor| tensor_to_proto(&t, None, "t", None).unwrap().raw_data.unwrap();
    let halves = Tensor::from_vec(vec![3], vec![f16::from_f32(1.0), f16::from_f32(-2.0), f16::from_f32(0.5)]).unwrap();
    assert_eq!(raw(halves), [0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38]);
    assert_eq!(raw(Tensor::from_bools(vec![3], vec![true, false, true]).unwrap()), [1, 0, 1]);
    assert_eq!(
        raw(Tensor::from_vec(vec![2], vec![-2i64, 258]).unwrap()),
        [254, 255, 255, 255, 255, 255, 255, 255, 2, 1, 0, 0, 0, 0, 0, 0]
    );
    // int4 [1,-2,3,-8,7] packs low nibble first: 0xE1, 0x83, 0x07 (onnx.helper.make_tensor).
    let int4 = Tensor::from_bytes(DataType::Int4, vec![5], HostBuffer::from_vec(vec![0xE1u8, 0x83, 0x07])).unwrap();
    assert_eq!(raw(int4), [0xE1, 0x83, 0x07]);
    let strings = Tensor::from_strings(vec![2], vec!["ab".into(), String::new()]).unwrap();
    let p = tensor_to_proto(&strings, None, "t", None).unwrap();
    assert_eq!(p.string_data, vec![b"ab".to_vec(), vec![]]);
    let empty = tensor_to_proto(&Tensor::zeros(DataType::Float, vec![0, 4]).unwrap(), None, "t", None).unwrap();
    assert_eq!((empty.dims, empty.raw_data), (vec![0, 4], Some(vec![])));
}

#[derive(Debug)]
struct FakeDeviceBuffer;

impl onyx_core::device::DeviceStorage for FakeDeviceBuffer {
    fn device(&self) -> Device {
        Device::Other(3)
    }
    fn byte_len(&self) -> usize {
        24
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn device_tensors_are_errors_naming_the_initializer() {
    let t = Tensor::from_device(DataType::Float, vec![2, 3], Arc::new(FakeDeviceBuffer)).unwrap();
    let model = model_of(relu_graph([("weights".to_string(), t)].into()));
    let err = model_to_bytes(&model).unwrap_err().to_string();
    assert!(err.contains("initializer 'weights'") && err.contains("copy it to the host"), "{err}");
}

fn sub_graph() -> Graph {
    relu_graph([("c".to_string(), Tensor::from_vec(vec![2], vec![1.5f32, -2.0]).unwrap())].into())
}

/// One attribute of each kind and the AttributeType it must be written as.
fn every_attribute_kind() -> Vec<(AttrValue, AttributeType)> {
    use AttributeType as T;
    let mut rng = fastrand::Rng::with_seed(5);
    let int64 = ValueType::Tensor(TensorType { dtype: DataType::Int64, shape: Some(vec![Dim::Symbol("n".into())]) });
    let sparse = Tensor::from_vec(vec![2, 3], vec![0.0f32, 2.5, 0.0, -0.0, 0.0, f32::NAN]).unwrap();
    let sparse_strings = Tensor::from_strings(vec![3], vec![String::new(), "x".into(), String::new()]).unwrap();
    vec![
        (AttrValue::Float(-0.25), T::Float),
        (AttrValue::Int(-7), T::Int),
        (AttrValue::String(vec![b'a', 0xFF]), T::String),
        (AttrValue::Tensor(random_tensor(DataType::Float16, vec![3], &mut rng)), T::Tensor),
        (AttrValue::Graph(Box::new(sub_graph())), T::Graph),
        (AttrValue::SparseTensor(sparse.clone()), T::SparseTensor),
        (AttrValue::Type(ValueType::Sequence(Box::new(int64.clone()))), T::TypeProto),
        (AttrValue::Floats(vec![1.5, f32::INFINITY]), T::Floats),
        (AttrValue::Ints(vec![3, -1, i64::MAX]), T::Ints),
        (AttrValue::Strings(vec![b"x".to_vec(), vec![]]), T::Strings),
        (AttrValue::Tensors(vec![random_tensor(DataType::Int4, vec![5], &mut rng), Tensor::scalar(3i32)]), T::Tensors),
        (AttrValue::Graphs(vec![sub_graph(), Graph { name: "second".into(), ..sub_graph() }]), T::Graphs),
        (AttrValue::SparseTensors(vec![sparse, sparse_strings]), T::SparseTensors),
        (AttrValue::Types(vec![int64, ValueType::Map(DataType::String, Box::new(ValueType::Unknown))]), T::TypeProtos),
    ]
}

#[test]
fn every_attribute_kind_round_trips() {
    let at = Location { node: "n".into(), op: "Op".into() };
    for (value, ty) in every_attribute_kind() {
        let a = Attribute { name: "a".into(), value };
        let p = attribute_to_proto(&a, &at, &mut None, 0).unwrap();
        assert_eq!(p.r#type, Some(ty as i32), "{}", a.value.type_name());
        let back = crate::attribute::attribute(p, &mut ExternalData::new(None), &at, 0).unwrap();
        assert_eq!(back.name, "a");
        assert_eq!(attr_fingerprint(&back.value), attr_fingerprint(&a.value), "{}", a.value.type_name());
    }
}

#[test]
fn sparse_attributes_keep_only_nonzero_elements() {
    let at = Location { node: "n".into(), op: "Op".into() };
    let t = Tensor::from_vec(vec![2, 3], vec![0.0f32, 2.5, 0.0, -0.0, 0.0, 7.0]).unwrap();
    let p = attribute_to_proto(&Attribute { name: "s".into(), value: AttrValue::SparseTensor(t) }, &at, &mut None, 0)
        .unwrap();
    let s = p.sparse_tensor.unwrap();
    assert_eq!(s.dims, vec![2, 3]);
    // -0.0 is not bitwise zero: kept.
    assert_eq!(s.indices.unwrap().raw_data.unwrap(), bytemuck::cast_slice::<i64, u8>(&[1, 3, 5]));
    assert_eq!(s.values.unwrap().raw_data.unwrap(), bytemuck::cast_slice::<f32, u8>(&[2.5, -0.0, 7.0]));
    let int4 = Tensor::from_bytes(DataType::Int4, vec![2], HostBuffer::from_vec(vec![0x21u8])).unwrap();
    let a = Attribute { name: "s".into(), value: AttrValue::SparseTensor(int4) };
    let err = attribute_to_proto(&a, &at, &mut None, 0).unwrap_err().to_string();
    assert!(err.contains("attribute 's' of Op node 'n'") && err.contains("sparse int4"), "{err}");
}

#[test]
fn value_types_of_every_kind_round_trip() {
    let tensor = |dtype, dims: Vec<Dim>| TensorType { dtype, shape: Some(dims) };
    let types = vec![
        ValueType::Tensor(tensor(DataType::Float16, vec![Dim::Symbol("batch".into()), Dim::Unknown, Dim::Fixed(3)])),
        ValueType::Tensor(TensorType { dtype: DataType::Bool, shape: None }),
        ValueType::Tensor(tensor(DataType::Int64, vec![])),
        ValueType::SparseTensor(TensorType::fixed(DataType::Float, &[5, 4])),
        ValueType::Sequence(Box::new(ValueType::Tensor(tensor(DataType::String, vec![Dim::Fixed(2)])))),
        ValueType::Map(DataType::Int64, Box::new(ValueType::Sequence(Box::new(ValueType::Unknown)))),
        ValueType::Optional(Box::new(ValueType::Tensor(TensorType::fixed(DataType::Int4, &[7])))),
        ValueType::Unknown,
    ];
    for ty in types {
        let info = ValueInfo { doc: "about x".into(), ..ValueInfo::new("x", ty) };
        let back = crate::types::value_info(value_info_to_proto(&info)).unwrap();
        assert_eq!(back, info);
    }
    let denoted = ValueInfo {
        denotations: vec![Some("DATA_BATCH".into()), None],
        ..ValueInfo::new("d", ValueType::Tensor(TensorType::fixed(DataType::Float, &[1, 2])))
    };
    assert_eq!(crate::types::value_info(value_info_to_proto(&denoted)).unwrap(), denoted);
}

/// A model with metadata, several domains and an If whose branches read outer values.
fn rich_model() -> Model {
    let mut rng = fastrand::Rng::with_seed(3);
    let float = |name: &str| ValueInfo::new(name, ValueType::Tensor(TensorType::fixed(DataType::Float, &[2, 3])));
    let branch = |name: &str, op: &str| Graph {
        name: name.into(),
        nodes: vec![Node {
            op_type: op.into(),
            inputs: vec!["x".into()],
            outputs: vec![format!("{name}_out")],
            ..Default::default()
        }],
        outputs: vec![float(&format!("{name}_out"))],
        ..Default::default()
    };
    let nodes = vec![
        Node {
            name: "if".into(),
            op_type: "If".into(),
            inputs: vec!["cond".into()],
            outputs: vec!["h".into()],
            attributes: vec![
                Attribute { name: "then_branch".into(), value: AttrValue::Graph(Box::new(branch("then", "Relu"))) },
                Attribute { name: "else_branch".into(), value: AttrValue::Graph(Box::new(branch("", "Neg"))) },
            ],
            doc: "chooses".into(),
            ..Default::default()
        },
        Node {
            name: "add".into(),
            op_type: "Add".into(),
            inputs: vec!["h".into(), "w".into()],
            outputs: vec!["y".into()],
            ..Default::default()
        },
        Node {
            name: "gelu".into(),
            op_type: "Gelu".into(),
            domain: "com.microsoft".into(),
            inputs: vec!["y".into()],
            outputs: vec!["z".into()],
            ..Default::default()
        },
    ];
    let graph = Graph {
        name: "main".into(),
        nodes,
        inputs: vec![ValueInfo::new("cond", ValueType::Tensor(TensorType::fixed(DataType::Bool, &[]))), float("x")],
        outputs: vec![float("z")],
        initializers: [("w".to_string(), random_tensor(DataType::Float, vec![2, 3], &mut rng))].into(),
        value_info: vec![float("h"), float("y")],
        doc: "graph doc".into(),
    };
    Model {
        ir_version: 10,
        producer_name: "onyx-tests".into(),
        producer_version: "1.2".into(),
        domain: "ai.onyx".into(),
        model_version: Some(4),
        doc: "a model".into(),
        opsets: [(String::new(), 17), ("com.microsoft".to_string(), 1)].into(),
        metadata: vec![("b".into(), "2".into()), ("a".into(), "1".into())],
        graph,
    }
}

#[test]
fn models_round_trip_and_the_default_domain_stays_default() {
    let mut model = rich_model();
    onyx_core::ir::check_model(&mut model).unwrap();
    let bytes = model_to_bytes(&model).unwrap();
    let proto = ModelProto::decode(bytes.as_slice()).unwrap();
    let g = proto.graph.as_ref().unwrap();
    assert_eq!(g.node[1].domain, None, "the default domain is written as no domain");
    assert_eq!(g.node[2].domain.as_deref(), Some("com.microsoft"));
    let else_branch = g.node[0].attribute.iter().find(|a| a.name.as_deref() == Some("else_branch")).unwrap();
    assert_eq!(else_branch.g.as_ref().unwrap().name.as_deref(), Some("else_branch"), "unnamed graphs get a name");
    let back = crate::load_model_from_bytes(&bytes, None).unwrap();
    let mut want = model.clone();
    if let AttrValue::Graph(g) = &mut want.graph.nodes[0].attributes[1].value {
        g.name = "else_branch".into();
    }
    assert_eq!(graph_fingerprint(&back.graph), graph_fingerprint(&want.graph));
    let meta = |m: &Model| {
        format!(
            "{} {} {} {} {:?} {} {:?} {:?}",
            m.ir_version, m.producer_name, m.producer_version, m.domain, m.model_version, m.doc, m.opsets, m.metadata
        )
    };
    assert_eq!(meta(&back), meta(&model));
    assert_eq!(model_to_bytes(&back).unwrap(), bytes, "saving is a fixed point");
}

#[test]
fn models_built_in_code_get_an_ir_version_and_graph_name() {
    let mut model = model_of(Graph { name: String::new(), ..relu_graph(BTreeMap::new()) });
    model.ir_version = 0;
    for (opset, ir) in [(7, 3), (13, 7), (17, 8), (21, 10), (23, 11)] {
        model.opsets.insert(String::new(), opset);
        let proto = ModelProto::decode(model_to_bytes(&model).unwrap().as_slice()).unwrap();
        assert_eq!(proto.ir_version, Some(ir), "opset {opset}");
        assert_eq!(proto.graph.unwrap().name.as_deref(), Some("main_graph"));
    }
}

/// A model with one initializer per size in `sizes` (float elements), Add-ed in a chain.
fn chain_model(sizes: &[usize], rng: &mut fastrand::Rng) -> Model {
    let mut graph = relu_graph(BTreeMap::new());
    for (i, &n) in sizes.iter().enumerate() {
        graph.initializers.insert(format!("w{i}"), random_tensor(DataType::Float, vec![n], rng));
    }
    model_of(graph)
}

fn data_entries(t: &crate::proto::TensorProto) -> BTreeMap<String, String> {
    t.external_data.iter().map(|e| (e.key.clone().unwrap(), e.value.clone().unwrap())).collect()
}

#[test]
fn large_tensors_go_to_one_aligned_external_file() {
    let dir = TempDir::new("save-ext");
    let mut rng = fastrand::Rng::with_seed(9);
    // 100 floats stay inline (< 1024 bytes); 300 floats go out at 64-byte offsets; 300k floats
    // (> 1 MiB) start on a 64 KiB boundary.
    let model = chain_model(&[300, 100, 300_000, 301], &mut rng);
    let path = dir.path().join("m.onnx");
    let options = SaveOptions { external_data_above: 0, ..SaveOptions::default() };
    save_model_with_options(&model, &path, &options).unwrap();
    let proto = ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
    let mut ends = vec![];
    for t in &proto.graph.unwrap().initializer {
        let entries = data_entries(t);
        if t.name.as_deref() == Some("w1") {
            assert!(entries.is_empty() && t.raw_data.is_some(), "small tensors stay inline");
            continue;
        }
        assert_eq!(t.data_location, Some(1));
        assert_eq!(entries["location"], "m.onnx.data");
        let (offset, length): (u64, u64) = (entries["offset"].parse().unwrap(), entries["length"].parse().unwrap());
        let align = if length >= 1 << 20 { 65536 } else { 64 };
        assert_eq!(offset % align, 0, "{:?} at {offset}", t.name);
        ends.push(offset + length);
    }
    assert_eq!(ends.len(), 3);
    let file_len = std::fs::metadata(dir.path().join("m.onnx.data")).unwrap().len();
    assert_eq!(file_len, *ends.iter().max().unwrap());
    let back = crate::load_model(&path).unwrap();
    assert_eq!(graph_fingerprint(&back.graph), graph_fingerprint(&model.graph));
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 2, "no temporary files left: {leftovers:?}");
}

#[test]
fn a_model_can_be_saved_over_the_files_it_was_loaded_from() {
    let dir = TempDir::new("save-over");
    let mut rng = fastrand::Rng::with_seed(4);
    let model = chain_model(&[5000, 7000], &mut rng);
    let path = dir.path().join("m.onnx");
    let options = SaveOptions { external_data_above: 0, ..SaveOptions::default() };
    save_model_with_options(&model, &path, &options).unwrap();
    // The loaded model maps m.onnx.data; saving over it must not change what it sees.
    let loaded = crate::load_model(&path).unwrap();
    let mut changed = loaded.clone();
    changed.graph.initializers.insert("w0".into(), random_tensor(DataType::Float, vec![5000], &mut rng));
    save_model_with_options(&changed, &path, &options).unwrap();
    assert_eq!(graph_fingerprint(&loaded.graph), graph_fingerprint(&model.graph));
    let again = crate::load_model(&path).unwrap();
    assert_eq!(graph_fingerprint(&again.graph), graph_fingerprint(&changed.graph));
}

#[test]
fn small_models_stay_in_one_file_and_errors_leave_no_files() {
    let dir = TempDir::new("save-small");
    let mut rng = fastrand::Rng::with_seed(2);
    let path = dir.path().join("m.onnx");
    let model = chain_model(&[5000], &mut rng);
    save_model(&model, &path).unwrap();
    assert!(!dir.path().join("m.onnx.data").exists());
    assert_eq!(graph_fingerprint(&crate::load_model(&path).unwrap().graph), graph_fingerprint(&model.graph));
    let t = Tensor::from_device(DataType::Float, vec![6], Arc::new(FakeDeviceBuffer)).unwrap();
    let mut bad = chain_model(&[5000], &mut rng);
    bad.graph.initializers.insert("z_device".into(), t);
    let bad_path = dir.path().join("bad.onnx");
    let options = SaveOptions { external_data_above: 0, ..SaveOptions::default() };
    let err = save_model_with_options(&bad, &bad_path, &options).unwrap_err().to_string();
    assert!(err.contains("initializer 'z_device'"), "{err}");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("m.onnx")]);
    let err = save_model(&bad, Path::new("/")).unwrap_err().to_string();
    assert!(err.contains("expected a file name"), "{err}");
}

/// Over 2 GiB of weights: written as external data without being asked. Writes 2.1 GB to the
/// temp folder, so it runs only when asked: `cargo test -p onyx-onnx -- --ignored above_2_gib`.
#[test]
#[ignore]
fn models_above_2_gib_get_external_data_by_default() {
    let dir = TempDir::new("save-2gib");
    let n = (2usize << 30) / 4 + 1000;
    let mut values = vec![0f32; n];
    values[n - 1] = 3.5;
    values[12345] = -1.0;
    let big = Tensor::from_vec(vec![n], values).unwrap();
    let mut model = chain_model(&[10], &mut fastrand::Rng::with_seed(1));
    model.graph.initializers.insert("big".into(), big);
    let path = dir.path().join("big.onnx");
    save_model(&model, &path).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20);
    assert!(std::fs::metadata(dir.path().join("big.onnx.data")).unwrap().len() >= (n * 4) as u64);
    let back = crate::load_model(&path).unwrap();
    let b = back.graph.initializers["big"].as_slice::<f32>().unwrap();
    assert_eq!((b.len(), b[n - 1], b[12345], b[0]), (n, 3.5, -1.0, 0.0));
    let err = model_to_bytes(&model).unwrap_err().to_string();
    assert!(err.contains("2 GiB") && err.contains("save_model"), "{err}");
}
