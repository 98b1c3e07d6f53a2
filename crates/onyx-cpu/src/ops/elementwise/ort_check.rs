//! TEMPORARY: compares kernels with ONNX Runtime outputs from /tmp/ortx/cases.txt.

use super::testing::*;
use onyx_core::{DataType, Tensor};

fn parse_tensor(words: &[&str]) -> Tensor {
    let dtype = DataType::from_name(words[0]).unwrap();
    let shape: Vec<usize> = if words[1] == "-" { vec![] } else { words[1].split(',').map(|s| s.parse().unwrap()).collect() };
    let vals = &words[2..];
    let f = || vals.iter().map(|v| v.parse::<f64>().unwrap()).collect::<Vec<f64>>();
    let i = || vals.iter().map(|v| v.parse::<i128>().unwrap()).collect::<Vec<i128>>();
    match dtype {
        DataType::Float => tensor(&shape, f().into_iter().map(|v| v as f32).collect()),
        DataType::Double => tensor(&shape, f()),
        DataType::Float16 => tensor(&shape, f().into_iter().map(half::f16::from_f64).collect()),
        DataType::Bool => bools(&shape, &i().into_iter().map(|v| v != 0).collect::<Vec<_>>()),
        DataType::Int8 => tensor(&shape, i().into_iter().map(|v| v as i8).collect()),
        DataType::Int16 => tensor(&shape, i().into_iter().map(|v| v as i16).collect()),
        DataType::Int32 => tensor(&shape, i().into_iter().map(|v| v as i32).collect()),
        DataType::Int64 => tensor(&shape, i().into_iter().map(|v| v as i64).collect()),
        DataType::Uint8 => tensor(&shape, i().into_iter().map(|v| v as u8).collect()),
        DataType::Uint16 => tensor(&shape, i().into_iter().map(|v| v as u16).collect()),
        DataType::Uint32 => tensor(&shape, i().into_iter().map(|v| v as u32).collect()),
        DataType::Uint64 => tensor(&shape, i().into_iter().map(|v| v as u64).collect()),
        _ => panic!("dtype"),
    }
}

fn values(t: &Tensor) -> Vec<f64> {
    match t.dtype() {
        DataType::Bool => bool_values(t).into_iter().map(|b| b as u8 as f64).collect(),
        DataType::Uint64 => t.as_slice::<u64>().unwrap().iter().map(|&v| v as f64).collect(),
        d if d.is_integer() => ints(t).into_iter().map(|v| v as f64).collect(),
        _ => floats(t),
    }
}

#[test]
#[ignore]
fn compare_with_onnx_runtime() {
    let text = std::fs::read_to_string("/tmp/ortx/cases.txt").unwrap();
    let (mut total, mut bad) = (0, 0);
    let mut lines = text.lines();
    while let Some(head) = lines.next() {
        let h: Vec<&str> = head.split_whitespace().collect();
        let (op, opset): (&str, i64) = (h[1], h[2].parse().unwrap());
        let mut attrs = vec![];
        let mut inputs: Vec<Option<Tensor>> = vec![];
        let mut want = None;
        for line in lines.by_ref() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w[0] {
                "attr" => attrs.push(match w[1] {
                    "i" => attr_i(w[2], w[3].parse().unwrap()),
                    "f" => attr_f(w[2], w[3].parse().unwrap()),
                    "s" => attr_s(w[2], w[3]),
                    _ => attr_ints(w[2], &w[3].split(',').map(|v| v.parse().unwrap()).collect::<Vec<i64>>()),
                }),
                "input" if w[1] == "none" => inputs.push(None),
                "input" => inputs.push(Some(parse_tensor(&w[1..]))),
                "output" => want = Some(parse_tensor(&w[1..])),
                _ => break,
            }
        }
        total += 1;
        let want = want.unwrap();
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_ref()).collect();
        let desc = format!("{op}-{opset} {:?} inputs {:?}", attrs.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
            inputs.iter().map(|t| t.as_ref().map(|t| (t.dtype(), t.shape().to_vec()))).collect::<Vec<_>>());
        let got = match run_opt(op, opset, attrs.clone(), &refs) {
            Ok(mut v) => v.remove(0),
            Err(e) => { bad += 1; println!("ERROR {desc}: {e}"); continue; }
        };
        if got.dtype() != want.dtype() || got.shape() != want.shape() {
            bad += 1;
            println!("TYPE {desc}: got {}{:?} want {}{:?}", got.dtype(), got.shape(), want.dtype(), want.shape());
            continue;
        }
        let tol = match want.dtype() { DataType::Float16 => 2e-3, DataType::Float => 2e-6, DataType::Double => 1e-12, _ => 0.0 };
        let (g, w) = (values(&got), values(&want));
        let mism: Vec<String> = g.iter().zip(&w).enumerate().filter(|(_, (a, b))| {
            !(a == b || (a.is_nan() && b.is_nan()) || (*a - *b).abs() <= tol * (1.0 + b.abs()))
        }).take(4).map(|(i, (a, b))| format!("[{i}] got {a} want {b}")).collect();
        if !mism.is_empty() {
            bad += 1;
            println!("VALUE {desc}: {}", mism.join("; "));
        }
    }
    println!("{bad} of {total} cases differ");
}
