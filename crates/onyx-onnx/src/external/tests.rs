use std::path::Path;

use onyx_core::ir::Model;
use onyx_core::{DataType, Error, Result};
use prost::Message;

use crate::proto::{StringStringEntryProto, TensorProto};
use crate::testutil::*;

fn entry(key: &str, value: &str) -> StringStringEntryProto {
    StringStringEntryProto { key: Some(key.into()), value: Some(value.into()) }
}

fn external(
    name: &str,
    dtype: DataType,
    dims: &[i64],
    location: &str,
    offset: usize,
    length: Option<usize>,
) -> TensorProto {
    let mut entries = vec![entry("location", location), entry("offset", &offset.to_string())];
    entries.extend(length.map(|l| entry("length", &l.to_string())));
    TensorProto {
        name: Some(name.into()),
        data_type: Some(dtype.onnx_code()),
        dims: dims.to_vec(),
        external_data: entries,
        data_location: Some(1),
        ..Default::default()
    }
}

/// Writes a model whose initializers are `tensors` into `dir` and loads it from its path.
fn load_with(dir: &Path, tensors: Vec<TensorProto>) -> Result<Model> {
    let names: Vec<String> = tensors.iter().map(|t| t.name.clone().unwrap()).collect();
    let mut nodes = vec![];
    let mut prev = "x".to_string();
    for (i, n) in names.iter().enumerate() {
        let out = format!("h{i}");
        nodes.push(node("Add", &[&prev, n], &[&out]));
        prev = out;
    }
    nodes.push(node("Identity", &[&prev], &["y"]));
    let mut g = graph_proto(nodes, &["x"], &["y"]);
    g.initializer = tensors;
    let path = dir.join("model.onnx");
    std::fs::write(&path, model_proto(g).encode_to_vec()).unwrap();
    crate::load_model(&path)
}

fn le_bytes<T: bytemuck::Pod>(v: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

/// The path of the file mapping that contains `addr`, from /proc/self/maps.
#[cfg(target_os = "linux")]
fn mapped_file_at(addr: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        let (start, end) = parts.next()?.split_once('-')?;
        let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
        let path = parts.nth(4)?;
        (start <= addr && addr < end).then(|| path.to_string())
    })
}

#[test]
fn tensors_share_one_map_without_copying() {
    let dir = TempDir::new("ext-share");
    let a = [1.5f32, -2.0, 3.25, 4.0, -5.5];
    let b = [7i64, -8, 9];
    let c = [0.5f32, 0.25, -0.125];
    let mut data = vec![0xAAu8; 64];
    data[..20].copy_from_slice(&le_bytes(&a));
    data.extend(le_bytes(&b));
    data.extend([0u8; 6]);
    data.extend(le_bytes(&c)); // at offset 94: misaligned for f32
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub").join("weights.bin"), &data).unwrap();
    let model = load_with(
        dir.path(),
        vec![
            external("a", DataType::Float, &[5], "sub/weights.bin", 0, Some(20)),
            external("b", DataType::Int64, &[3], "./sub/../sub/weights.bin", 64, None),
            external("c", DataType::Float, &[3], "sub/weights.bin", 94, Some(12)),
        ],
    )
    .unwrap();
    let init = &model.graph.initializers;
    let pa = init["a"].as_slice::<f32>().unwrap();
    let pb = init["b"].as_slice::<i64>().unwrap();
    assert_eq!(pa, &a);
    assert_eq!(pb, &b);
    assert_eq!(init["c"].as_slice::<f32>().unwrap(), &c, "a misaligned offset is copied");
    assert_eq!(pb.as_ptr() as usize - pa.as_ptr() as usize, 64, "both tensors point into one map");
    #[cfg(target_os = "linux")]
    {
        let file = mapped_file_at(pa.as_ptr() as usize).expect("tensor a is not in a file mapping");
        assert!(file.ends_with("sub/weights.bin"), "{file}");
        assert_eq!(mapped_file_at(init["c"].as_slice::<f32>().unwrap().as_ptr() as usize), None);
    }
}

#[test]
fn bools_are_normalized() {
    let dir = TempDir::new("ext-bool");
    std::fs::write(dir.path().join("b.bin"), [0u8, 1, 7, 0, 255]).unwrap();
    let model = load_with(dir.path(), vec![external("b", DataType::Bool, &[5], "b.bin", 0, None)]).unwrap();
    assert_eq!(model.graph.initializers["b"].view().unwrap().bytes().unwrap(), &[0, 1, 1, 0, 1]);
}

#[test]
fn rejected_locations_and_ranges() {
    let outside = TempDir::new("ext-outside");
    let secret = outside.path().join("secret.bin");
    std::fs::write(&secret, [1u8; 64]).unwrap();
    let dir = TempDir::new("ext-reject");
    std::fs::write(dir.path().join("w.bin"), [2u8; 64]).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&secret, dir.path().join("link.bin")).unwrap();
    let abs = secret.to_str().unwrap().to_string();
    let up = format!("../{}/secret.bin", outside.path().file_name().unwrap().to_str().unwrap());
    let f = |loc: &str, offset: usize, length: Option<usize>| external("w", DataType::Float, &[4], loc, offset, length);
    let mut cases: Vec<(TensorProto, &str)> = vec![
        (f(&abs, 0, None), "an absolute location points outside"),
        (f(&up, 0, None), "'..' leads outside"),
        (f("sub/../../w.bin", 0, None), "'..' leads outside"),
        (f("missing.bin", 0, None), "missing.bin"),
        (f(".", 0, None), "not a regular file"),
        (f("w.bin", 60, None), "bytes 60..76 are past the end of the file (64 bytes)"),
        (f("w.bin", usize::MAX - 2, None), "past the end"),
        (f("w.bin", 0, Some(12)), "length 12 does not match the tensor's 16 bytes"),
        (TensorProto { external_data: vec![entry("offset", "0")], ..f("w.bin", 0, None) }, "without a 'location'"),
        (
            TensorProto {
                external_data: vec![entry("location", "w.bin"), entry("offset", "-4")],
                ..f("w.bin", 0, None)
            },
            "'offset' is '-4'",
        ),
    ];
    #[cfg(unix)]
    cases.push((f("link.bin", 0, None), "outside the model's folder"));
    for (t, needle) in cases {
        let err = load_with(dir.path(), vec![t]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("tensor 'w'") && msg.contains(needle), "{msg} (want {needle})");
        if needle == "missing.bin" {
            assert!(matches!(&err, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound), "{err}");
        }
    }
}

#[test]
fn external_data_needs_a_folder() {
    let mut g = graph_proto(vec![node("Add", &["x", "w"], &["y"])], &["x"], &["y"]);
    g.initializer = vec![external("w", DataType::Float, &[1], "w.bin", 0, None)];
    let err = load(&model_proto(g)).unwrap_err().to_string();
    assert!(err.contains("tensor 'w'") && err.contains("without a folder"), "{err}");
}

#[cfg(target_os = "linux")]
fn resident_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn a_2gb_external_tensor_is_mapped_not_read() {
    use std::io::{Seek, SeekFrom, Write};
    const COUNT: usize = 550_000_001; // 2.2 GB of f32, an odd count
    let dir = TempDir::new("ext-big");
    let path = dir.path().join("big.bin");
    let mut file = std::fs::File::create(&path).unwrap();
    let len = 4096 + COUNT * 4;
    file.set_len(len as u64).unwrap(); // sparse: costs no disk
    file.seek(SeekFrom::Start((len - 4) as u64)).unwrap();
    file.write_all(&1.75f32.to_le_bytes()).unwrap();
    drop(file);
    let before = resident_kib();
    let model =
        load_with(dir.path(), vec![external("w", DataType::Float, &[COUNT as i64], "big.bin", 4096, None)]).unwrap();
    let w = model.graph.initializers["w"].as_slice::<f32>().unwrap();
    assert_eq!(w.len(), COUNT);
    assert_eq!((w[0], w[COUNT - 1]), (0.0, 1.75));
    let file = mapped_file_at(w.as_ptr() as usize).expect("the tensor is not in a file mapping");
    assert!(file.ends_with("big.bin"), "{file}");
    assert!(mapped_file_at(w.as_ptr() as usize + (COUNT - 1) * 4).is_some_and(|f| f.ends_with("big.bin")));
    let grown = resident_kib().saturating_sub(before);
    assert!(grown < 64 * 1024, "resident memory grew by {grown} KiB");
}
